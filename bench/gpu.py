"""The OpenCL backend on this machine's OpenCL device (PoCL, a CPU driver, here):

    .venv/bin/python bench/gpu.py [--sizes 512 1024] [--repeats 3]

Rows:
- matmul N x N x N (float32): the searched program (`mode="optimal"`: the tile size
  timed on the device), the static GPU lowering (16 x 16 tiles in local memory) and the
  untiled loop kernel, each against numpy's BLAS on the host: ratio = luminal time /
  numpy time (below 1 is faster). A run includes copying the result back to the host.
- program build: the same graph's OpenCL program built cold (no luminal cache, PoCL's own
  kernel cache off) and loaded from luminal's program cache.

PoCL runs GPU-style kernels (work-groups, local memory, barriers) on the CPU: these
timings check that the lowering and the search work end to end; they say nothing about
GPU speed. Times are minima over repeats, contestants in turns, in this process.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ["POCL_KERNEL_CACHE"] = "0"  # before the driver loads: cold builds are cold

import numpy as np  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.backends.opencl import toolchain  # noqa: E402


def matmul_graph(a: np.ndarray, b: np.ndarray) -> lm.Graph:
    cx = lm.Graph()
    (cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)).retrieve()
    return cx


def best_of(run, repeats: int) -> float:  # noqa: ANN001 - a callable
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_rows(n: int, repeats: int) -> list[str]:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    graphs = {}
    compile_seconds = {}
    for label, compiler in (
        ("searched", lm.OpenCLCompiler(mode="optimal")),
        ("static (tile 16)", lm.OpenCLCompiler()),
        ("untiled", lm.OpenCLCompiler(tile=0)),
    ):
        cx = matmul_graph(a, b)
        start = time.perf_counter()
        cx.compile(compiler)
        compile_seconds[label] = time.perf_counter() - start
        graphs[label] = (cx, compiler)
    numpy_seconds = best_of(lambda: a @ b, repeats)
    rows = []
    for label, (cx, compiler) in graphs.items():
        seconds = best_of(cx.execute, repeats)
        extra = ""
        if compiler.search_record is not None:
            extra = f", chose tile {compiler.search_record.chosen.get('matmul0')}"
        gflops = 2 * n**3 / seconds / 1e9
        rows.append(
            f"matmul {n}^3 {label:<17} {seconds * 1e3:9.1f} ms  {gflops:6.2f} GFLOP/s  "
            f"ratio vs numpy {seconds / numpy_seconds:8.1f}  (compile "
            f"{compile_seconds[label]:.1f} s{extra})"
        )
    rows.append(f"matmul {n}^3 numpy (host BLAS)   {numpy_seconds * 1e3:9.1f} ms")
    return rows


def build_rows() -> list[str]:
    rng = np.random.default_rng(1)
    cx = lm.Graph()
    x = cx.tensor((64, 128)).set(rng.standard_normal((64, 128), dtype=np.float32))
    w = cx.tensor((128, 128)).set(rng.standard_normal((128, 128), dtype=np.float32))
    (x @ w).relu().softmax(-1).layer_norm(-1).retrieve()
    source = lm.OpenCLCompiler().render(cx)
    device = toolchain.open_device()
    start = time.perf_counter()
    toolchain.build_program(device, source)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    toolchain.build_program(device, source)
    cached = time.perf_counter() - start
    kernels = source.count("__kernel void")
    return [
        f"program build ({kernels} kernels) cold      {cold * 1e3:9.1f} ms",
        f"program build ({kernels} kernels) cached    {cached * 1e3:9.1f} ms",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.chmod(cache, 0o700)
        os.environ["LUMINAL_CACHE_DIR"] = cache  # a first compile and a first search
        device = toolchain.open_device()
        print(f"device: {device.info.label} ({device.info.driver})")
        for row in build_rows():
            print(row)
        for n in args.sizes:
            for row in matmul_rows(n, args.repeats):
                print(row)
    print("PoCL runs GPU-style kernels on the CPU: these timings say nothing about GPU speed.")


if __name__ == "__main__":
    main()

"""The CPU backend against PyTorch eager and numpy, in one run, with equal threads.

    .venv/bin/python bench/cpu.py [--threads N] [--repeats N]

Prints absolute times and ratios (luminal time / peer time: below 1 is faster):
MLP 784-512-512-10 at batch 64; an 8-op elementwise chain on 16M floats against the
machine's copy bandwidth measured in the same run; row softmax and layer norm
4096x1024; matmul 1024^2 against numpy's BLAS; first and cached compile of the MLP.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import torch
from common import best_of, equal_threads, parallel_copy_seconds
from rows import Row, against
from timing import BestOf, Timer

import luminal as lm

BENCH = "cpu"


def compiled(build: Callable[[lm.Graph], list[lm.GraphTensor]]) -> tuple[lm.Graph, list]:
    cx = lm.Graph()
    outs = build(cx)
    cx.compile(lm.CPUCompiler())
    return cx, outs


def row(name: str, times: dict[str, float], extra: str = "") -> list[Row]:
    """Print one line (luminal first, then each peer with its ratio); return its rows."""
    ours = times["luminal"]
    peers = {k: v for k, v in times.items() if k != "luminal"}
    ratios = "  ".join(f"{k} {v * 1e3:8.3f} ms ({ours / v:5.2f}x)" for k, v in peers.items())
    print(f"{name:<30} luminal {ours * 1e3:8.3f} ms  {ratios} {extra}")
    return against(BENCH, name, times, note=extra.strip(" |"))


def bench_mlp(rng: np.random.Generator, timer: Timer) -> list[Row]:
    sizes = [784, 512, 512, 10]
    ws = [
        rng.standard_normal((i, o)).astype(np.float32) * 0.05
        for i, o in zip(sizes, sizes[1:], strict=False)
    ]
    bs = [rng.standard_normal(o).astype(np.float32) * 0.05 for o in sizes[1:]]
    x = rng.standard_normal((64, 784)).astype(np.float32)

    def build(cx: lm.Graph) -> list:
        h = cx.tensor((64, 784)).set(x)
        for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
            h = h @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b)
            if i < 2:
                h = h.relu()
        return [h.retrieve()]

    cx, (out,) = compiled(build)
    tw = [torch.tensor(w) for w in ws]
    tb = [torch.tensor(b) for b in bs]
    tx = torch.tensor(x)

    def torch_mlp() -> torch.Tensor:
        with torch.no_grad():
            h = tx
            for i in range(3):
                h = torch.addmm(tb[i], h, tw[i])
                if i < 2:
                    h = torch.relu(h)
            return h

    def numpy_mlp() -> np.ndarray:
        h = x
        for i in range(3):
            h = h @ ws[i] + bs[i]
            if i < 2:
                h = np.maximum(h, 0)
        return h

    cx.execute()
    np.testing.assert_allclose(out.numpy(), numpy_mlp(), rtol=1e-3, atol=1e-4)
    return row(
        "MLP 784-512-512-10 b=64",
        timer.times({"luminal": cx.execute, "torch": torch_mlp, "numpy": numpy_mlp}),
    )


def bench_elementwise(rng: np.random.Generator, timer: Timer, repeats: int) -> list[Row]:
    n = 1 << 24
    x = rng.standard_normal(n).astype(np.float32)

    def build(cx: lm.Graph) -> list:
        t = cx.tensor((n,)).set(x)
        y = ((((t * 1.5 + 0.5) * t - 2.0) * 0.25 + t) * 3.0 - 1.0) * 0.5
        return [y.retrieve()]

    cx, (out,) = compiled(build)
    tx = torch.tensor(x)

    def torch_chain() -> torch.Tensor:
        return ((((tx * 1.5 + 0.5) * tx - 2.0) * 0.25 + tx) * 3.0 - 1.0) * 0.5

    def numpy_chain() -> np.ndarray:
        return ((((x * 1.5 + 0.5) * x - 2.0) * 0.25 + x) * 3.0 - 1.0) * 0.5

    target = np.empty_like(x)
    copy = min(best_of(lambda: np.copyto(target, x), repeats), parallel_copy_seconds(x, repeats))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), numpy_chain(), rtol=1e-4, atol=1e-5)
    times = timer.times({"luminal": cx.execute, "torch": torch_chain, "numpy": numpy_chain})
    bandwidth = 2 * x.nbytes / copy
    achieved = 2 * x.nbytes / times["luminal"]
    return row(
        "8-op chain, 16M floats",
        times,
        f" | {achieved / 1e9:.1f} GB/s = {achieved / bandwidth:.0%} of copy "
        f"{bandwidth / 1e9:.1f} GB/s",
    )


def bench_rows(rng: np.random.Generator, timer: Timer) -> list[Row]:
    rows = []
    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    tx = torch.tensor(x)
    for name, build_op, torch_op in [
        ("row softmax 4096x1024", lambda t: t.softmax(-1), lambda: torch.softmax(tx, -1)),
        (
            "layer norm 4096x1024",
            lambda t: t.layer_norm(-1),
            lambda: torch.nn.functional.layer_norm(tx, (1024,)),
        ),
    ]:
        cx, (out,) = compiled(lambda cx, f=build_op: [f(cx.tensor((4096, 1024)).set(x)).retrieve()])
        cx.execute()
        np.testing.assert_allclose(out.numpy(), torch_op().numpy(), rtol=1e-3, atol=1e-5)
        rows += row(name, timer.times({"luminal": cx.execute, "torch": torch_op}))
    return rows


def bench_matmul(rng: np.random.Generator, timer: Timer) -> list[Row]:
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)
    cx, (out,) = compiled(
        lambda cx: [(cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)).retrieve()]
    )
    cx.execute()
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-3, atol=1e-2)
    ta, tb = torch.tensor(a), torch.tensor(b)
    return row(
        "matmul 1024^2",
        timer.times({"luminal": cx.execute, "numpy": lambda: a @ b, "torch": lambda: ta @ tb}),
    )


COMPILE_SNIPPET = """
import time, numpy as np, luminal as lm
rng = np.random.default_rng(0)
cx = lm.Graph()
h = cx.tensor((64, 784)).set(rng.standard_normal((64, 784)).astype(np.float32))
for i, (a, b) in enumerate([(784, 512), (512, 512), (512, 10)]):
    h = h @ cx.tensor((a, b)).set(rng.standard_normal((a, b)).astype(np.float32)) + 0.1
    h = h.relu() if i < 2 else h
h.retrieve()
start = time.perf_counter()
cx.compile(lm.CPUCompiler())
print(time.perf_counter() - start)
"""


def compile_seconds(snippet: str = COMPILE_SNIPPET, runs: int = 2) -> list[float]:
    """The compile time printed by `snippet`, run `runs` times in fresh processes sharing
    one new (empty at first) luminal cache: the first is cold, the next ones cached."""
    cache = tempfile.mkdtemp(prefix="luminal-bench-cache-")
    env = {**os.environ, "LUMINAL_CACHE_DIR": cache}
    try:
        times = []
        for _ in range(runs):
            result = subprocess.run(
                [sys.executable, "-c", snippet],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            times.append(float(result.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return times


def bench_compile() -> None:
    times = compile_seconds()
    print(f"{'MLP compile (fresh process)':<30} first {times[0]:.2f} s, cached {times[1]:.2f} s")


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: every case but the MLP compile (bench/compile_times.py)."""
    rng = np.random.default_rng(0)
    repeats = 3 if quick else 10
    return [
        *bench_mlp(rng, timer),
        *bench_elementwise(rng, timer, repeats),
        *bench_rows(rng, timer),
        *bench_matmul(rng, timer),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    equal_threads(args.threads)
    rng = np.random.default_rng(0)
    timer = BestOf(args.repeats)
    bench_mlp(rng, timer)
    bench_elementwise(rng, timer, args.repeats)
    bench_rows(rng, timer)
    bench_matmul(rng, timer)
    bench_compile()


if __name__ == "__main__":
    main()

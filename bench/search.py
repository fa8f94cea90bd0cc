"""Measured search (`mode="optimal"`) against the static lowering, BLAS and PyTorch.

    .venv/bin/python bench/search.py [--threads N] [--repeats N]

Every search runs in a fresh search cache (a temporary folder; compiled kernels still
come from the usual kernel cache), so "search" is a first compile. Rows:
- the best *generated* matmul the search measured (BLAS excluded) at 512^3 and 1024^3
  against numpy's BLAS: ratio = BLAS time / generated time (goal >= 0.8);
- relu(x @ W^T + b): the best fused generated kernel against the static lowering (BLAS
  sgemm, then one fused bias+ReLU pass) and against numpy doing the same in two steps;
- MLP 784-512-512-10 and LeNet-5 inference at batch 64: `optimal` against `fast` and
  against PyTorch eager, the search time, and the second compile (a cache hit).
Times are minima over repeats, taken in this process with the contestants in turns;
ratios are luminal / peer (below 1 is faster) unless the row says otherwise.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from common import equal_threads
from rows import Row
from timing import Timer
from training import BATCH, luminal_lenet, luminal_mlp, torch_lenet, torch_mlp

import luminal as lm
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.compiler import RULESETS
from luminal.backends.cpu.tuning import CpuSearchSpace
from luminal.backends.cpu.verify import verify_against_reference
from luminal.search.programs import ProgramAlternatives


def search(cx: lm.Graph, cache: str) -> tuple[lm.CPUCompiler, float]:
    compiler = lm.CPUCompiler(mode="optimal", cache=cache, progress=False)
    start = time.perf_counter()
    cx.compile(compiler)
    return compiler, time.perf_counter() - start


def best_trial(compiler: lm.CPUCompiler, prefix: str) -> dict[str, str]:
    """The configuration of the fastest verified trial using an option starting with
    `prefix` (trials stopped early as slower were verified too)."""
    found = [
        (t.seconds, t.config)
        for t in compiler.search_record.trials
        if t.status in ("ok", "slower") and any(v.startswith(prefix) for v in t.config.values())
    ]
    return min(found, key=lambda item: item[0])[1] if found else {}


def in_process(build: Callable[[lm.Graph], lm.GraphTensor], config: dict[str, str]):  # noqa: ANN201
    """The graph compiled with `config` (program and kernel choices) in this process, to
    time it side by side with numpy; verified against the reference like any compile."""
    cx = lm.Graph()
    out = build(cx).retrieve()
    reference = copy.deepcopy(cx)
    cx.compile(lm.GenericCompiler())
    program = {k: v for k, v in config.items() if k.startswith("region")}
    ProgramAlternatives(cx, RULESETS).apply(cx, program)
    space = CpuSearchSpace(cx, {}, toolchain.get_num_threads().openmp)
    compiled = space.compiled({k: v for k, v in config.items() if k not in program})
    compiled.build()
    verify_against_reference(cx, compiled, reference, 1e-3, 1e-4)
    cx.compiled = compiled
    return cx, out


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Minimum time of each function, timed in turns with a pause between (BLAS threads
    spin for a while after a call and would slow the next contestant)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            time.sleep(0.2)
            fn()
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


class InterleavedMin:
    """The command line's timer: `interleaved` minima over `repeats` turns."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats

    def times(self, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
        return interleaved(fns, self.repeats)


def bench_matmul(size: int, timer: Timer, cache: str) -> list[Row]:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))

    def build(cx: lm.Graph) -> lm.GraphTensor:
        return cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)

    cx = lm.Graph()
    build(cx).retrieve()
    compiler, seconds = search(cx, cache)
    config = best_trial(compiler, "gen")
    generated, out = in_process(build, config)
    times = timer.times({"generated": generated.execute, "numpy": lambda: a @ b})
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-3, atol=1e-2)
    gflops = 2 * size**3 / times["generated"] / 1e9
    print(
        f"matmul {size}^3 generated (searched) {times['generated'] * 1e3:7.3f} ms "
        f"{gflops:5.0f} GFLOP/s  numpy BLAS {times['numpy'] * 1e3:7.3f} ms  "
        f"BLAS/generated {times['numpy'] / times['generated']:4.2f}  (search {seconds:.1f} s; "
        f"{next((v for v in config.values() if v.startswith('gen')), '-')})"
    )
    case = f"matmul {size}^3 generated (searched)"
    return [
        Row("search", case, times["generated"], "numpy", times["numpy"]),
        Row("search", f"matmul {size}^3 search", seconds, note="first compile, mode=optimal"),
    ]


def bench_fused(m: int, k: int, n: int, timer: Timer, cache: str) -> list[Row]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    bias = rng.standard_normal(n).astype(np.float32)

    def build(cx: lm.Graph) -> lm.GraphTensor:
        y = cx.tensor(x.shape).set(x) @ cx.tensor(w.shape).set(w).transpose(0, 1)
        return (y + cx.tensor(bias.shape).set(bias)).relu()

    cx = lm.Graph()
    build(cx).retrieve()
    compiler, seconds = search(cx, cache)
    fused, out = in_process(build, best_trial(compiler, "gen+epilogue"))
    static, _ = in_process(build, {})
    times = timer.times(
        {
            "fused": fused.execute,
            "static": static.execute,
            "numpy": lambda: np.maximum(x @ w.T + bias, 0),
        }
    )
    np.testing.assert_allclose(out.numpy(), np.maximum(x @ w.T + bias, 0), rtol=1e-3, atol=1e-3)
    print(
        f"relu(x@W^T+b) {m}x{k}x{n}: fused generated {times['fused'] * 1e3:7.3f} ms  "
        f"BLAS + separate pass (static) {times['static'] * 1e3:7.3f} ms "
        f"({times['fused'] / times['static']:4.2f}x)  numpy two passes "
        f"{times['numpy'] * 1e3:7.3f} ms ({times['fused'] / times['numpy']:4.2f}x)  "
        f"search {seconds:.1f} s"
    )
    case = f"relu(x@W^T+b) {m}x{k}x{n} fused generated"
    return [
        Row("search", case, times["fused"], "luminal static", times["static"]),
        Row("search", case, times["fused"], "numpy", times["numpy"]),
    ]


def bench_model(
    name: str,
    make_torch: Callable[[], torch.nn.Module],
    make_luminal: Callable[[lm.Graph], lm.nn.Module],
    shape: tuple[int, ...],
    timer: Timer,
    cache: str,
) -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, *shape)).astype(np.float32)
    torch.manual_seed(0)
    reference = make_torch()
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}

    def build() -> tuple[lm.Graph, lm.GraphTensor]:
        cx = lm.Graph()
        model = make_luminal(cx)
        model.load_state_dict(state)
        return cx, model(cx.tensor(x.shape).set(x)).retrieve()

    fast_graph, fast_out = build()
    start = time.perf_counter()
    fast_graph.compile(lm.CPUCompiler())
    fast_compile = time.perf_counter() - start
    graph, out = build()
    compiler, search_seconds = search(graph, cache)
    again, _ = build()
    start = time.perf_counter()
    second = lm.CPUCompiler(mode="optimal", cache=cache, progress=False)
    again.compile(second)
    second_seconds = time.perf_counter() - start
    assert second.cache_hit
    graph.execute()
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-3)
    tx = torch.from_numpy(x)

    def torch_forward() -> None:
        with torch.no_grad():
            reference(tx)

    ten = {"optimal": graph.execute, "fast": fast_graph.execute, "torch": torch_forward}
    times = timer.times({k: lambda fn=fn: [fn() for _ in range(10)] for k, fn in ten.items()})
    times = {k: v / 10 for k, v in times.items()}
    chosen = compiler.search_record.chosen
    print(
        f"{name} inference: optimal {times['optimal'] * 1e3:7.3f} ms  fast "
        f"{times['fast'] * 1e3:7.3f} ms ({times['optimal'] / times['fast']:4.2f}x)  torch "
        f"{times['torch'] * 1e3:7.3f} ms ({times['optimal'] / times['torch']:4.2f}x)  | search "
        f"{search_seconds:5.1f} s ({len(compiler.search_record.trials)} candidates, "
        f"{len(chosen)} sites changed), fast compile {fast_compile:.2f} s, second compile "
        f"{second_seconds:.2f} s ({second_seconds / search_seconds:.1%} of the search)"
    )
    case = f"{name} inference, optimal"
    return [
        Row("search", case, times["optimal"], "luminal fast", times["fast"]),
        Row("search", case, times["optimal"], "torch eager", times["torch"]),
        Row("search", f"{name} search (optimal, cold)", search_seconds),
        Row("search", f"{name} second compile (cache hit)", second_seconds),
    ]


MODELS = {
    "mlp": ("MLP 784-512-512-10", torch_mlp, luminal_mlp, (784,)),
    "lenet": ("LeNet-5 1x28x28", torch_lenet, luminal_lenet, (1, 28, 28)),
}


def run(timer: Timer, cache: str, light: bool = False) -> list[Row]:
    """Every search bench, in a fresh search cache (`cache`); `light` leaves out the
    longest searches (matmul 1024^3, the 512^3 fused matmul, LeNet-5)."""
    rows = bench_matmul(512, timer, cache)
    rows += [] if light else bench_matmul(1024, timer, cache)
    rows += [] if light else bench_fused(512, 512, 512, timer, cache)
    rows += bench_fused(64, 784, 512, timer, cache)
    for name in ("mlp",) if light else ("mlp", "lenet"):
        rows += bench_model(*MODELS[name], timer, cache)
    return rows


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows (searches are first compiles: a temporary search cache). The
    dashboard always runs the light set: the whole set takes minutes of searching."""
    with tempfile.TemporaryDirectory(prefix="luminal-search-bench-") as cache:
        return run(timer, cache, light=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    equal_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="luminal-search-bench-") as cache:
        run(InterleavedMin(args.repeats), cache)


if __name__ == "__main__":
    main()

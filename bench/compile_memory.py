"""Peak memory of compiling with CPUCompiler(verify=True): all-MiniLM-L6-v2 (real
weights), or relu(x @ w) with one (side, side) float32 weight (`--matmul SIDE`).

Builds the graph, compiles a tiny graph the same way first (imports are not compile
memory), resets the process's peak RSS (VmHWM), then compiles under tracemalloc. Prints
the weights, the arena at the dims verification used (3 for each symbolic dim), what
compiling allocated above the weights (numpy + Python, traced), the process's RSS
growth, and both as a ratio to (weights + arena). One configuration per process:

    .venv/bin/python bench/compile_memory.py [--matmul 4096] [--no-verify] [--budget S]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np
from rows import Row
from timing import Timer

import luminal as lm
from luminal.models.bert import SentenceEncoder

MiB = 1 << 20


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


def _matmul(side: int) -> tuple[lm.Graph, list[lm.GraphTensor]]:
    """relu(x @ w), x of symbolic batch without data (verification seeds it)."""
    graph = lm.Graph()
    x = graph.tensor(("batch", side))
    weight = np.random.default_rng(0).standard_normal((side, side), dtype=np.float32)
    w = graph.tensor((side, side)).set(weight)
    (x @ w).relu().retrieve()
    return graph, [x]


def _minilm() -> tuple[lm.Graph, list[lm.GraphTensor]]:
    encoder = SentenceEncoder(compile=False)
    return encoder.graph, [encoder.input_ids, encoder.attention_mask]


def _compiler(args: argparse.Namespace, cache: str) -> Any:
    mode = "fast" if args.budget is None else lm.TimeBudget(args.budget)
    return lm.CPUCompiler(mode=mode, verify=not args.no_verify, progress=False, cache=cache)


def measure(args: argparse.Namespace) -> Row:
    """Compile one configuration, print the figures, return them as a row (compile
    seconds; the memory in the note)."""
    cache = tempfile.mkdtemp(prefix="luminal-bench-")  # a search measures, never reuses
    _matmul(8)[0].compile(_compiler(args, cache))
    graph, symbolic = _matmul(args.matmul) if args.matmul else _minilm()
    weights = sum(array.nbytes for array in graph.input_data.values())
    _reset_peak()
    before = _status("VmRSS")
    tracemalloc.start()
    start = time.perf_counter()
    graph.compile(_compiler(args, cache))
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = _status("VmHWM") - before
    for tensor in symbolic:
        shape = tuple(3 if d.as_int() is None else d.as_int() for d in tensor.view.shape)
        tensor.set(np.ones(shape, tensor.dtype.numpy))
    arena = graph.memory_report()["arena_bytes"]
    base = weights + arena
    what = f"relu(x @ w), w {args.matmul}^2" if args.matmul else "all-MiniLM-L6-v2"
    print(f"{what}, budget {args.budget}, verify {not args.no_verify}: {seconds:.1f} s")
    print(f"weights {weights / MiB:.1f} MiB, arena (dims of 3) {arena / MiB:.2f} MiB")
    print(
        f"allocated above the weights (tracemalloc peak): +{traced / MiB:.1f} MiB -> "
        f"{(weights + traced) / base:.3f}x (weights + arena)"
    )
    print(
        f"process RSS peak above RSS before compiling: +{grown / MiB:.1f} MiB -> "
        f"{(weights + grown) / base:.3f}x (weights + arena)"
    )
    note = (
        f"memory above weights: traced +{traced / MiB:.1f} MiB, RSS +{grown / MiB:.1f} MiB "
        f"(weights {weights / MiB:.1f} MiB)"
    )
    return Row("compile_memory", f"{what} compile, verify {not args.no_verify}", seconds, note=note)


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's row: MiniLM's compile with verification (run in a fresh process:
    the peak RSS is the process's)."""
    return [measure(argparse.Namespace(matmul=None, no_verify=False, budget=None))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matmul", type=int, metavar="SIDE", help="relu(x @ w) instead")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--budget", type=float, help="measured search for this many seconds")
    measure(parser.parse_args())


if __name__ == "__main__":
    main()

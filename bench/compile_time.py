"""Compile time and e-graph sizes for a Llama-shaped graph (32 layers, hidden 256,
4 heads), in one run:

    .venv/bin/python bench/compile_time.py [--layers 32] [--hidden 256]

Prints the build time, the GenericCompiler and EGraphCompiler times, the number of
regions and distinct regions (identical layers are saturated once), the e-node count of
each distinct region, and checks the compiled logits against the uncompiled graph.
Goal: the whole compile under 2 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from llama_graph import build_llama_graph  # noqa: E402
from rows import Row  # noqa: E402
from timing import Timer  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.egraph import EGraphCompiler  # noqa: E402


def build(layers: int, hidden: int) -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    ids, logits = build_llama_graph(cx, layers=layers, hidden=hidden, heads=4, kv_heads=4)
    ids.set(np.arange(8, dtype=np.int32) % 97)
    return cx, ids, logits.retrieve()


def measure(layers: int, hidden: int) -> Row:
    """Print the figures; return the total (GenericCompiler + EGraphCompiler) as a row."""
    args = argparse.Namespace(layers=layers, hidden=hidden)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    start = time.perf_counter()
    cx, _, logits = build(args.layers, args.hidden)
    print(f"build: {time.perf_counter() - start:.3f} s, {cx.num_nodes} nodes")
    cx.execute()
    reference = logits.numpy()

    start = time.perf_counter()
    cx.compile(lm.GenericCompiler())
    generic = time.perf_counter() - start
    nodes_after_generic = cx.num_nodes
    compiler = EGraphCompiler()
    start = time.perf_counter()
    report = cx.compile(compiler)
    egraph = time.perf_counter() - start
    print(f"GenericCompiler: {generic:.3f} s -> {nodes_after_generic} nodes")
    print(
        f"EGraphCompiler:  {egraph:.3f} s -> {cx.num_nodes} nodes; {report.regions} regions, "
        f"{report.distinct_regions} distinct saturated"
    )
    for enodes, stop in zip(report.enodes, report.stopped_by, strict=True):
        print(f"  distinct region: {enodes} e-nodes ({stop})")
    print(f"total compile: {generic + egraph:.3f} s (goal < 2 s)")
    cx.execute()
    error = float(np.abs(logits.numpy() - reference).max())
    print(f"max |compiled - reference| logits: {error:.2e}")
    case = f"Llama-shaped {layers}x{hidden} graph: Generic + EGraph compile"
    note = f"{report.regions} regions, {report.distinct_regions} distinct; no codegen"
    return Row("compile_time", case, generic + egraph, note=note)


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's row (32 layers, hidden 256)."""
    return [measure(32, 256)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    measure(args.layers, args.hidden)


if __name__ == "__main__":
    main()

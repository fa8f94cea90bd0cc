"""Checking a compiled graph against the reference runtime on the same inputs."""

from __future__ import annotations

import numpy as np

from luminal import ops
from luminal.backends.cpu.lowering import dims_of
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.graph import Graph, read_only_view
from luminal.search.outputs import read_outputs
from luminal.search.strategy import Expected, check_outputs
from luminal.shape.tracker import ShapeTracker

HALF_TOLERANCE = {DType.float16: (1e-2, 1e-2), DType.bfloat16: (5e-2, 5e-2)}


def reference_copy(graph: Graph) -> Graph:
    """The graph as it is before compiling, to run on the reference runtime: its
    structure copied, its input arrays (weights) shared read-only, never copied."""
    return graph.structure_copy()


def check_inputs(graph: Graph, reference: Graph) -> dict[str, int]:
    """Give every input without data seeded random data (the same array in both graphs,
    read-only in the reference; a reference seeded before, by the search, lends the
    graph its array) and every unset dim the size 3; returns the dim map."""
    rng = np.random.default_rng(0)
    names = dims_of(reference)
    for name in names:
        reference.dims.setdefault(name, graph.dims.get(name, 3))
        graph.dims.setdefault(name, reference.dims[name])
    dims = {name: reference.dims[name] for name in names}
    for node_id, node in reference.nodes.items():
        if not isinstance(node.op, ops.Input):
            continue
        if node_id not in reference.input_data:
            shape = tuple(
                d.evaluate({**{n: 3 for n in names}, **reference.dims}) for d in node.shape
            )
            if node.dtype.is_float:
                data = rng.uniform(-1, 1, shape).astype(node.dtype.numpy)
            else:
                data = np.zeros(shape, dtype=node.dtype.numpy)
            graph.input_data[node_id] = data
            reference.input_data[node_id] = read_only_view(data)
        graph.input_data.setdefault(node_id, reference.input_data[node_id])
    return dims


def reference_outputs(reference: Graph, rtol: float, atol: float) -> dict[int, Expected]:
    """Run the reference runtime; each output root with its tolerance (looser for
    half-precision outputs)."""
    from luminal.reference.executor import execute as reference_execute

    reference_execute(reference)
    expected: dict[int, Expected] = {}
    for node_id in reference.output_roots():
        if node_id not in reference.buffers:
            continue
        node = reference.nodes[node_id]
        half_rtol, half_atol = HALF_TOLERANCE.get(node.dtype, (rtol, atol))
        expected[node_id] = Expected(
            np.array(reference.buffers[node_id]), max(rtol, half_rtol), max(atol, half_atol)
        )
    return expected


def output_views(reference: Graph, expected: dict[int, Expected]) -> list[tuple[int, ShapeTracker]]:
    return [(n, ShapeTracker.contiguous(reference.nodes[n].shape)) for n in expected]


def verify_against_reference(
    graph: Graph, compiled: CompiledGraph, reference: Graph, rtol: float, atol: float
) -> None:
    """Run `compiled` (not yet installed on `graph`) and the reference on the same inputs;
    restore the user's inputs afterwards."""
    saved = dict(graph.input_data)
    try:
        check_inputs(graph, reference)
        expected = reference_outputs(reference, rtol, atol)
        compiled.execute(graph)
        problem = check_outputs(read_outputs(graph, output_views(reference, expected)), expected)
        if problem is not None:
            raise CompileError(f"CPUCompiler: compiled graph is {problem}")
    finally:
        graph.input_data.clear()
        graph.input_data.update(saved)
        graph.buffers = {}

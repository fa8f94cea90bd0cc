"""Checking a compiled graph against the reference runtime on the same inputs.

Nodes whose reference is a step function of its float inputs (a custom kernel whose
`reference` has a true `step_function`, such as luminal.quant's 8-bit activation
rounding) are checked step by step: a float difference of one ulp upstream may flip one
of their roundings and move an output far past any float tolerance, so the reference
runs them on the compiled program's own inputs (`replay`), and each is checked where it
stands: its compiled input against the reference's (to the check's tolerance), its
compiled output against its reference on those same inputs. Everything else is compared
end to end as usual, downstream of the same rounding decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from luminal import ops
from luminal.backends.cpu.lowering import dims_of
from luminal.backends.cpu.runtime import CompiledGraph, ReadBuffer, Watch
from luminal.custom import CustomKernel
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
    """Run `compiled` (not yet installed on `graph`) and the reference on the same inputs
    (step-function nodes on the compiled program's inputs: `replay`); restore the user's
    inputs afterwards."""
    saved = dict(graph.input_data)
    try:
        check_inputs(graph, reference)
        watched = step_nodes(graph, compiled)
        if watched:
            with replay(graph, compiled, reference, watched, rtol, atol):
                expected = reference_outputs(reference, rtol, atol)
        else:
            expected = reference_outputs(reference, rtol, atol)
            compiled.execute(graph)
        problem = check_outputs(read_outputs(graph, output_views(reference, expected)), expected)
        if problem is not None:
            raise CompileError(f"CPUCompiler: compiled graph is {problem}")
    finally:
        graph.input_data.clear()
        graph.input_data.update(saved)
        graph.buffers = {}


# ------------------------------------------------------------------ step functions
def is_step_function(node: Any) -> bool:
    """A custom kernel whose numpy reference says it is a step function of its inputs."""
    op = node.op
    return isinstance(op, CustomKernel) and bool(getattr(op.reference, "step_function", False))


def _key(graph: Graph, node: Any) -> tuple:
    """What a step-function node is recognised by in both graphs (compiling renumbers
    nodes, never inputs): its function and the graph inputs it reads (a packed weight)."""
    sources = (e.source for e in node.inputs)
    return (node.op.function, tuple(n for n in sources if isinstance(graph.nodes[n].op, ops.Input)))


@dataclass
class Captured:
    """A step-function node's flat inputs and output, as the compiled program had them."""

    inputs: list[np.ndarray]
    output: np.ndarray | None = None


def step_nodes(graph: Graph, compiled: CompiledGraph) -> list[int]:
    """The compiled graph's step-function nodes, in the order the program runs them."""
    order = [n for segment in compiled.segments for k in segment.kernels for n in k.nodes]
    return [n for n in order if is_step_function(graph.nodes[n])]


@contextmanager
def replay(
    graph: Graph,
    compiled: CompiledGraph,
    reference: Graph,
    watched: list[int],
    rtol: float,
    atol: float,
) -> Iterator[None]:
    """Run `compiled` on `graph`, capturing the inputs and output of each node of
    `watched` (`step_nodes`); inside the block, each step-function node of `reference`
    (matched by `_key`, in execution order; an ambiguous match is left out and compared
    end to end) runs its reference on the captured inputs (`Replay`). The reference's
    nodes are restored on exit."""
    captured: dict[int, Captured] = {}
    buffers: dict[int, np.ndarray] = {}  # by node: a run computes each node once

    def before(node_id: int, read: ReadBuffer) -> None:
        sources = [e.source for e in graph.nodes[node_id].inputs]
        for source in sources:
            if source not in buffers:
                buffers[source] = read(source).reshape(-1)
        captured[node_id] = Captured([buffers[source] for source in sources])

    def after(node_id: int, read: ReadBuffer) -> None:
        captured[node_id].output = read(node_id).reshape(-1)

    compiled.execute(graph, Watch(frozenset(watched), before, after))
    ours: dict[tuple, list[int]] = {}
    for node_id in watched:
        ours.setdefault(_key(graph, graph.nodes[node_id]), []).append(node_id)
    theirs: dict[tuple, list[int]] = {}
    for node_id in reference.execution_order(reference.output_roots()):
        node = reference.nodes[node_id]
        if is_step_function(node):
            theirs.setdefault(_key(reference, node), []).append(node_id)
    originals = {}
    for key, nodes in theirs.items():
        if len(nodes) != len(ours.get(key, ())):
            continue
        for node_id, source in zip(nodes, ours[key], strict=True):
            node = reference.nodes[node_id]
            take = captured[source]
            if take.output is None:
                continue
            check = Replay(node.op.reference, node_id, node.op.function, take, rtol, atol)
            originals[node_id] = node
            reference.nodes[node_id] = replace(node, op=replace(node.op, reference=check))
    try:
        yield
    finally:
        for node_id, node in originals.items():
            reference.nodes[node_id] = node


@dataclass(frozen=True, eq=False)
class Replay:
    """A step-function node's reference run on the compiled program's inputs, after
    checking them against the reference's own (`close`); the compiled output must then
    match what the reference computes from the same inputs."""

    reference: Callable[..., np.ndarray]
    node: int
    function: str
    captured: Captured
    rtol: float
    atol: float

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        what = f"custom kernel '{self.function}' (node {self.node})"
        inputs = []
        for index, (mine, flat) in enumerate(zip(arrays, self.captured.inputs, strict=True)):
            if flat.size != mine.size:
                raise CompileError(
                    f"CPUCompiler: compiled graph is wrong: input {index} of {what} has "
                    f"{flat.size} elements, the reference's {mine.size}"
                )
            theirs = flat.reshape(mine.shape)
            problem = close(theirs, mine, self.rtol, self.atol)
            if problem is not None:
                raise CompileError(
                    f"CPUCompiler: compiled graph is wrong: input {index} of {what} {problem}"
                )
            inputs.append(theirs)
        want = np.asarray(self.reference(*inputs))
        output = self.captured.output
        assert output is not None
        problem = close(output.reshape(want.shape), want, self.rtol, self.atol)
        if problem is not None:
            raise CompileError(
                f"CPUCompiler: compiled graph is wrong: the output of {what} {problem} "
                "(computed from the compiled program's own inputs)"
            )
        return want


def close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when `actual` matches `expected` (floats to the tolerance, the rest exactly);
    else how it differs."""
    if not np.issubdtype(expected.dtype, np.floating):
        return None if np.array_equal(actual, expected) else "differs from the reference's"
    with np.errstate(all="ignore"):
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        if (~np.isfinite(a) & np.isfinite(e)).any():
            return "has NaN/inf the reference's has not"
        if np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
            return None
        return f"differs from the reference's (max abs diff {np.nanmax(np.abs(a - e)):.3g})"

"""Fusion: which nodes get a buffer, and which are computed inline inside a consumer.

A node is *materialised* (gets a buffer and a kernel of its own) when something must see
it whole: it is an output, a reduction, a contraction, a gather/scatter or a Python
function; or when inlining would recompute it: it is read by more than one edge, or
read through a view that visits elements more than once (a broadcast or overlapping
windows). Everything else (elementwise chains with their views, constants, iotas) is
inlined into its single consumer, so one kernel computes a whole chain, and a
reduction's producers are fused into its loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from luminal import ops
from luminal.graph import Graph
from luminal.shape.tracker import Pool

ELEMENTWISE = (
    *ops.UNARY_OPS,
    *ops.BINARY_OPS,
    ops.Cast,
    ops.Contiguous,
    ops.GraphBreak,
)
INLINE_SOURCES = (ops.Constant, ops.Iota)
NEEDS_BUFFERS = {"Contract", "Scatter"}


def _repeats_elements(view) -> bool:  # noqa: ANN001 - a ShapeTracker
    """Whether reading through `view` visits some source element more than once."""
    if any(isinstance(m, Pool) for m in view.history):
        return True
    for axis, (stride, dim) in enumerate(zip(view.strides, view.shape, strict=True)):
        extent = dim if view.mask is None else view.mask[axis][1] - view.mask[axis][0]
        if stride == 0 and extent != 1:  # a broadcast dim with more than one real read
            return True
    return False


@dataclass
class Schedule:
    order: list[int]  # nodes the outputs need, producers first
    materialised: list[int]  # nodes with a buffer, in execution order (inputs excluded)
    inputs: list[int]
    inlined: set[int] = field(default_factory=set)


def schedule(graph: Graph) -> Schedule:
    roots = graph.output_roots()
    order = graph.execution_order(roots)
    reads: dict[int, list] = {}
    for node_id in order:
        for edge in graph.nodes[node_id].inputs:
            reads.setdefault(edge.source, []).append(edge.view)
    root_set = set(roots)
    # ops that need their operands as whole buffers (Python functions, BLAS operands)
    for node_id in order:
        node = graph.nodes[node_id]
        if type(node.op).__name__ in NEEDS_BUFFERS or isinstance(node.op, ops.Function):
            root_set.update(edge.source for edge in node.inputs)
    materialised: list[int] = []
    inputs: list[int] = []
    inlined: set[int] = set()
    for node_id in order:
        op = graph.nodes[node_id].op
        if isinstance(op, ops.Input):
            inputs.append(node_id)
            continue
        edges = reads.get(node_id, [])
        if node_id not in root_set:
            if isinstance(op, INLINE_SOURCES):
                inlined.add(node_id)
                continue
            if isinstance(op, ELEMENTWISE) and len(edges) == 1 and not _repeats_elements(edges[0]):
                inlined.add(node_id)
                continue
        materialised.append(node_id)
    return Schedule(order, materialised, inputs, inlined)

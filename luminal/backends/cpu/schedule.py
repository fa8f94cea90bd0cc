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


SHORT_REDUCE = 4


def is_short_reduce(node) -> bool:  # noqa: ANN001 - a Node
    """A sum or max over a few elements: cheap enough to inline as an expression."""
    if not isinstance(node.op, ops.SumReduce | ops.MaxReduce):
        return False
    size = node.inputs[0].view.shape[node.op.axis].as_int()
    return size is not None and size <= SHORT_REDUCE


def is_blas_contract(node) -> bool:  # noqa: ANN001 - a Node
    """A Contract with a real matrix shape: one operand is broadcast along some axis (an
    M or N axis), so BLAS applies. Without one it is an elementwise product summed
    (a dot along rows), better fused as a loop."""
    if type(node.op).__name__ not in ("Contract", "ContractSum"):
        return False
    views = [e.view for e in node.inputs]
    return any(
        (a == 0) != (b == 0)
        for a, b, d in zip(views[0].strides, views[1].strides, views[0].shape, strict=True)
        if d != 1
    )


def is_loop_contract(node) -> bool:  # noqa: ANN001 - a Node
    return type(node.op).__name__ == "Contract" and not is_blas_contract(node)


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
        if (
            is_blas_contract(node)
            or isinstance(node.op, ops.Function | ops.Scatter)
            or (type(node.op).__name__ == "CustomKernel")
        ):
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
            inlinable = isinstance(op, ELEMENTWISE) or is_short_reduce(graph.nodes[node_id])
            if inlinable and len(edges) == 1 and not _repeats_elements(edges[0]):
                inlined.add(node_id)
                continue
        materialised.append(node_id)
    return Schedule(order, materialised, inputs, inlined)


def _is_row_reduce(graph: Graph, node_id: int, outer: tuple, inner) -> bool:  # noqa: ANN001
    node = graph.nodes[node_id]
    if not (isinstance(node.op, ops.SumReduce | ops.MaxReduce) or is_loop_contract(node)):
        return False
    shape = tuple(node.inputs[0].view.shape)
    return node.op.axis == len(shape) - 1 and shape == (*outer, inner)


def _is_row_scalar(graph: Graph, node_id: int, outer: tuple, inner) -> bool:  # noqa: ANN001
    node = graph.nodes[node_id]
    if _is_row_reduce(graph, node_id, outer, inner):
        return True
    return isinstance(node.op, ELEMENTWISE) and tuple(node.shape) in (outer, (*outer, 1))


def row_groups(graph: Graph, plan: Schedule) -> dict[int, list[int]]:
    """Fuse row reductions into the kernel of the node that consumes them.

    A head is a materialised elementwise node of shape (*outer, n) or a reduction over the
    last axis of such a shape. Walking up from it, materialised row reductions and
    per-row scalars (shape `outer` or (*outer, 1)) become per-row C locals computed in
    stages before the head's own loop, and materialised (*outer, n) values read only
    inside the group are recomputed instead of stored. A row softmax or a layer norm
    becomes one loop nest. Rows of at most SHORT_REDUCE elements (relu's pairs, 2x2
    pooling windows) are left alone: there the per-row stages keep the loops scalar and
    cost more than the buffers they save (LeNet's pooling gradients ran 1.7x slower).
    Returns head -> absorbed nodes (in execution order)."""
    materialised = set(plan.materialised)
    roots = set(graph.output_roots())
    readers: dict[int, set[int]] = {}
    for node_id in plan.order:
        for edge in graph.nodes[node_id].inputs:
            readers.setdefault(edge.source, set()).add(node_id)
    position = {n: i for i, n in enumerate(plan.order)}
    groups: dict[int, list[int]] = {}
    taken: set[int] = set()
    for head in reversed(plan.materialised):
        node = graph.nodes[head]
        if head in taken:
            continue
        if isinstance(node.op, ELEMENTWISE) and len(node.shape) >= 1:
            outer, inner = tuple(node.shape[:-1]), node.shape[-1]
        elif (
            isinstance(node.op, ops.SumReduce | ops.MaxReduce)
            and node.op.axis == len(node.inputs[0].view.shape) - 1
        ):
            shape = tuple(node.inputs[0].view.shape)
            outer, inner = shape[:-1], shape[-1]
        else:
            continue
        if inner.as_int() is not None and inner.as_int() <= SHORT_REDUCE:
            continue  # rows of a few elements: see the docstring
        excluded: set[int] = set()
        while True:
            members, absorbed = _walk_group(
                graph, plan, node, outer, inner, materialised, roots | taken | excluded
            )
            leaking = {n for n in absorbed if not readers.get(n, set()) <= members}
            if not leaking:
                break
            excluded |= leaking
        if absorbed:
            groups[head] = sorted(absorbed, key=position.__getitem__)
            taken |= absorbed
    return groups


def _walk_group(
    graph: Graph,
    plan: Schedule,
    head: object,
    outer: tuple,
    inner: object,
    materialised: set[int],
    blocked: set[int],
) -> tuple[set[int], set[int]]:
    """Members (head, inlined nodes, absorbed nodes) and absorbed nodes of a row group,
    not descending into `blocked` nodes."""
    members: set[int] = {head.id}
    absorbed: set[int] = set()
    stack = [e.source for e in head.inputs]
    while stack:
        source = stack.pop()
        if source in members:
            continue
        src = graph.nodes[source]
        if source not in materialised:
            if source in plan.inlined:
                members.add(source)
                stack.extend(e.source for e in src.inputs)
            continue
        if source in blocked:
            continue
        recompute = isinstance(src.op, ELEMENTWISE) and tuple(src.shape) == (*outer, inner)
        if recompute or _is_row_scalar(graph, source, outer, inner):
            absorbed.add(source)
            members.add(source)
            stack.extend(e.source for e in src.inputs)
    return members, absorbed

"""Fusion: which nodes get a buffer, and which are computed inline inside a consumer.

A node is *materialised* (gets a buffer and a kernel of its own) when something must see
it whole: it is an output, a reduction, a contraction, a gather/scatter or a Python
function; or when inlining would recompute it: it is read by more than one edge, or
read through a view that visits elements more than once (a broadcast or overlapping
windows). Everything else (elementwise chains with their views, constants, iotas) is
inlined into its single consumer, so one kernel computes a whole chain, and a
reduction's producers are fused into its loop. A uniform value (elementwise ops of
constants only, such as GELU's erf bound -1 * 3.92) is inlined into every reader
however many: each reader's expression folds it to one number, where a buffer of the
broadcast shape cost MiniLM two 24 MB constants read by every GELU.

Fusion is bounded: no kernel renders an expression of more than MAX_FUSED_NODES values
or MAX_FUSED_DEPTH nested ops. Past either, the heaviest inlined inputs get buffers of
their own, so a 300-op chain becomes a few kernels instead of one expression nested 300
deep, and a 25,000-term sum is not one 600 KB line of C.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from luminal import ops
from luminal.custom import CustomKernel
from luminal.graph import Graph
from luminal.schedule.constant_matrix import constant_contract
from luminal.schedule.contraction import blas_gathered, is_blas_contract, is_loop_contract
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
# reductions over at most this many elements are written out term by term (kernels.py),
# so the loop around them vectorises: relu's pair, 2x2 pooling, and the 5 taps of a 5x5
# convolution's input gradient (LeNet-5's col2im ran 2.2x faster than at 4); their
# producers are rendered once per term
UNROLL_LIMIT = 8
# bounds on one fused expression: values rendered (ops and loads) and nesting of ops. The
# largest ordinary kernels (an exact GELU, a cumsum over 33 elements) stay whole; the
# depth bound also keeps code generation, which recurses per nested op, far from
# Python's recursion limit
MAX_FUSED_NODES = 4096
MAX_FUSED_DEPTH = 64


def is_short_reduce(node) -> bool:  # noqa: ANN001 - a Node
    """A sum or max over a few elements: cheap enough to inline as an expression."""
    if not isinstance(node.op, ops.SumReduce | ops.MaxReduce):
        return False
    size = node.inputs[0].view.shape[node.op.axis].as_int()
    return size is not None and size <= SHORT_REDUCE


def _repeats_elements(view) -> bool:  # noqa: ANN001 - a ShapeTracker
    """Whether reading through `view` visits some source element more than once."""
    if any(isinstance(m, Pool) for m in view.history):
        return True
    for axis, (stride, dim) in enumerate(zip(view.strides, view.shape, strict=True)):
        extent = dim if view.mask is None else view.mask[axis][1] - view.mask[axis][0]
        if stride == 0 and extent != 1:  # a broadcast dim with more than one real read
            return True
    return False


@dataclass(frozen=True)
class Fused:
    """The size of an expression as a kernel renders it: values and nesting depth."""

    nodes: int
    depth: int

    def fits(self) -> bool:
        return self.nodes <= MAX_FUSED_NODES and self.depth <= MAX_FUSED_DEPTH


LOAD = Fused(1, 1)  # a buffer read, a constant


def renders(node) -> int:  # noqa: ANN001 - a Node
    """How many times `node`'s expression renders each of its inputs."""
    if not hasattr(node.op, "axis") or len(getattr(node.op, "summed", ())) > 1:
        return 1
    size = node.inputs[0].view.shape[node.op.axis].as_int()
    return size if size is not None and size <= UNROLL_LIMIT else 1


def fused_size(node, inline: dict[int, Fused]) -> Fused:  # noqa: ANN001 - a Node
    """The expression of `node` with the inputs in `inline` rendered in place."""
    times = renders(node)
    nodes, depth = 1, 1
    for edge in node.inputs:
        size = inline.get(edge.source, LOAD)
        nodes += times * size.nodes
        depth = max(depth, 1 + size.depth)
    return Fused(nodes, depth)


@dataclass
class FusionPlan:
    """Every fusion decision for one graph: which nodes have a buffer (and a kernel),
    which are inlined into their reader, and which row reductions a head's kernel
    absorbs. Backends lower from this; none decides fusion on its own."""

    order: list[int]  # nodes the outputs need, producers first
    materialised: list[int]  # nodes with a buffer, in execution order (inputs excluded)
    inputs: list[int]
    inlined: set[int] = field(default_factory=set)
    split: set[int] = field(default_factory=set)  # materialised only to bound fusion
    # head -> materialised nodes its kernel computes as per-row stages (`row_groups`)
    row_groups: dict[int, list[int]] = field(default_factory=dict)


def plan_fusion(graph: Graph) -> FusionPlan:
    """The fusion plan of a graph (after the e-graph): inlining, bounded by the fusion
    limits, then row groups."""
    plan = _inline_or_materialise(graph)
    plan.row_groups = row_groups(graph, plan)
    return plan


def _inline_or_materialise(graph: Graph) -> FusionPlan:
    roots = graph.output_roots()
    order = graph.execution_order(roots)
    reads: dict[int, list] = {}
    for node_id in order:
        for edge in graph.nodes[node_id].inputs:
            reads.setdefault(edge.source, []).append(edge.view)
    root_set = set(roots)
    # ops that need their operands as whole buffers (Python functions, BLAS operands; a
    # BLAS operand copied from a strided view is read where the copy reads: `gathered`)
    # a constant-matrix contraction reads its other operand as a buffer, never gathered
    constant = {n for n in order if constant_contract(graph, graph.nodes[n]) is not None}
    gathered = blas_gathered(graph, [n for n in order if n not in constant])
    for node_id in order:
        node = graph.nodes[node_id]
        if node_id in constant:
            root_set.update(e.source for e in node.inputs)
        elif is_blas_contract(node) or isinstance(
            node.op, ops.Function | ops.Scatter | CustomKernel | ops.WinogradConv
        ):
            root_set.update(gathered.get(e.source, e.source) for e in node.inputs)
    # an attention's additive mask is recomputed per head inside its kernel, never an
    # (L, S) buffer (an iota's causal mask costs an index comparison per score)
    recomputed = {
        graph.nodes[n].inputs[3].source
        for n in order
        if isinstance(graph.nodes[n].op, ops.FusedAttention) and len(graph.nodes[n].inputs) == 4
    }
    inputs: list[int] = []
    inlined: dict[int, Fused] = {}  # inlined node -> its expression where it is read
    split: set[int] = set()
    uniform: set[int] = set()  # constants and elementwise ops of uniform values only
    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Input):
            inputs.append(node_id)
            continue
        if isinstance(node.op, ops.Constant) or (
            isinstance(node.op, ELEMENTWISE) and all(e.source in uniform for e in node.inputs)
        ):
            uniform.add(node_id)
        size = _bounded(node, inlined, split)
        if node_id in gathered:
            inlined[node_id] = size
        if node_id in root_set or node_id in gathered:
            continue
        edges = reads.get(node_id, [])
        inlinable = isinstance(node.op, ELEMENTWISE) or is_short_reduce(node)
        if (
            isinstance(node.op, INLINE_SOURCES)
            or node_id in uniform
            or (
                inlinable
                and len(edges) == 1
                and (node_id in recomputed or not _repeats_elements(edges[0]))
            )
        ):
            inlined[node_id] = size
    materialised = [
        n for n in order if n not in inlined and not isinstance(graph.nodes[n].op, ops.Input)
    ]
    return FusionPlan(order, materialised, inputs, set(inlined), split)


def _bounded(node, inlined: dict[int, Fused], split: set[int]) -> Fused:  # noqa: ANN001
    """The expression of `node` once its heaviest inlined inputs are split off (moved
    from `inlined` to `split`) until it fits the fusion limits."""
    while True:
        size = fused_size(node, inlined)
        heavy = [e.source for e in node.inputs if inlined.get(e.source, LOAD) != LOAD]
        if size.fits() or not heavy:
            return size
        heaviest = max(heavy, key=lambda n: (inlined[n].nodes, inlined[n].depth))
        del inlined[heaviest]
        split.add(heaviest)


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


def row_groups(graph: Graph, plan: FusionPlan) -> dict[int, list[int]]:
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
    heavy: set[int] = set(plan.split)  # never recomputed: that would undo a fusion bound
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
                graph, plan, node, outer, inner, materialised, roots | taken | excluded | heavy
            )
            leaking = {n for n in absorbed if not readers.get(n, set()) <= members}
            if leaking:
                excluded |= leaking
                continue
            too_heavy = _too_heavy(graph, plan, node, members, absorbed, outer, position)
            if not too_heavy:
                break
            heavy |= too_heavy
        if absorbed:
            groups[head] = sorted(absorbed, key=position.__getitem__)
            taken |= absorbed
    return groups


def _too_heavy(
    graph: Graph,
    plan: FusionPlan,
    head: object,
    members: set[int],
    absorbed: set[int],
    outer: tuple,
    position: dict[int, int],
) -> set[int]:
    """Recomputed (rows, n) values of a row group whose expressions break the fusion
    limits, or the heaviest of them when a stage's does: a value read twice per level
    (a scan's doubling) would otherwise grow exponentially. Empty when the group fits."""
    inline: dict[int, Fused] = {}
    recomputed: list[int] = []
    stages = [head]
    for node_id in sorted(members - {head.id}, key=position.__getitem__):
        node = graph.nodes[node_id]
        if node_id in absorbed and (
            hasattr(node.op, "axis") or tuple(node.shape) in (outer, (*outer, 1))
        ):
            stages.append(node)  # a per-row local: its own stage, read as one value
            continue
        inline[node_id] = fused_size(node, inline)
        if node_id in absorbed:
            recomputed.append(node_id)
    if all(fused_size(stage, inline).fits() for stage in stages) or not recomputed:
        return set()
    over = {n for n in recomputed if not inline[n].fits()}
    return over or {max(recomputed, key=lambda n: (inline[n].nodes, inline[n].depth))}


def _walk_group(
    graph: Graph,
    plan: FusionPlan,
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

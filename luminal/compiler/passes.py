"""Generic passes: graph-to-graph rewrites every backend wants, and a memory-aware schedule.

Each pass is a small object with `compile(graph)` that edits the graph in place through
`Graph.replace` / `Graph.remove`, so user handles follow their nodes (see `Graph.forward`).
A pass changes `graph.nodes.version` only when it changes something, which is what lets
`Looped` stop at a fixed point.

Numerics of the arithmetic rewrites (values the rewritten graph may give differently):
- `x + 0 -> x` differs only in the sign of a zero (-0.0 + 0.0 is +0.0); `x * 1 -> x` is exact.
- `x * 0 -> 0` only for int32: for floats, inf * 0 and NaN * 0 are NaN, so it is never done.
- `recip(recip(x)) -> x` returns x exactly where the double reciprocal rounds (1 ulp) or
  loses a subnormal x (1/x overflows to inf, 1/inf = 0).
- `log2(exp2(x)) -> x` differs where exp2 overflows or underflows (|x| > 126 in float32:
  log2(exp2(200)) is inf) and by rounding elsewhere.
- `exp2(log2(x)) -> x` only where x is known non-negative (produced by Exp2 or Sqrt, or a
  non-negative constant): log2 of a negative is NaN. Equal up to rounding and sign of zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from luminal import ops
from luminal.compiler.base import Looped
from luminal.compiler.fold import FoldChannelScale
from luminal.dtype import DType
from luminal.errors import LuminalError
from luminal.graph import Edge, Graph, Node
from luminal.shape.expr import Expr, product, sym
from luminal.shape.tracker import ShapeTracker

Readers = dict[int, set[int]]


# ---------------------------------------------------------------- dead code
class DeadCodeElimination:
    """Remove every node that no retrieved, kept or side-effect node needs. Inputs stay
    (the user may `.set()` them later); handles to removed nodes raise when used."""

    def compile(self, graph: Graph) -> None:
        needed = set(graph.topological_order(graph.output_roots()))
        for node_id in sorted(graph.nodes):
            if node_id not in needed and not isinstance(graph.nodes[node_id].op, ops.Input):
                graph.remove(node_id)


# ---------------------------------------------------------------- common subexpressions
def _view_key(view: ShapeTracker) -> tuple:
    """A view by value: two views reading the same elements compare equal whatever
    movements built them."""
    return (view.shape, view.strides, view.offset, view.mask, view.source_shape)


def _op_key(op: ops.Op) -> Any:
    if isinstance(op, ops.Constant) and isinstance(op.value, float):
        # 0.0 == -0.0 in Python, but they are different constants (1 / -0.0 is -inf)
        return ("Constant", op.value, math.copysign(1.0, op.value))
    return op


def _cse_key(node: Node) -> tuple | None:
    key = (
        _op_key(node.op),
        node.dtype,
        node.shape,
        tuple((e.source, e.output, _view_key(e.view)) for e in node.inputs),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


class CommonSubexpressionElimination:
    """Merge nodes computing the same op of the same inputs read through equal views.
    Inputs and Functions are never merged. Walking producers first, a merge makes the
    readers of the merged node equal too, so whole duplicated chains collapse in one pass."""

    def compile(self, graph: Graph) -> None:
        readers = graph.readers()
        first_seen: dict[tuple, int] = {}
        for node_id in graph.topological_order():
            node = graph.nodes.get(node_id)
            if node is None or isinstance(node.op, ops.Input | ops.Function):
                continue
            key = _cse_key(node)
            if key is None:
                continue
            kept = first_seen.setdefault(key, node_id)
            if kept != node_id:
                graph.replace(node_id, kept, readers=readers)


# ---------------------------------------------------------------- arithmetic
def _constant_value(graph: Graph, edge: Edge) -> tuple[float | int | None, bool]:
    """The number a constant input reads everywhere (None if not a constant), and whether
    the edge is padded (padded positions read 0, not the constant)."""
    node = graph.nodes[edge.source]
    if not isinstance(node.op, ops.Constant):
        return None, False
    value = node.op.value.as_int() if isinstance(node.op.value, Expr) else node.op.value
    return _stored(value, node.dtype), edge.view.mask is not None


def _stored(value: float | int | None, dtype: DType) -> float | int | None:
    """A constant as the node holds it: rounded to its dtype (0.5 is 0 in int32, 1e-8
    is 0 in float16)."""
    if value is None:
        return None
    try:
        with np.errstate(all="ignore"):
            compute = np.float32 if dtype.is_float else dtype.numpy
            return np.array(value, dtype=compute).astype(dtype.numpy).astype(np.float64).item()
    except (OverflowError, ValueError, TypeError):
        return None


def _replace_by_view(graph: Graph, old: int, edge: Edge, readers: Readers) -> bool:
    """Make `old` read `edge.source` through `edge.view` (the value old computed)."""
    return graph.replace(old, edge.source, edge.view, readers)


def _add_rule(graph: Graph, node: Node, readers: Readers) -> None:
    for x, other in (node.inputs, node.inputs[::-1]):
        value, _ = _constant_value(graph, other)
        # a padded zero still reads 0; a padded x reads 0 = 0 + 0 where x's view pads
        if value == 0 and _replace_by_view(graph, node.id, x, readers):
            return


def _mul_rule(graph: Graph, node: Node, readers: Readers) -> None:
    for x, other in (node.inputs, node.inputs[::-1]):
        value, padded = _constant_value(graph, other)
        if value == 1 and not padded and _replace_by_view(graph, node.id, x, readers):
            return
    if node.dtype != DType.int32:
        return  # float x * 0 is NaN for inf and NaN x
    for other in node.inputs:
        value, _ = _constant_value(graph, other)
        if value == 0:
            if not _replace_by_view(graph, node.id, other, readers):
                # an output cannot become a view: a zero tensor of its own shape
                zeros = graph.add_node(ops.Iota(sym(0)), (), node.shape, node.dtype)
                graph.replace(node.id, zeros.node_id, readers=readers)
            return


def _known_non_negative(graph: Graph, edge: Edge) -> bool:
    op = graph.nodes[edge.source].op
    if isinstance(op, ops.Exp2 | ops.Sqrt):
        return True  # (padding reads 0, which is non-negative too)
    value, _ = _constant_value(graph, edge)
    return value is not None and value >= 0


def _cancel_inverse(graph: Graph, node: Node, readers: Readers, inner_op: type) -> None:
    """f(g(x)) -> x where f undoes g. The outer view must not pad (f(0) is not 0 for
    these f); an inner pad is fine since f(g(0)) = 0 for each pair here."""
    outer = node.inputs[0]
    inner = graph.nodes[outer.source]
    if not isinstance(inner.op, inner_op) or outer.view.mask is not None:
        return
    if inner_op is ops.Log2 and not _known_non_negative(graph, inner.inputs[0]):
        return
    x = inner.inputs[0]
    view = x.view.then(outer.view)
    if view is not None:
        graph.replace(node.id, x.source, view, readers)


Rule = Callable[[Graph, Node, Readers], None]

ARITHMETIC_RULES: dict[type, Rule] = {
    ops.Add: _add_rule,
    ops.Mul: _mul_rule,
    ops.Recip: lambda g, n, r: _cancel_inverse(g, n, r, ops.Recip),
    ops.Log2: lambda g, n, r: _cancel_inverse(g, n, r, ops.Exp2),
    ops.Exp2: lambda g, n, r: _cancel_inverse(g, n, r, ops.Log2),
}


class ArithmeticElimination:
    """Remove arithmetic that does nothing: x+0, x*1, int x*0, recip(recip x),
    log2(exp2 x), exp2(log2 x) of a non-negative x (see the module docstring for where
    each is exact)."""

    def compile(self, graph: Graph) -> None:
        readers = graph.readers()
        for node_id in graph.topological_order():
            node = graph.nodes.get(node_id)
            rule = ARITHMETIC_RULES.get(type(node.op)) if node is not None else None
            if rule is not None:
                rule(graph, node, readers)


# ---------------------------------------------------------------- unit reductions
class RemoveUnitReductions:
    """A sum or max over an axis of size 1 is its input with that axis dropped: readers
    read the input through the reshaped view instead. An output (retrieved or kept) that
    would become a non-identity view stays, as does a reshape no view can express."""

    def compile(self, graph: Graph) -> None:
        readers = graph.readers()
        for node_id in graph.topological_order():
            node = graph.nodes.get(node_id)
            if node is None or not isinstance(node.op, ops.REDUCE_OPS):
                continue
            edge = node.inputs[0]
            if edge.view.shape[node.op.axis] != 1:
                continue
            view = edge.view.reshape(node.shape)
            if view is not None:
                graph.replace(node_id, edge.source, view, readers)


# ---------------------------------------------------------------- scheduling
_UNKNOWN_DIM = 1024  # size assumed for a symbolic dim with no binding yet


def node_bytes(node: Node, dims: Mapping[str, int], default: int | None = None) -> int:
    """Bytes of a node's output buffer with `dims`; unbound dims take `default` (or raise
    ShapeError when it is None). Inputs count 0: their data belongs to the user."""
    if isinstance(node.op, ops.Input):
        return 0
    count = product(node.shape)
    env = dict(dims)
    if default is not None:
        env.update({name: default for name in count.variables() if name not in env})
    return max(count.evaluate(env), 0) * node.dtype.itemsize


def simulated_peak(graph: Graph, order: Sequence[int], sizes: Mapping[int, int]) -> int:
    """Peak bytes alive when nodes run in `order` and each buffer is freed after its last
    reader unless retrieved or kept, as the reference runtime does (its fused
    multiply-sum contractions aside)."""
    keep = graph.retrieved | graph.kept
    last_reader: dict[int, int] = {}
    for index, node_id in enumerate(order):
        for edge in graph.nodes[node_id].inputs:
            last_reader[edge.source] = index
    frees: dict[int, list[int]] = defaultdict(list)
    for source, index in last_reader.items():
        if source not in keep:
            frees[index].append(source)
    live = peak = 0
    for index, node_id in enumerate(order):
        live += sizes[node_id]
        peak = max(peak, live)
        live -= sum(sizes[source] for source in frees[index])
    return peak


def peak_memory_bytes(
    graph: Graph, dims: Mapping[str, int] | None = None, order: Sequence[int] | None = None
) -> int:
    """Peak bytes of intermediate buffers when the reference runtime runs `order` (default:
    the graph's execution order) with `dims` (default: the graph's bound dims)."""
    env = {**graph.dims, **(dims or {})}
    if order is None:
        order = graph.execution_order(graph.output_roots())
    sizes = {node_id: node_bytes(graph.nodes[node_id], env) for node_id in order}
    return simulated_peak(graph, order, sizes)


def _estimated_bytes(node: Node, dims: Mapping[str, int]) -> int:
    try:
        return node_bytes(node, dims, _UNKNOWN_DIM)
    except LuminalError:
        return _UNKNOWN_DIM * node.dtype.itemsize


def _post_order(starts: Iterable[int], children: Mapping[int, list[int]]) -> list[int]:
    """Depth-first post-order from `starts`, visiting each node's inputs in `children`
    order: a valid topological order of every node reached."""
    order: list[int] = []
    done: set[int] = set()
    for start in starts:
        if start in done:
            continue
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            node_id, position = stack.pop()
            kids = children[node_id]
            while position < len(kids) and kids[position] in done:
                position += 1
            if position < len(kids):
                stack.append((node_id, position + 1))
                stack.append((kids[position], 0))
            elif node_id not in done:
                done.add(node_id)
                order.append(node_id)
    return order


class DepthFirstSchedule:
    """Choose an execution order that keeps few buffers alive: a depth-first post-order
    from the outputs that runs, at every node, the input whose subtree needs the most
    memory (beyond what it leaves behind) first, as Sethi-Ullman numbering does for
    trees. The plain depth-first order is kept when the estimate is not lower. Stores
    `graph.schedule`; valid until the graph next changes."""

    def compile(self, graph: Graph) -> None:
        sizes = {
            node_id: _estimated_bytes(node, graph.dims) for node_id, node in graph.nodes.items()
        }
        need: dict[int, int] = {}
        ranked: dict[int, list[int]] = {}
        for node_id in graph.topological_order():
            inputs = list(dict.fromkeys(e.source for e in graph.nodes[node_id].inputs))
            inputs.sort(key=lambda i: need[i] - sizes[i], reverse=True)
            held = peak = 0
            for source in inputs:
                peak = max(peak, held + need[source])
                held += sizes[source]
            need[node_id] = max(peak, held + sizes[node_id])
            ranked[node_id] = inputs
        roots = graph.output_roots()
        by_need = sorted(roots, key=lambda i: need[i] - sizes[i], reverse=True)
        plain = graph.topological_order(roots)
        chosen = _post_order(by_need, ranked)
        if simulated_peak(graph, chosen, sizes) >= simulated_peak(graph, plain, sizes):
            chosen = plain
        # then every other node (unused inputs, dead code) so the order covers the graph
        rest = _post_order([*chosen, *sorted(graph.nodes)], ranked)
        graph.schedule = (graph.nodes.version, tuple(rest))


# ---------------------------------------------------------------- the bundle
class GenericCompiler:
    """The generic passes to a fixed point (arithmetic, unit reductions, CSE, per-channel
    scales folded into weights, DCE), then a memory-aware schedule. Returns None."""

    def __init__(self) -> None:
        self.passes = (
            Looped(
                (
                    ArithmeticElimination(),
                    RemoveUnitReductions(),
                    CommonSubexpressionElimination(),
                    FoldChannelScale(),
                    DeadCodeElimination(),
                )
            ),
            DepthFirstSchedule(),
        )

    def compile(self, graph: Graph) -> None:
        graph.compile(self.passes)


__all__ = [
    "ArithmeticElimination",
    "CommonSubexpressionElimination",
    "DeadCodeElimination",
    "DepthFirstSchedule",
    "GenericCompiler",
    "RemoveUnitReductions",
    "node_bytes",
    "peak_memory_bytes",
    "simulated_peak",
]

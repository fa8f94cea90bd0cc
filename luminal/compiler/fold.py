"""Fold a per-channel scale into the weight of the contraction before it.

Inference BatchNorm after a convolution (or a linear layer) is `conv(x, w) * s + t`
with `s` one value per output channel. Since `sum_k(a * w) * s = sum_k(a * (w * s))`
when `s` is the same for every k and for every position the weight is broadcast over,
the scale can move onto the weight: the product is then computed on the (small) weight
instead of the (large) activation, and the contraction feeds the shift directly.

The pass works on primitives and views alone: `Mul(SumReduce(Mul(a, w)), s)`, where
the outer Mul reads the reduction through permutes, reshapes and broadcasts (the
convolution's output layout) and `s` through any view. It moves `s`'s view back through
those movements (inverse permutes and reshapes; a broadcast is undone only where `s` is
constant along it), broadcasts it over the reduced axis, and moves it back the same way
through the weight edge's view. The fold happens only where it pays: the weight has
fewer elements than the contraction's output, nothing else reads the contraction (so `s`
cannot depend on it), and `s` is a tensor, not a constant scalar. Results equal the
unfolded graph up to float rounding (one product is rounded at a different point).
"""

from __future__ import annotations

from luminal import ops
from luminal.graph import Edge, Graph, Node
from luminal.shape.expr import Expr, product
from luminal.shape.tracker import Expand, Permute, Reshape, ShapeTracker

Readers = dict[int, set[int]]


class FoldChannelScale:
    """Rewrite `sum(a * w) * s` into `sum(a * (w * s))` (see the module docstring)."""

    def compile(self, graph: Graph) -> None:
        readers = graph.readers()
        for node_id in sorted(graph.nodes):
            node = graph.nodes.get(node_id)
            if node is not None and isinstance(node.op, ops.Mul) and node.dtype.is_float:
                _fold(graph, node, readers)


def _fold(graph: Graph, mul: Node, readers: Readers) -> bool:
    """Fold the scale of one Mul if it qualifies; True when the graph changed."""
    for side in (0, 1):
        reduced, scale = mul.inputs[side], mul.inputs[1 - side]
        found = _contraction(graph, reduced, readers)
        if found is None or scale.source == reduced.source or _is_scalar(graph, scale.source):
            continue
        reduce_node, product_node = found
        scale_view = _undo(scale.view, reduced.view)  # the scale at each output position
        if scale_view is None:
            continue
        axis = reduce_node.op.axis
        scale_view = scale_view.expand(axis, product_node.shape[axis])
        for operand in (0, 1):
            weight = product_node.inputs[operand]
            pulled = _undo(scale_view, weight.view)
            if pulled is None or not _smaller(graph.nodes[weight.source], reduce_node):
                continue
            if reduced.view.is_identity() or mul.id not in graph.retrieved | graph.kept:
                _rewrite(graph, mul, reduced, reduce_node, product_node, operand, scale, pulled)
                _drop_replaced(graph, readers, reduce_node, product_node)
                return True
    return False


def _contraction(graph: Graph, edge: Edge, readers: Readers) -> tuple[Node, Node] | None:
    """(SumReduce, Mul) when `edge` reads a sum of products that nothing else reads and
    that is no output (so the scale, read by the same Mul, cannot be computed from it)."""
    outputs = graph.retrieved | graph.kept
    reduce_node = graph.nodes[edge.source]
    if not isinstance(reduce_node.op, ops.SumReduce) or len(readers[reduce_node.id]) != 1:
        return None
    inner = reduce_node.inputs[0]
    product_node = graph.nodes[inner.source]
    if not isinstance(product_node.op, ops.Mul) or len(readers[product_node.id]) != 1:
        return None
    if reduce_node.id in outputs or product_node.id in outputs:
        return None
    if not inner.view.is_identity():
        return None
    return reduce_node, product_node


def _is_scalar(graph: Graph, node_id: int) -> bool:
    node = graph.nodes[node_id]
    return isinstance(node.op, ops.Constant) or product(node.shape) == 1


def _undo(scale: ShapeTracker, view: ShapeTracker) -> ShapeTracker | None:
    """`scale` (a view with `view`'s shape) moved back through `view`'s movements to
    `view.source_shape`: the view that `view` reads back as `scale`. None when `view`
    slices, pads or pools, or broadcasts along an axis where the scale varies."""
    result: ShapeTracker | None = scale
    for move in reversed(view.history):
        if result is None:
            return None
        if isinstance(move, Permute):
            inverse = [0] * len(move.axes)
            for position, axis in enumerate(move.axes):
                inverse[axis] = position
            result = result.permute(inverse)
        elif isinstance(move, Reshape):
            result = result.reshape(move.input_shape)
        elif isinstance(move, Expand):
            result = _unbroadcast(result, move.axis)
        else:
            return None
    if result is None or tuple(result.shape) != tuple(view.source_shape):
        return None
    return result


def _unbroadcast(view: ShapeTracker, axis: int) -> ShapeTracker | None:
    """`view` without `axis`, when its value does not change along that axis."""
    size = view.shape[axis]
    if size != 1:
        if view.strides[axis] != 0:
            return None
        if view.mask is not None and tuple(view.mask[axis]) != (0, size):
            return None
        ranges = [(0, dim, 1) for dim in view.shape]
        ranges[axis] = (0, 1, 1)
        view = view.slice(ranges)
    return view.reshape(view.shape[:axis] + view.shape[axis + 1 :])


def _smaller(weight: Node, reduce_node: Node) -> bool:
    """The weight has fewer elements than the contraction's output (sizes of symbolic
    dims taken at their smallest, 1)."""
    return _at_least_one(product(weight.shape)) < _at_least_one(product(reduce_node.shape))


def _at_least_one(size: Expr) -> int:
    return size.evaluate({name: 1 for name in size.variables()})


def _rewrite(
    graph: Graph,
    mul: Node,
    reduced: Edge,
    reduce_node: Node,
    product_node: Node,
    operand: int,
    scale: Edge,
    pulled: ShapeTracker,
) -> None:
    """Insert w * s, the product and sum reading it, and point mul's readers at the sum."""
    weight_edge = product_node.inputs[operand]
    weight = graph.nodes[weight_edge.source]
    scaled = graph.insert(
        ops.Mul(),
        (
            Edge(weight.id, weight_edge.output, ShapeTracker.contiguous(weight.shape)),
            Edge(scale.source, scale.output, pulled),
        ),
        weight.shape,
        weight.dtype,
    )
    edges = list(product_node.inputs)
    edges[operand] = Edge(scaled, 0, weight_edge.view)
    new_product = graph.insert(ops.Mul(), edges, product_node.shape, product_node.dtype)
    new_sum = graph.insert(
        reduce_node.op,
        (Edge(new_product, 0, reduce_node.inputs[0].view),),
        reduce_node.shape,
        reduce_node.dtype,
    )
    graph.replace(mul.id, new_sum, reduced.view)


def _drop_replaced(graph: Graph, readers: Readers, reduce_node: Node, product_node: Node) -> None:
    """Drop the replaced nodes (nothing reads them now) and rebuild the reader map."""
    for node_id in (reduce_node.id, product_node.id):
        graph.remove(node_id)
    readers.clear()
    readers.update(graph.readers())

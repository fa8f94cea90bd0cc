"""Reverse-mode autograd as a compiler pass: `cx.compile(lm.training.Autograd(params, loss))`.

The pass adds the gradient graph to the same graph (it never edits existing nodes) and
returns one GraphTensor per parameter. Differentiation dispatches on the primitive's
type through one table, `VJP_RULES`, giving each primitive's vector-Jacobian product;
the view on every edge is undone movement by movement (`autograd_views`). Only the part
of the graph between the parameters and the loss is differentiated. See docs/autograd.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from luminal import ops
from luminal.custom import CustomKernel
from luminal.errors import DTypeError, GraphError, LuminalError, format_shape
from luminal.shape.expr import ZERO
from luminal.shape.tracker import Expand, Permute, Reshape, ShapeTracker
from luminal.training.attention_grad import fused_attention
from luminal.training.autograd_views import (
    full,
    padded,
    reshaped,
    sliced,
    view_adjoint,
    zeros,
)
from luminal.training.winograd_grad import winograd_conv

if TYPE_CHECKING:
    from luminal.graph import Graph, Node
    from luminal.tensor import GraphTensor

LN_2 = math.log(2.0)
HALF_PI = math.pi / 2


@dataclass
class VJPContext:
    """What a rule sees: the node, the gradient of its output (node shape), and which
    inputs need a gradient. Inputs are read through their edge views."""

    graph: Graph
    node: Node
    grad: GraphTensor
    wanted: tuple[bool, ...]
    # node id -> the node to read instead (a checkpointed segment's recomputed copy)
    read: Callable[[int], int] | None = None

    def input(self, index: int) -> GraphTensor:
        from luminal.tensor import GraphTensor

        edge = self.node.inputs[index]
        dtype = self.graph.nodes[edge.source].dtype
        source = self.read(edge.source) if self.read else edge.source
        return GraphTensor(self.graph, source, edge.view, dtype)

    @property
    def output(self) -> GraphTensor:
        from luminal.tensor import GraphTensor

        node = self.node
        source = self.read(node.id) if self.read else node.id
        return GraphTensor(self.graph, source, ShapeTracker.contiguous(node.shape), node.dtype)

    def wants(self, index: int) -> bool:
        return self.wanted[index]


Grads = tuple["GraphTensor | None", ...]
Rule = Callable[[VJPContext], Grads]


# ---------------------------------------------------------------- rules, one per primitive
def _log2(ctx: VJPContext) -> Grads:
    return (ctx.grad * (ctx.input(0) * LN_2).reciprocal(),)


def _exp2(ctx: VJPContext) -> Grads:
    return (ctx.grad * ctx.output * LN_2,)


def _sin(ctx: VJPContext) -> Grads:
    return (ctx.grad * (ctx.input(0) + HALF_PI).sin(),)


def _sqrt(ctx: VJPContext) -> Grads:
    return (ctx.grad * 0.5 * ctx.output.reciprocal(),)


def _recip(ctx: VJPContext) -> Grads:
    out = ctx.output
    return (ctx.grad * (out * out) * -1.0,)


def _add(ctx: VJPContext) -> Grads:
    return (ctx.grad, ctx.grad)


def _mul(ctx: VJPContext) -> Grads:
    a = ctx.grad * ctx.input(1) if ctx.wants(0) else None
    b = ctx.grad * ctx.input(0) if ctx.wants(1) else None
    return (a, b)


def _mod(ctx: VJPContext) -> Grads:
    """a % b = a - b * floor(a / b): d/da = 1, d/db = -floor(a / b) (torch.remainder)."""
    b = None
    if ctx.wants(1):
        b = ctx.grad * (ctx.input(0) // ctx.input(1)) * -1.0
    return (ctx.grad, b)


def _zero(ctx: VJPContext) -> Grads:
    return (None,) * len(ctx.node.inputs)


def _identity(ctx: VJPContext) -> Grads:
    return (ctx.grad,)


def _sum_reduce(ctx: VJPContext) -> Grads:
    op = ctx.node.op
    size = ctx.node.inputs[0].view.shape[op.axis]
    return (ctx.grad.expand_dim(op.axis, size),)


def _max_reduce(ctx: VJPContext) -> Grads:
    """torch.amax: the gradient is shared evenly among the tied maxima.

    Where the edge pads the reduced axis (relu is max over (x, 0): x with one padded
    zero), only the stored part gets a gradient tensor: the padded zeros count as ties
    of a zero maximum but their share is dropped by the view's adjoint anyway, and
    computing it would double every relu gradient buffer (and make its readers stride
    over the unused half)."""
    axis = ctx.node.op.axis
    x = ctx.input(0)
    size = x.view.shape[axis]
    lo, hi = (ZERO, size) if x.view.mask is None else x.view.mask[axis]
    zeros_read = (size - hi + lo).as_int()
    if zeros_read is None:  # a symbolic pad: every position gets a gradient
        lo, hi, zeros_read = ZERO, size, 0
    stored = sliced(x, axis, lo, hi)
    peak = ctx.output.expand_dim(axis, hi - lo)
    ties = 1.0 - (stored.lt(peak) + peak.lt(stored))
    count = ties.sum(axis)
    if zeros_read:  # the padded positions read 0: ties of a zero maximum
        count = count + (1.0 - (ctx.output.lt(0.0) + ctx.output.gt(0.0))) * float(zeros_read)
    share = ctx.grad * count.reciprocal()
    return (padded(ties * share.expand_dim(axis, hi - lo), axis, lo, size - hi),)


def _cast(ctx: VJPContext) -> Grads:
    source = ctx.input(0)
    return (ctx.grad.cast(source.dtype) if source.dtype.is_float else None,)


def _gather(ctx: VJPContext) -> Grads:
    """Rows of the table were read at `indices`: add the gradient rows back there."""
    table, indices = ctx.input(0), ctx.input(1)
    base = zeros(ctx.graph, table.view.shape, ctx.grad.dtype)
    return (ctx.graph.add_node(ops.Scatter(), [base, indices, ctx.grad]), None)


def _scatter(ctx: VJPContext) -> Grads:
    indices = ctx.input(1)
    updates = ctx.graph.add_node(ops.Gather(), [ctx.grad, indices]) if ctx.wants(2) else None
    return (ctx.grad, None, updates)


def _contract(ctx: VJPContext) -> Grads:
    """A lowered sum(a * b) over the summed axes (`ops.Contract`, `ops.ContractSum`):
    each side gets the gradient broadcast back over those axes times the other side."""
    a, b = ctx.input(0), ctx.input(1)
    spread = ctx.grad
    for axis in ctx.node.op.summed:  # ascending: each lands at its place in a's shape
        spread = spread.expand_dim(axis, a.view.shape[axis])
    return (spread * b if ctx.wants(0) else None, spread * a if ctx.wants(1) else None)


def _not_differentiable(ctx: VJPContext) -> Grads:
    node = ctx.node
    label = getattr(node.op, "label", None) or getattr(node.op, "function", None)
    what = f"{node.op.name} '{label}'" if label else node.op.name
    raise LuminalError(
        f"Autograd: {what} (node {node.id}, shape {format_shape(node.shape)}) is not "
        f"differentiable, but the loss depends on the parameters through it; keep opaque "
        f"functions and custom kernels off the path from the parameters to the loss"
    )


VJP_RULES: dict[type, Rule] = {
    ops.Log2: _log2,
    ops.Exp2: _exp2,
    ops.Sin: _sin,
    ops.Sqrt: _sqrt,
    ops.Recip: _recip,
    ops.Add: _add,
    ops.Mul: _mul,
    ops.Mod: _mod,
    ops.LessThan: _zero,
    ops.SumReduce: _sum_reduce,
    ops.MaxReduce: _max_reduce,
    ops.Contiguous: _identity,
    ops.GraphBreak: _identity,
    ops.Gather: _gather,
    ops.Scatter: _scatter,
    ops.Cast: _cast,
    ops.Function: _not_differentiable,
    ops.Contract: _contract,
    ops.ContractSum: _contract,
    ops.FusedAttention: fused_attention,
    ops.WinogradConv: winograd_conv,
}

# outputs that are piecewise constant in their inputs: no gradient flows into them
ZERO_GRADIENT = (ops.LessThan, ops.Constant, ops.Iota)


def rule_for(op: ops.Op) -> Rule:
    """The VJP rule of `op`'s type (a lowered Contract has one: a graph compiled once
    may be differentiated again); a custom kernel's is its reference's `vjp` method,
    where it has one (`luminal/custom.py`)."""
    if isinstance(op, CustomKernel):
        return getattr(op.reference, "vjp", _not_differentiable)
    return VJP_RULES.get(type(op), _not_differentiable)


# ---------------------------------------------------------------- the pass
class Autograd:
    """Compiler pass: gradients of `loss` with respect to each of `params`, in order.

    A non-scalar loss is summed (seeded with ones). A parameter the loss does not depend
    on gets a zero gradient of its shape. Parameters must be float tensors of the graph:
    inputs, intermediate results, or permuted/reshaped views of them."""

    def __init__(self, params: GraphTensor | Iterable[GraphTensor], loss: GraphTensor) -> None:
        from luminal.tensor import GraphTensor

        self.params = [params] if isinstance(params, GraphTensor) else list(params)
        self.loss = loss

    def compile(self, graph: Graph) -> list[GraphTensor]:
        _check(graph, self.params, self.loss)
        with graph.atomic():
            return gradients(graph, self.params, self.loss)


def _check(graph: Graph, params: Sequence[GraphTensor], loss: GraphTensor) -> None:
    from luminal.tensor import GraphTensor

    for what, tensor in [("loss", loss), *((f"params[{i}]", p) for i, p in enumerate(params))]:
        if not isinstance(tensor, GraphTensor):
            raise GraphError(f"Autograd: {what} must be a GraphTensor, got {tensor!r}")
        if tensor.graph is not graph:
            raise GraphError(f"Autograd: {what} belongs to another Graph")
        if not tensor.dtype.is_float:
            raise DTypeError(
                f"Autograd: {what} of shape {tensor._shape_text()} has dtype "
                f"{tensor.dtype.value}; gradients need a floating dtype"
            )
        if what != "loss" and not _is_bijective(tensor.view):
            raise LuminalError(
                f"Autograd: {what} of shape {tensor._shape_text()} is a slice, pad or broadcast "
                f"of another tensor; pass the tensor itself (permuted or reshaped views are fine)"
            )


def _is_bijective(view: ShapeTracker) -> bool:
    """Views that only reorder elements: the gradient is the node's, read the same way."""
    return all(
        isinstance(move, Permute | Reshape) or (isinstance(move, Expand) and move.size == 1)
        for move in view.history
    )


def gradients(graph: Graph, params: Sequence[GraphTensor], loss: GraphTensor) -> list[GraphTensor]:
    """Add the reverse pass to `graph`; one gradient per parameter, in order. Rules of
    checkpointed nodes read their segment's recomputed copy (training/checkpoint.py)."""
    from luminal.training.checkpoint import Recomputation

    recomputation = Recomputation(graph)
    order = graph.topological_order([loss.node_id])
    param_nodes = {p.node_id for p in params}
    active = _active_nodes(graph, order, param_nodes)
    pending: dict[int, list[GraphTensor]] = {}
    if loss.node_id in active:
        seed = full(graph, 1, loss.view.shape, loss.dtype)
        pending[loss.node_id] = [view_adjoint(seed, loss.view)]
    totals: dict[int, GraphTensor] = {}
    for node_id in reversed(order):
        contributions = pending.pop(node_id, None)
        if contributions is None:
            continue
        node = graph.nodes[node_id]
        grad = _total(node, contributions)
        if node_id in param_nodes:
            totals[node_id] = grad
        wanted = tuple(edge.source in active for edge in node.inputs)
        if not any(wanted):
            continue
        context = VJPContext(graph, node, grad, wanted, recomputation.reader(node_id))
        edge_grads = rule_for(node.op)(context)
        for edge, edge_grad, want in zip(node.inputs, edge_grads, wanted, strict=True):
            if want and edge_grad is not None:
                pending.setdefault(edge.source, []).append(view_adjoint(edge_grad, edge.view))
    return [_param_gradient(graph, p, totals.get(p.node_id)) for p in params]


def _active_nodes(graph: Graph, order: Sequence[int], param_nodes: set[int]) -> set[int]:
    """Float nodes that depend on a parameter (a parameter itself included), in `order`
    (the loss's ancestors): the only nodes a gradient must reach."""
    active: set[int] = set()
    for node_id in order:
        node = graph.nodes[node_id]
        if not node.dtype.is_float:
            continue
        if node_id in param_nodes or (
            not isinstance(node.op, ZERO_GRADIENT)
            and any(edge.source in active for edge in node.inputs)
        ):
            active.add(node_id)
    return active


def _total(node: Node, contributions: list[GraphTensor]) -> GraphTensor:
    """The sum of the gradients from every consumer, in the node's shape and dtype."""
    shape = tuple(node.shape)
    for grad in contributions:
        if tuple(grad.view.shape) != shape:
            raise LuminalError(
                f"Autograd: internal error: a gradient of shape {grad._shape_text()} reached "
                f"{node.op.name} node {node.id} of shape {format_shape(shape)}"
            )
    total = contributions[0]
    for grad in contributions[1:]:
        total = total + grad
    return total.cast(node.dtype)


def _param_gradient(graph: Graph, param: GraphTensor, grad: GraphTensor | None) -> GraphTensor:
    """The node's gradient read through the parameter's (bijective) view; zeros when
    the loss does not depend on the parameter."""
    node = param.node
    if grad is None:
        grad = zeros(graph, node.shape, node.dtype)
    for move in param.view.history:
        if isinstance(move, Permute):
            grad = grad._with_view(grad.view.permute(move.axes))
        elif isinstance(move, Reshape):
            grad = reshaped(grad, move.shape)
        else:  # an Expand of size 1 (_is_bijective allows nothing else)
            grad = grad._with_view(grad.view.expand(move.axis, 1))
    return grad

"""Reduce* (axes as attribute or input, keepdims, noop_with_empty_axes) and ArgMax/ArgMin."""

from __future__ import annotations

import math
from collections.abc import Callable

from luminal.dtype import bool_, int32
from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import as_float, axis_of, full, reverse, select
from luminal.onnx.ops.indexing import gather_along
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]

# the value of a reduction over nothing (ONNX's reference: numpy's identities)
_EMPTY = {
    "ReduceSum": 0.0,
    "ReduceSumSquare": 0.0,
    "ReduceL1": 0.0,
    "ReduceL2": 0.0,
    "ReduceMean": math.nan,
    "ReduceProd": 1.0,
    "ReduceMax": -math.inf,
    "ReduceMin": math.inf,
    "ReduceLogSum": -math.inf,
    "ReduceLogSumExp": -math.inf,
}


def _axes(ctx: NodeContext, x: GraphTensor, name: str) -> tuple[int, ...] | None:
    """The reduced axes; None means 'leave the input as it is' (noop_with_empty_axes)."""
    attribute_until = 13 if name == "ReduceSum" else 18
    if ctx.opset < attribute_until:
        axes = ctx.attr("axes")
    else:
        axes = ctx.static_ints(1, "axes") if ctx.has(1) else None
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted({axis_of(a, x.ndim) for a in axes}))


def _empty(x: GraphTensor, name: str, shape: tuple) -> GraphTensor:
    """A reduction over no elements: numpy's identity (for bool Max/Min, False/True)."""
    if x.dtype == bool_ and name in ("ReduceMax", "ReduceMin"):
        return full(x.graph, name == "ReduceMin", shape, bool_)
    dtype = x.dtype if x.dtype.is_float else "float32"
    return full(x.graph, _EMPTY[name], shape, dtype).cast(x.dtype)


def _max(x: GraphTensor, axes: tuple[int, ...]) -> GraphTensor:
    return x.max(axes, keepdim=True)


def _min(x: GraphTensor, axes: tuple[int, ...]) -> GraphTensor:
    return x.min(axes, keepdim=True)


def _log_sum_exp(x: GraphTensor, axes: tuple[int, ...]) -> GraphTensor:
    x = as_float(x)
    peak = x.max(axes, keepdim=True)
    finite_peak = peak * peak.abs().lt(math.inf)  # -inf rows keep a 0 shift
    return (x - finite_peak).exp().sum(axes, keepdim=True).log() + finite_peak


_BODIES: dict[str, Callable[[GraphTensor, tuple[int, ...]], GraphTensor]] = {
    "ReduceSum": lambda x, a: x.sum(a, keepdim=True),
    "ReduceMean": lambda x, a: x.mean(a, keepdim=True),
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, a: x.prod(a, keepdim=True),
    "ReduceSumSquare": lambda x, a: (x * x).sum(a, keepdim=True),
    "ReduceL1": lambda x, a: x.abs().sum(a, keepdim=True),
    "ReduceL2": lambda x, a: (as_float(x) * as_float(x)).sum(a, keepdim=True).sqrt(),
    "ReduceLogSum": lambda x, a: as_float(x).sum(a, keepdim=True).log(),
    "ReduceLogSumExp": _log_sum_exp,
}


def _reduce_rule(name: str) -> Rule:
    def rule(ctx: NodeContext) -> GraphTensor:
        x = ctx.tensor(0)
        axes = _axes(ctx, x, name)
        if axes is None:
            return x
        keepdims = bool(ctx.attr("keepdims", 1))
        reduced_shape = tuple(1 if i in axes else d for i, d in enumerate(x.view.shape))
        if any(x.view.shape[a].as_int() == 0 for a in axes):
            result = _empty(x, name, reduced_shape)
        else:
            result = _BODIES[name](x, axes)
            result = result.cast(x.dtype)
        if not keepdims:
            result = result.reshape(tuple(d for i, d in enumerate(reduced_shape) if i not in axes))
        return result

    return rule


def _arg_rule(name: str) -> Rule:
    def rule(ctx: NodeContext) -> GraphTensor:
        x = ctx.tensor(0)
        axis = axis_of(ctx.attr("axis", 0), x.ndim)
        keepdims = bool(ctx.attr("keepdims", 1))
        method = "argmax" if name == "ArgMax" else "argmin"
        if ctx.attr("select_last_index", 0):
            last = x.view.shape[axis]
            index = getattr(reverse(x, axis), method)(axis, keepdim=keepdims)
            return (
                x.graph.constant(last - 1 if last.as_int() is None else last.as_int() - 1, int32)
                - index
            )
        return getattr(x, method)(axis, keepdim=keepdims)

    return rule


def _top_k(ctx: NodeContext) -> list[GraphTensor]:
    """TopK by k rounds of argmax (the first of equal values wins, as ONNX asks), each
    round masking the position it took: O(k n), for the small k models use. Values are
    gathered from the input at the chosen indices, so they are exact."""
    x = ctx.tensor(0)
    k = int(ctx.static_ints(1, "k")[0]) if ctx.opset >= 10 else int(ctx.attr("k"))
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    work = as_float(x) if ctx.attr("largest", 1) else -as_float(x)
    size = x.view.shape[axis]
    shape = [1] * x.ndim
    shape[axis] = size
    positions = x.graph.arange(size).reshape(tuple(shape))
    taken = []
    for step in range(k):
        index = work.argmax(axis, keepdim=True)
        taken.append(index)
        if step + 1 < k:
            work = select(positions.eq(index), x.graph.constant(-math.inf, work.dtype), work)
    indices = concat(taken, axis) if taken else _no_indices(x, axis)
    return [gather_along(x, indices, axis), indices]


def _no_indices(x: GraphTensor, axis: int) -> GraphTensor:
    shape = list(x.view.shape)
    shape[axis] = 0
    return full(x.graph, 0, shape, int32)


RULES: dict[str, Rule] = {name: _reduce_rule(name) for name in _BODIES}
RULES["ArgMax"] = _arg_rule("ArgMax")
RULES["ArgMin"] = _arg_rule("ArgMin")
RULES["TopK"] = _top_k

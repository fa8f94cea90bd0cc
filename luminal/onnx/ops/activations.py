"""Activations and the softmax family."""

from __future__ import annotations

from collections.abc import Callable

from luminal.dtype import bfloat16, bool_, float16, float32, int32
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis_of
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _float(fn: Callable[[NodeContext, GraphTensor], GraphTensor]) -> Rule:
    """Compute in float32; float16/bfloat16 inputs round back once."""

    def rule(ctx: NodeContext) -> GraphTensor:
        x = ctx.tensor(0)
        result = fn(ctx, x if x.dtype.is_float else x.cast("float32"))
        return result.cast(x.dtype) if x.dtype.is_float else result

    return rule


def _softplus(x: GraphTensor) -> GraphTensor:
    """log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)."""
    return x.maximum(0) + ((-x.abs()).exp() + 1.0).log()


def _elu(x: GraphTensor, alpha: float) -> GraphTensor:
    return x.maximum(0) + ((x.minimum(0)).exp() - 1.0) * alpha


def _hard_sigmoid(x: GraphTensor, alpha: float, beta: float) -> GraphTensor:
    return (x * alpha + beta).clip(0.0, 1.0)


def _prelu(ctx: NodeContext) -> GraphTensor:
    """max(x, 0) + slope * min(x, 0); a 1-D slope that does not broadcast against the
    last dim is per channel (axis 1), as older exporters wrote it."""
    x, slope = ctx.tensor(0), ctx.tensor(1)
    per_channel = slope.ndim == 1 and x.ndim > 2 and slope.view.shape[0] != x.view.shape[-1]
    if per_channel:
        slope = slope.reshape((slope.view.shape[0],) + (1,) * (x.ndim - 2))
    return x.maximum(0) + x.minimum(0) * slope


def _shrink(ctx: NodeContext, x: GraphTensor) -> GraphTensor:
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    return (x + bias) * x.lt(-lambd) + (x - bias) * x.gt(lambd)


def _coerced(ctx: NodeContext, x: GraphTensor, fn: Callable[[GraphTensor, int], GraphTensor]):
    """Softmax-style ops: before opset 13 the input is seen as 2-D (axis splits it)."""
    default = 1 if ctx.opset < 13 else -1
    axis = axis_of(ctx.attr("axis", default), x.ndim)
    if ctx.opset >= 13 or x.ndim == 0:
        return fn(x, axis)
    shape = x.view.shape
    flat = x.reshape((_prod(shape[:axis]), _prod(shape[axis:])))
    return fn(flat, 1).reshape(shape)


def _prod(dims: tuple) -> object:
    total = 1
    for d in dims:
        total = d * total
    return total


def _hardmax(x: GraphTensor, axis: int) -> GraphTensor:
    index = x.argmax(axis, keepdim=True)
    shape = [1] * x.ndim
    shape[axis] = x.view.shape[axis]
    positions = x.graph.arange(x.view.shape[axis]).reshape(shape)
    return positions.eq(index).cast(x.dtype)


def _half_softmax(x: GraphTensor, axis: int) -> GraphTensor:
    """Softmax of a float16/bfloat16 tensor as ONNX defines it (its function body
    ReduceMax, Sub, Exp, ReduceSum, Div, every value in the input's type): computed in
    float32, rounded to that type where the body's values are, as the reference does."""
    half = x.dtype

    def rounded(t: GraphTensor) -> GraphTensor:
        return t.cast(half).cast(float32)

    wide = x.cast(float32)
    exps = rounded(rounded(wide - wide.max(axis, keepdim=True)).exp())
    return (exps * rounded(exps.sum(axis, keepdim=True)).reciprocal()).cast(half)


def _softmax_rule(name: str) -> Rule:
    def rule(ctx: NodeContext) -> GraphTensor:
        x = ctx.tensor(0)
        if name == "Hardmax":
            return _coerced(ctx, x, _hardmax)
        if name == "Softmax" and x.dtype in (float16, bfloat16):
            return _coerced(ctx, x, _half_softmax)
        method = "softmax" if name == "Softmax" else "log_softmax"
        result = _coerced(ctx, x, lambda t, a: getattr(t, method)(a))
        return result.cast(x.dtype)

    return rule


def _relu(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    return x.relu() if x.dtype != bool_ else x.cast(int32).relu().cast(bool_)


RULES: dict[str, Rule] = {
    "Relu": _relu,
    "LeakyRelu": _float(lambda ctx, x: x.leaky_relu(ctx.attr("alpha", 0.01))),
    "PRelu": _prelu,
    "Elu": _float(lambda ctx, x: _elu(x, ctx.attr("alpha", 1.0))),
    "Selu": _float(
        lambda ctx, x: (
            _elu(x, ctx.attr("alpha", 1.67326319217681884765625))
            * ctx.attr("gamma", 1.05070102214813232421875)
        )
    ),
    "Celu": _float(
        lambda ctx, x: (
            x.maximum(0)
            + ((x / ctx.attr("alpha", 1.0)).exp() - 1.0).minimum(0) * ctx.attr("alpha", 1.0)
        )
    ),
    "Sigmoid": _float(lambda ctx, x: x.sigmoid()),
    "HardSigmoid": _float(
        lambda ctx, x: _hard_sigmoid(x, ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5))
    ),
    "HardSwish": _float(lambda ctx, x: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5)),
    "Softplus": _float(lambda ctx, x: _softplus(x)),
    "Softsign": _float(lambda ctx, x: x / (x.abs() + 1.0)),
    "Tanh": _float(lambda ctx, x: x.tanh()),
    "Gelu": _float(lambda ctx, x: x.gelu(ctx.attr("approximate", "none"))),
    "Mish": _float(lambda ctx, x: x * _softplus(x).tanh()),
    "ThresholdedRelu": _float(lambda ctx, x: x * x.gt(ctx.attr("alpha", 1.0))),
    "Shrink": _float(_shrink),
    "Swish": _float(lambda ctx, x: x * (x * ctx.attr("alpha", 1.0)).sigmoid()),
    "Softmax": _softmax_rule("Softmax"),
    "LogSoftmax": _softmax_rule("LogSoftmax"),
    "Hardmax": _softmax_rule("Hardmax"),
}

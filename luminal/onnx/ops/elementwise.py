"""Elementwise math, comparisons, logic and casts (numpy broadcasting throughout)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import numpy as np
from onnx import TensorProto

from luminal.dtype import DType, bool_, float32, int32
from luminal.hl.binary import broadcast_shapes, not_nan
from luminal.hl.combine import concat
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext, is_static
from luminal.onnx.ops.common import as_float, floor, round_half_even, select
from luminal.onnx.ops.minifloat import round_to, to_e8m0
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _binary(fn: Callable[[GraphTensor, GraphTensor], GraphTensor]) -> Rule:
    return lambda ctx: fn(ctx.tensor(0), ctx.tensor(1))


def _unary(fn: Callable[[GraphTensor], GraphTensor]) -> Rule:
    return lambda ctx: fn(ctx.tensor(0))


def _keep_dtype(fn: Callable[[GraphTensor], GraphTensor]) -> Callable[[GraphTensor], GraphTensor]:
    """A float function applied to float16/bfloat16 keeps its dtype (ONNX's typing)."""
    return lambda x: fn(x).cast(x.dtype) if x.dtype.is_float else fn(x)


def div(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """Float division, or integer division truncating toward zero (as C and onnxruntime)."""
    if a.dtype.is_float or b.dtype.is_float:
        return a / b
    floor_quotient = a // b
    inexact = (a % b).ne(0)
    signs_differ = a.lt(0).ne(b.lt(0))
    return floor_quotient + inexact * signs_differ


def mod(ctx: NodeContext) -> GraphTensor:
    """fmod=0: sign of the divisor (luminal's %); fmod=1: sign of the dividend (C fmod)."""
    a, b = ctx.tensor(0), ctx.tensor(1)
    floored = a % b
    if not ctx.attr("fmod", 0):
        return floored
    fix = floored.ne(0) * a.lt(0).ne(b.lt(0))
    return floored - (b * fix).cast(floored.dtype)


def power(ctx: NodeContext) -> GraphTensor:
    """ONNX Pow keeps the base's type; integer results are rounded, not truncated."""
    base, exponent = ctx.tensor(0), ctx.tensor(1)
    if base.dtype.is_float:
        return base.pow(exponent.cast(base.dtype)).cast(base.dtype)
    if not exponent.dtype.is_float:
        return base.pow(exponent).cast(base.dtype)
    value = base.cast(float32).pow(exponent.cast(float32))
    return round_half_even(value).cast(base.dtype)


def _atan(x: GraphTensor) -> GraphTensor:
    """arctan to float32 accuracy: |x| > 1 folds to pi/2 - atan(1/|x|), then
    |t| > tan(pi/8) to pi/4 + atan((t-1)/(t+1)), then an odd Taylor series."""
    x = as_float(x)
    a = x.abs()
    big = a.gt(1.0)
    t = select(big, a.reciprocal(), a)
    mid = t.gt(0.41421356237309503)
    u = select(mid, (t - 1.0) / (t + 1.0), t)
    u2 = u * u
    coefficients = [(-1) ** k / (2 * k + 1) for k in range(15)]
    series = u2 * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        series = series * u2 + c
    folded = u * series + mid * (math.pi / 4)
    return select(big, math.pi / 2 - folded, folded) * x.sign()


def _asin(x: GraphTensor) -> GraphTensor:
    x = as_float(x)
    return _atan(x / (1.0 - x * x).sqrt())


def _acos(x: GraphTensor) -> GraphTensor:
    return math.pi / 2 - _asin(x)


def _sinh(x: GraphTensor) -> GraphTensor:
    return (x.exp() - (-x).exp()) * 0.5


def _cosh(x: GraphTensor) -> GraphTensor:
    return (x.exp() + (-x).exp()) * 0.5


def _asinh(x: GraphTensor) -> GraphTensor:
    a = x.abs()
    return (a + (a * a + 1.0).sqrt()).log() * x.sign()


def _acosh(x: GraphTensor) -> GraphTensor:
    return (x + (x * x - 1.0).sqrt()).log()


def _atanh(x: GraphTensor) -> GraphTensor:
    return ((1.0 + x) / (1.0 - x)).log() * 0.5


def _is_inf(ctx: NodeContext) -> GraphTensor:
    x = as_float(ctx.tensor(0))
    positive, negative = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    result = x.eq(math.inf) * positive + x.eq(-math.inf) * negative
    return result.cast(bool_)


def _is_nan(ctx: NodeContext) -> GraphTensor:
    return (1 - not_nan(as_float(ctx.tensor(0)))).cast(bool_)


def _compare(name: str) -> Rule:
    return lambda ctx: getattr(ctx.tensor(0), name)(ctx.tensor(1)).cast(bool_)


def _logic(fn: Callable[[GraphTensor, GraphTensor], GraphTensor]) -> Rule:
    return lambda ctx: fn(ctx.tensor(0).cast(int32), ctx.tensor(1).cast(int32)).cast(bool_)


def _variadic(fn: Callable[[GraphTensor, GraphTensor], GraphTensor]) -> Rule:
    return lambda ctx: reduce(fn, ctx.tensors())


def _mean(ctx: NodeContext) -> GraphTensor:
    tensors = ctx.tensors()
    return (reduce(lambda a, b: a + b, tensors) / float(len(tensors))).cast(tensors[0].dtype)


def _extreme(name: str) -> Callable[[GraphTensor, GraphTensor], GraphTensor]:
    """Max/Min keeping NaN (as numpy.maximum) and the operands' dtype."""

    def pick(a: GraphTensor, b: GraphTensor) -> GraphTensor:
        if a.dtype == DType.bool:
            a, b = a.cast(int32), b.cast(int32)
        result = getattr(a, name)(b)
        if a.dtype.is_float:
            nan = (1 - not_nan(a) * not_nan(b)).cast(bool_)
            result = select(nan, a + b, result)
        return result

    return pick


def clip(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    if ctx.opset < 11:
        low, high = ctx.attr("min"), ctx.attr("max")
        return x.clip(low, high)
    result = x
    if ctx.has(1):
        result = result.maximum(ctx.tensor(1).cast(x.dtype))
    if ctx.has(2):
        result = result.minimum(ctx.tensor(2).cast(x.dtype))
    return result


def cast(ctx: NodeContext) -> GraphTensor:
    saturate, mode = bool(ctx.attr("saturate", 1)), ctx.attr("round_mode", "up")
    return cast_to(ctx.tensor(0), ctx.attr("to"), saturate, mode)


# narrow integer types: (bits, signed); they wrap as numpy's astype does
_WRAP = {2: (8, False), 3: (8, True), 4: (16, False), 5: (16, True)}
_WRAP.update({21: (4, False), 22: (4, True), 25: (2, False), 26: (2, True)})


def cast_to(
    x: GraphTensor, elem_type: int, saturate: bool = True, round_mode: str = "up"
) -> GraphTensor:
    """ONNX Cast: float -> int truncates (as luminal); -> bool is x != 0; narrow integer
    types wrap as numpy's astype does; float8/float4 round onto their grid."""
    if elem_type == TensorProto.FLOAT8E8M0:
        return to_e8m0(x, saturate, round_mode)
    if elem_type in dtypes.NARROW_FLOATS:
        return round_to(x, elem_type, saturate)
    target = dtypes.luminal_dtype(elem_type)
    if target == bool_:
        return x.ne(0).cast(bool_) if x.dtype != bool_ else x
    result = x.cast(target)
    if elem_type not in _WRAP or x.dtype == bool_:
        return result
    bits, signed = _WRAP[elem_type]
    span = 1 << bits
    wrapped = result % span
    if signed:  # [-2^(bits-1), 2^(bits-1))
        wrapped = wrapped - wrapped.ge(span // 2) * span
    return wrapped


def cast_like(ctx: NodeContext) -> GraphTensor:
    like = ctx.inputs[1]
    target = ctx.elem_type(1)
    if target is None and isinstance(like, GraphTensor):
        target = {
            DType.float32: 1,
            DType.float16: 10,
            DType.bfloat16: 16,
            DType.int32: 6,
            DType.bool: 9,
        }[like.dtype]
    elif target is None:
        target = dtypes.from_numpy(np.asarray(like).dtype)
    return cast_to(ctx.tensor(0), target, bool(ctx.attr("saturate", 1)))


def _not(ctx: NodeContext) -> GraphTensor:
    return (1 - ctx.tensor(0).cast(int32)).cast(bool_)


def _where(ctx: NodeContext) -> GraphTensor:
    a, b = ctx.inputs[1], ctx.inputs[2]
    if all(is_static(v) and v.size == 1 and v.dtype.kind in "iuf" for v in (a, b)):
        return _select_scalars(ctx, a, b)
    return select(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))


def _select_scalars(ctx: NodeContext, a: np.ndarray, b: np.ndarray) -> GraphTensor:
    """Where(c, a, b) for two known scalars (an attention mask's 0 and -inf): the
    condition indexes the table [b, a], exact, one load per element instead of a
    gather from the stacked pair of broadcast operands."""
    condition = ctx.tensor(0)
    # two constants (not a weight): equal tables of other Where nodes merge (CSE)
    ends = [ctx.lift(np.asarray(v).reshape(1), "where_table") for v in (b, a)]
    picked = concat(ends, 0).gather(condition.cast(int32))
    shape = broadcast_shapes(condition.view.shape, a.shape, "Where")
    shape = broadcast_shapes(shape, b.shape, "Where")
    leading = (1,) * (len(shape) - picked.ndim)
    return picked.reshape(leading + tuple(picked.view.shape)).expand(shape)


def _float_unary(fn: Callable[[GraphTensor], GraphTensor]) -> Rule:
    return _unary(_keep_dtype(fn))


RULES: dict[str, Rule] = {
    "Add": _binary(lambda a, b: a + b),
    "Sub": _binary(lambda a, b: a - b),
    "Mul": _binary(lambda a, b: a * b),
    "Div": _binary(div),
    "Mod": mod,
    "Pow": power,
    "Neg": _unary(lambda x: -x),
    "Abs": _unary(lambda x: x.abs()),
    "Sign": _unary(lambda x: x.sign()),
    "Reciprocal": _float_unary(lambda x: x.reciprocal()),
    "Sqrt": _float_unary(lambda x: x.sqrt()),
    "Exp": _float_unary(lambda x: x.exp()),
    "Log": _float_unary(lambda x: x.log()),
    "Sin": _float_unary(lambda x: x.sin()),
    "Cos": _float_unary(lambda x: x.cos()),
    "Tan": _float_unary(lambda x: x.sin() / x.cos()),
    "Asin": _float_unary(_asin),
    "Acos": _float_unary(_acos),
    "Atan": _float_unary(_atan),
    "Sinh": _float_unary(_sinh),
    "Cosh": _float_unary(_cosh),
    "Asinh": _float_unary(_asinh),
    "Acosh": _float_unary(_acosh),
    "Atanh": _float_unary(_atanh),
    "Erf": _float_unary(lambda x: x.erf()),
    "Floor": _unary(floor),
    "Ceil": _unary(lambda x: -floor(-x) if x.dtype.is_float else x),
    "Round": _unary(round_half_even),
    "IsInf": _is_inf,
    "IsNaN": _is_nan,
    "Equal": _compare("eq"),
    "Less": _compare("lt"),
    "Greater": _compare("gt"),
    "LessOrEqual": _compare("le"),
    "GreaterOrEqual": _compare("ge"),
    "And": _logic(lambda a, b: a * b),
    "Or": _logic(lambda a, b: (a + b).gt(0)),
    "Xor": _logic(lambda a, b: a.ne(b)),
    "Not": _not,
    "Where": _where,
    "Max": _variadic(_extreme("maximum")),
    "Min": _variadic(_extreme("minimum")),
    "Sum": _variadic(lambda a, b: a + b),
    "Mean": _mean,
    "Clip": clip,
    "Cast": cast,
    "CastLike": cast_like,
}

"""BitCast (opset 26) between float32 and int32, exact, from arithmetic (luminal has no
bit-reinterpreting primitive).

float32 -> int32: the exponent is floor(log2 |x|), corrected against a table of exact
powers of two; the mantissa (|x| / 2^e - 1) * 2^23 is an exact integer; the bits are
assembled in int32 with the sign as -2^31. Subnormals, +-0, +-inf map exactly; NaN
becomes the quiet NaN 0x7FC00000 (a NaN's payload cannot be read arithmetically).
int32 -> float32: exponent and mantissa fields by floor division and modulo (exact
on two's complement), the value (1 + m / 2^23) * 2^(E - 127) with the power from the
table. Same-width integer pairs (int8/uint8, int16/uint16, bool -> uint8) wrap as a
cast does, since every ONNX integer type computes as int32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from luminal.dtype import bool_, float32, int32
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import select
from luminal.onnx.ops.elementwise import cast_to
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
MANTISSA = 2**23
QUIET_NAN = 0x7FC00000
LOWEST = -149  # 2^-149, the smallest subnormal
# 2^k for k = -149 .. 128 (2^128 is inf in float32)
POWERS = np.append(np.ldexp(np.float32(1), np.arange(LOWEST, 128)), np.float32(np.inf))


def _power(ctx: NodeContext, exponent: GraphTensor) -> GraphTensor:
    """2^exponent (int32, clamped to the table) exactly."""
    index = exponent.maximum(ctx.graph.constant(LOWEST, int32)) - LOWEST
    index = index.minimum(ctx.graph.constant(len(POWERS) - 1, int32))
    return ctx.lift(POWERS, "bitcast_powers").gather(index)


def float_bits(ctx: NodeContext, x: GraphTensor) -> GraphTensor:
    a = x.abs()
    guess = a.maximum(2.0**LOWEST).log2()
    e = (guess - guess % 1.0).cast(int32)  # floor, then corrected both ways
    e = e - _power(ctx, e).gt(a).cast(int32)
    e = e + (_power(ctx, e) * 2.0).le(a).cast(int32)
    normal_mantissa = (a / _power(ctx, e) - 1.0) * float(MANTISSA)
    normal = (e + 127) * MANTISSA + normal_mantissa.cast(int32)
    subnormal = (a * 2.0**126 * float(MANTISSA)).cast(int32)
    bits = select(a.lt(2.0**-126), subnormal, normal)
    infinite = ctx.graph.constant(255 * MANTISSA, int32)
    bits = select(a.eq(float("inf")), infinite, bits)
    bits = select(x.ne(x), ctx.graph.constant(QUIET_NAN, int32), bits)
    negative = x.lt(0.0) + x.eq(0.0) * x.reciprocal().lt(0.0)  # -0.0 too
    return bits + negative.cast(int32) * (-(2**31))


def int_bits_to_float(ctx: NodeContext, b: GraphTensor) -> GraphTensor:
    field = (b // MANTISSA) % 256
    mantissa = (b % MANTISSA).cast(float32) * (1.0 / MANTISSA)
    normal = (mantissa + 1.0) * _power(ctx, field - 127)
    subnormal = mantissa * 2.0**-126
    value = select(field.eq(0), subnormal, normal)
    special = select(mantissa.eq(0.0), ctx.graph.constant(float("inf"), float32), value * 0.0)
    special = select(mantissa.eq(0.0), special, ctx.graph.constant(float("nan"), float32))
    value = select(field.eq(255), special, value)
    return select(b.lt(0), -value, value)


def _bitcast(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    to = int(ctx.attr("to"))
    kind = ctx.elem_type(0) or _KINDS.get(x.dtype, 0)
    if kind == TensorProto.FLOAT and to == TensorProto.INT32:
        return float_bits(ctx, x)
    if kind == TensorProto.INT32 and to == TensorProto.FLOAT:
        return int_bits_to_float(ctx, x)
    same = {(2, 3), (3, 2), (4, 5), (5, 4), (9, 2), (6, 6), (1, 1)}
    if (kind, to) in same:
        return cast_to(x.cast(int32) if x.dtype == bool_ else x, to)
    raise ctx.unsupported(
        f"BitCast from {dtypes.type_name(kind)} to {dtypes.type_name(to)} (luminal "
        "reinterprets float32 <-> int32 and same-width integers only)"
    )


_KINDS = {float32: TensorProto.FLOAT, int32: TensorProto.INT32, bool_: TensorProto.BOOL}


RULES: dict[str, Rule] = {"BitCast": _bitcast}

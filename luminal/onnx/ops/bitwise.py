"""Bitwise ops and BitShift on int32 (every ONNX integer type computes as int32),
exact over the whole range, from arithmetic: luminal has no bitwise primitive.

~x is -x - 1. x & y is rebuilt from the 31 low bits (x // 2^k mod 2, floor division
and modulo being exact for int32) plus the sign bit, so one And costs about 31 times
an elementwise op; Or and Xor follow from And by wrapping addition
(x | y = x + y - (x & y), x ^ y = x + y - 2 (x & y)). Outputs cast back to narrow or
unsigned ONNX types wrap as two's complement, which gives those types' results.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from luminal.dtype import int32
from luminal.onnx.context import NodeContext
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
INT_MIN = -(2**31)
# 2^k for k = 0..31 in int32 (2^31 wraps to INT_MIN, as a shift by 31 does)
POWERS = np.array([2**k for k in range(31)] + [INT_MIN], dtype=np.int32)


def _integers(ctx: NodeContext) -> tuple[GraphTensor, GraphTensor]:
    return ctx.tensor(0).cast(int32), ctx.tensor(1).cast(int32)


def bitwise_and(ctx: NodeContext, a: GraphTensor, b: GraphTensor) -> GraphTensor:
    powers = ctx.lift(POWERS[:31], "bit_values")
    low = (a.unsqueeze(-1) // powers % 2) * (b.unsqueeze(-1) // powers % 2)
    sign = a.lt(0) * b.lt(0) * INT_MIN
    return (low * powers).sum(-1) + sign


def _and(ctx: NodeContext) -> GraphTensor:
    a, b = _integers(ctx)
    return bitwise_and(ctx, a, b).cast(ctx.dtype_of(0))


def _or(ctx: NodeContext) -> GraphTensor:
    a, b = _integers(ctx)
    return (a + b - bitwise_and(ctx, a, b)).cast(ctx.dtype_of(0))


def _xor(ctx: NodeContext) -> GraphTensor:
    a, b = _integers(ctx)
    return (a + b - bitwise_and(ctx, a, b) * 2).cast(ctx.dtype_of(0))


def _not(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    return -x - 1


def _bit_shift(ctx: NodeContext) -> GraphTensor:
    """x << s wraps (2^s from a table, 2^31 as INT_MIN); x >> s is arithmetic (floor
    division); a shift by >= 32 or by a negative amount gives 0 to the left and the
    sign (0 or -1) to the right, as C on the unsigned amount does. Narrow types need no
    width of their own: their values shifted right by >= their width are already 0 or
    -1, and shifted left they wrap when cast back."""
    x, shift = _integers(ctx)
    powers = ctx.lift(POWERS, "shift_powers")
    in_range = shift.ge(0) * shift.lt(32)
    factor = powers.gather(shift.maximum(0).minimum(31))
    if ctx.attr("direction") == "LEFT":
        return (x * factor * in_range).cast(ctx.dtype_of(0))
    small = shift.ge(0) * shift.lt(31)
    quotient = x // powers.gather(shift.maximum(0).minimum(30))
    return (quotient * small - x.lt(0) * (1 - small)).cast(ctx.dtype_of(0))


RULES: dict[str, Rule] = {
    "BitwiseAnd": _and,
    "BitwiseOr": _or,
    "BitwiseXor": _xor,
    "BitwiseNot": _not,
    "BitShift": _bit_shift,
}

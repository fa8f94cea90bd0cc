"""float32 bit patterns from arithmetic (luminal has no bit-reinterpreting primitive),
shared by BitCast and the casts onto float8 grids.

float32 -> int32 bits: the exponent is floor(log2 |x|), corrected against a table of
exact powers of two; the mantissa (|x| / 2^e - 1) * 2^23 is an exact integer; the bits
are assembled in int32 with the sign as -2^31. Subnormals, +-0, +-inf map exactly;
NaN becomes the quiet NaN 0x7FC00000 (a NaN's payload cannot be read arithmetically).
int32 bits -> float32: exponent and mantissa fields by floor division and modulo
(exact on two's complement), the value (1 + m / 2^23) * 2^(E - 127)."""

from __future__ import annotations

import numpy as np

from luminal.dtype import float32, int32
from luminal.onnx.ops.common import select
from luminal.tensor import GraphTensor

MANTISSA = 2**23
QUIET_NAN = 0x7FC00000
LOWEST = -149  # 2^-149, the smallest subnormal
# 2^k for k = -149 .. 128 (2^128 is inf in float32)
POWERS = np.append(np.ldexp(np.float32(1), np.arange(LOWEST, 128)), np.float32(np.inf))


def powers(graph: object) -> GraphTensor:
    """The table of POWERS as a graph weight."""
    return graph.tensor(POWERS.shape, dtype=float32, name="float_powers").set(POWERS)


def power(table: GraphTensor, exponent: GraphTensor) -> GraphTensor:
    """2^exponent (int32, clamped to the table) exactly."""
    graph = table.graph
    clamped = exponent.maximum(graph.constant(LOWEST, int32)).minimum(graph.constant(128, int32))
    return table.gather(clamped - LOWEST)


def exponent_of(table: GraphTensor, a: GraphTensor) -> GraphTensor:
    """floor(log2 a) for a > 0 (int32), exact: log2's guess corrected both ways
    (NaN counts as 1 and inf as the largest float, so the guess is a finite int)."""
    a = select(a.eq(a), a, a.graph.constant(1.0, float32)).minimum(3.4028235e38)
    guess = a.maximum(2.0**LOWEST).log2()
    e = (guess - guess % 1.0).cast(int32)
    e = e - power(table, e).gt(a).cast(int32)
    return e + (power(table, e) * 2.0).le(a).cast(int32)


def float_bits(x: GraphTensor) -> GraphTensor:
    table = powers(x.graph)
    a = x.abs()
    e = exponent_of(table, a)
    normal_mantissa = (a / power(table, e) - 1.0) * float(MANTISSA)
    normal = (e + 127) * MANTISSA + normal_mantissa.cast(int32)
    subnormal = (a * 2.0**126 * float(MANTISSA)).cast(int32)
    bits = select(a.lt(2.0**-126), subnormal, normal)
    infinite = x.graph.constant(255 * MANTISSA, int32)
    bits = select(a.eq(float("inf")), infinite, bits)
    bits = select(x.ne(x), x.graph.constant(QUIET_NAN, int32), bits)
    negative = x.lt(0.0) + x.eq(0.0) * x.reciprocal().lt(0.0)  # -0.0 too
    return bits + negative.cast(int32) * (-(2**31))


def int_bits_to_float(b: GraphTensor) -> GraphTensor:
    table = powers(b.graph)
    field = (b // MANTISSA) % 256
    mantissa = (b % MANTISSA).cast(float32) * (1.0 / MANTISSA)
    normal = (mantissa + 1.0) * power(table, field - 127)
    subnormal = mantissa * 2.0**-126
    value = select(field.eq(0), subnormal, normal)
    infinite = b.graph.constant(float("inf"), float32)
    special = select(mantissa.eq(0.0), infinite, b.graph.constant(float("nan"), float32))
    value = select(field.eq(255), special, value)
    return select(b.lt(0), -value, value)

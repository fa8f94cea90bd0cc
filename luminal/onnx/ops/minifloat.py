"""Rounding float32 values onto the grid of ONNX's 8- and 4-bit float types.

luminal has no float8/float4 dtype: tensors of those types compute as float32 holding
exactly representable values (see docs/onnx.md). A Cast to one of them rounds to the
nearest representable value, ties to even (as ml_dtypes and ONNX's reference do):
the exponent is floor(log2 |x|) clamped below to the smallest normal exponent (so
subnormals share its spacing), the spacing 2^(e - mantissa bits) an exact power of
two from a table, and |x| / spacing rounded half to even. Past the largest finite
value the result saturates (saturate=1) or becomes inf/NaN as the type has them."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto

from luminal.dtype import float32, int32
from luminal.onnx.ops.common import round_half_even, select
from luminal.onnx.ops.floatbits import MANTISSA, exponent_of, float_bits, power, powers
from luminal.tensor import GraphTensor


@dataclass(frozen=True)
class Format:
    mantissa: int  # explicit mantissa bits
    min_exponent: int  # exponent of the smallest normal value
    largest: float  # largest finite value
    has_inf: bool  # overflow without saturation gives inf (else NaN)
    has_nan: bool  # float4 has neither: it always saturates


FORMATS = {
    TensorProto.FLOAT8E4M3FN: Format(3, -6, 448.0, False, True),
    TensorProto.FLOAT8E4M3FNUZ: Format(3, -7, 240.0, False, True),
    TensorProto.FLOAT8E5M2: Format(2, -14, 57344.0, True, True),
    TensorProto.FLOAT8E5M2FNUZ: Format(2, -15, 57344.0, False, True),
    TensorProto.FLOAT4E2M1: Format(1, 0, 6.0, False, False),
}


def round_to(x: GraphTensor, elem_type: int, saturate: bool) -> GraphTensor:
    """x (float) rounded onto `elem_type`'s grid, as float32."""
    fmt = FORMATS[elem_type]
    x = x.cast(float32)
    a = x.abs().minimum(2.0 * fmt.largest)  # inf: past the largest, still finite
    table = powers(x.graph)
    e = exponent_of(table, a.maximum(2.0**fmt.min_exponent))
    spacing = power(table, e - fmt.mantissa)
    rounded = round_half_even(a / spacing) * spacing
    big = x.graph.constant(fmt.largest, float32)
    if saturate or not fmt.has_nan:
        rounded = rounded.minimum(big)
    else:
        overflow = x.graph.constant(float("inf") if fmt.has_inf else float("nan"), float32)
        rounded = select(rounded.gt(big), overflow, rounded)
    rounded = select(x.lt(0.0), -rounded, rounded)
    return select(x.ne(x), x, rounded)  # NaN stays NaN


def to_e8m0(x: GraphTensor, saturate: bool, mode: str) -> GraphTensor:
    """FLOAT8E8M0 (a power of two, 2^-127 .. 2^127, or NaN) as ONNX's reference
    computes it from the float32 bits: the exponent field, raised by one when the
    rounding mode says so from the mantissa bits ("up": any fraction; "nearest": the
    guard bit with round/sticky/exponent-lsb; "down": never). Without saturation a
    raise past 2^127 gives NaN; inf and NaN give NaN."""
    bits = float_bits(x.cast(float32))
    field = (bits // MANTISSA) % 256
    fraction = bits % MANTISSA
    if mode == "up":
        raise_ = fraction.gt(0)
    elif mode == "nearest":
        guard = (fraction // 2**22) % 2
        rest = ((fraction // 2**21) % 2 + (fraction % 2**21).gt(0) + field.gt(0)).gt(0)
        raise_ = guard.eq(1) * rest
    else:
        raise_ = fraction.lt(0)  # "down": never
    raise_ = raise_ * field.lt(255)
    if saturate:
        raise_ = raise_ * field.lt(254)
    field = field + raise_.cast(int32)
    value = power(powers(x.graph), field - 127)
    return select(field.eq(255), x.graph.constant(float("nan"), float32), value)

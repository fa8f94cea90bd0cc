"""Rounding float32 values onto the grid of ONNX's 8- and 4-bit float types.

luminal has no float8/float4 dtype: tensors of those types compute as float32 holding
exactly representable values (see docs/onnx.md). A Cast to one of them rounds to the
nearest representable value, ties to even (as ml_dtypes and ONNX's reference do):
the exponent is floor(log2 |x|) clamped below to the smallest normal exponent (so
subnormals share its spacing), the spacing 2^(e - mantissa bits) an exact power of
two from a table, and |x| / spacing rounded half to even. Past the largest finite
value the result saturates (saturate=1) or becomes inf/NaN as the type has them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from luminal.dtype import float32, int32
from luminal.onnx.ops.common import floor, round_half_even, select
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
# 2^k for k = -30 .. 20, enough for every format's spacing
LOW = -30
POWERS = np.ldexp(np.float32(1), np.arange(LOW, 21)).astype(np.float32)


def _power(table: GraphTensor, exponent: GraphTensor) -> GraphTensor:
    """2^exponent exactly, from the table of POWERS."""
    index = exponent.maximum(table.graph.constant(LOW, int32)) - LOW
    return table.gather(index.minimum(table.graph.constant(len(POWERS) - 1, int32)))


def round_to(x: GraphTensor, elem_type: int, saturate: bool) -> GraphTensor:
    """x (float) rounded onto `elem_type`'s grid, as float32."""
    fmt = FORMATS[elem_type]
    x = x.cast(float32)
    a = x.abs().minimum(2.0 * fmt.largest)  # inf: past the largest, still finite
    top = int(math.floor(math.log2(fmt.largest)))
    guess = floor(a.maximum(2.0**fmt.min_exponent).minimum(2.0 ** (top + 1)).log2())
    table = x.graph.tensor(POWERS.shape, dtype=float32, name="minifloat_powers").set(POWERS)
    e = guess.cast(int32)
    e = e - _power(table, e).gt(a).cast(int32)  # log2 may be off by one at powers of two
    e = e + (_power(table, e) * 2.0).le(a).cast(int32)
    e = e.maximum(x.graph.constant(fmt.min_exponent, int32))
    spacing = _power(table, e - fmt.mantissa)
    rounded = round_half_even(a / spacing) * spacing
    big = x.graph.constant(fmt.largest, float32)
    if saturate or not fmt.has_nan:
        rounded = rounded.minimum(big)
    else:
        overflow = x.graph.constant(float("inf") if fmt.has_inf else float("nan"), float32)
        rounded = select(rounded.gt(big), overflow, rounded)
    rounded = select(x.lt(0.0), -rounded, rounded)
    return select(x.ne(x), x, rounded)  # NaN stays NaN

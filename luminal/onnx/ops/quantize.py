"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, for 8- and 16-bit integer
types (which compute as int32; see docs/onnx.md).

Scales and zero points are per tensor, per axis or per block (repeated along the
axis). Quantizing rounds half to even and saturates to the target type's range; the
integer products (MatMulInteger, the QLinear ops' accumulators) are int32 matrix
products, exact as in ONNX's reference."""

from __future__ import annotations

from collections.abc import Callable

from onnx import TensorProto

from luminal.dtype import float32, int32
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis_of, divide, round_half_even
from luminal.onnx.ops.minifloat import FORMATS, round_to
from luminal.onnx.ops.nn_ops import conv_node
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
RANGES = {
    TensorProto.UINT8: (0, 255),
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT16: (0, 65535),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT4: (0, 15),
    TensorProto.INT4: (-8, 7),
    TensorProto.UINT2: (0, 3),
    TensorProto.INT2: (-2, 1),
}


def _range(ctx: NodeContext, kind: int | None) -> tuple[int, int]:
    kind = kind or TensorProto.UINT8
    if kind not in RANGES:
        raise ctx.unsupported(
            f"quantized type {dtypes.type_name(kind)} (luminal quantizes to 8- and 16-bit integers)"
        )
    return RANGES[kind]


def _param(ctx: NodeContext, value: GraphTensor, x: GraphTensor, axis: int) -> GraphTensor:
    """A scale or zero point shaped to broadcast over x: a scalar, one value per index of
    `axis`, or (block_size > 0) one per block of `axis`, repeated over the block."""
    if value.ndim == 0 or (value.ndim == 1 and value.view.shape[0].as_int() == 1):
        return value.reshape(())
    block = int(ctx.attr("block_size", 0))
    if not block:
        shape = [1] * x.ndim
        shape[axis] = value.view.shape[0]
        return value.reshape(tuple(shape))
    blocks = value.view.shape[axis]
    spread = value.unsqueeze(axis + 1)
    sizes = list(spread.view.shape)
    sizes[axis + 1] = block
    spread = spread.expand(tuple(sizes))
    merged = list(value.view.shape)
    merged[axis] = blocks * block
    spread = spread.reshape(tuple(merged))
    ranges: list = [None] * spread.ndim
    ranges[axis] = (0, x.view.shape[axis])
    return spread.slice(ranges)


def quantize(x: GraphTensor, scale: GraphTensor, zero: GraphTensor | None, bounds) -> GraphTensor:
    """clip(rint(x / scale) + zero, bounds) as int32."""
    return saturate(divide(x.cast(float32), scale.cast(float32)), zero, bounds)


def saturate(y: GraphTensor, zero: GraphTensor | None, bounds) -> GraphTensor:
    """clip(rint(y) + zero, bounds) as int32."""
    y = round_half_even(y)
    if zero is not None:
        y = y + zero.cast(float32)
    return y.clamp(float(bounds[0]), float(bounds[1])).cast(int32)


def _quantize_linear(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    if ctx.attr("precision", 0) not in (0, TensorProto.FLOAT):
        raise ctx.unsupported(f"precision={ctx.attr('precision')}")
    axis = axis_of(ctx.attr("axis", 1), x.ndim)
    kind = ctx.elem_type(2) if ctx.has(2) else ctx.attr("output_dtype", 0)
    scale = _param(ctx, ctx.tensor(1), x, axis)
    zero = _param(ctx, ctx.tensor(2), x, axis) if ctx.has(2) else None
    if kind in FORMATS:  # float8 zero points are 0; float4's is added
        y = divide(x.cast(float32), scale.cast(float32))
        if kind == TensorProto.FLOAT4E2M1 and zero is not None:
            y = y + zero.cast(float32)
        return round_to(y, kind, bool(ctx.attr("saturate", 1)))
    return quantize(x, scale, zero, _range(ctx, kind))


def _dequantize_linear(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    kind = ctx.elem_type(0)
    if kind not in (None, TensorProto.INT32, *RANGES, *FORMATS):
        _range(ctx, kind)  # raises, naming the type
    axis = axis_of(ctx.attr("axis", 1), x.ndim)
    scale = ctx.tensor(1)
    y = x.cast(float32)
    if ctx.has(2) and kind not in FORMATS:  # float8/float4: no zero point
        y = y - _param(ctx, ctx.tensor(2), x, axis).cast(float32)
    y = y * _param(ctx, scale, x, axis).cast(float32)
    target = ctx.attr("output_dtype", 0)
    return y.cast(dtypes.luminal_dtype(target)) if target else y.cast(scale.dtype)


def _dynamic_quantize_linear(ctx: NodeContext) -> list[GraphTensor]:
    """uint8 with the scale and zero point from the data's range (0 included)."""
    x = ctx.tensor(0).cast(float32)
    high = x.max().maximum(0.0)
    low = x.min().minimum(0.0)
    span = high - low
    scale = divide(span + span.eq(0.0).cast(float32), ctx.graph.constant(255.0, float32))
    zero = round_half_even((0.0 - divide(low, scale)).clamp(0.0, 255.0))
    return [quantize(x, scale, zero, (0, 255)), scale, zero.cast(int32)]


def _centered(ctx: NodeContext, index: int, zero_index: int, axis: int | None) -> GraphTensor:
    """Input `index` minus its zero point (int32); a 1-D zero point applies along
    `axis` (rows of A, columns of B, output channels of W)."""
    value = ctx.tensor(index).cast(int32)
    if not ctx.has(zero_index):
        return value
    zero = ctx.tensor(zero_index).cast(int32)
    if zero.ndim == 0 or zero.view.shape[0].as_int() == 1 or axis is None:
        return value - zero.reshape(()) if zero.ndim <= 1 else value - zero
    shape = [1] * value.ndim
    shape[axis % value.ndim] = zero.view.shape[0]
    return value - zero.reshape(tuple(shape))


def _matmul_integer(ctx: NodeContext) -> GraphTensor:
    a = _centered(ctx, 0, 2, -2)
    b = _centered(ctx, 1, 3, -1)
    return a.matmul(b)


def _conv_integer(ctx: NodeContext) -> GraphTensor:
    x = _centered(ctx, 0, 2, None)
    w = _centered(ctx, 1, 3, 0)
    return conv_node(ctx, x.cast(float32), w.cast(float32), None).cast(int32)


def _requantize(ctx: NodeContext, acc: GraphTensor, scale: GraphTensor, out: int) -> GraphTensor:
    """acc * scale / y_scale + y_zero_point, rounded and saturated to y's type."""
    y_scale, kind = ctx.tensor(out), ctx.elem_type(out + 1) if ctx.has(out + 1) else None
    kind = kind or ctx.elem_type(0) or TensorProto.UINT8
    zero = ctx.tensor(out + 1) if ctx.has(out + 1) else None
    multiplier = divide(scale.cast(float32), y_scale.cast(float32).reshape(()))
    return saturate(acc.cast(float32) * multiplier, zero, _range(ctx, kind))


def _qlinear_matmul(ctx: NodeContext) -> GraphTensor:
    a = _centered(ctx, 0, 2, -2)
    b = _centered(ctx, 3, 5, -1)
    scale = ctx.tensor(1).cast(float32).reshape(()) * ctx.tensor(4).cast(float32).reshape(())
    return _requantize(ctx, a.matmul(b), scale, 6)


def _qlinear_conv(ctx: NodeContext) -> GraphTensor:
    x = _centered(ctx, 0, 2, None)
    w = _centered(ctx, 3, 5, 0)
    bias = ctx.optional(8)
    acc = conv_node(ctx, x.cast(float32), w.cast(float32), None)
    if bias is not None:
        acc = acc + bias.cast(float32).reshape((-1,) + (1,) * (acc.ndim - 2))
    w_scale = ctx.tensor(4).cast(float32)
    if w_scale.ndim == 1 and w_scale.view.shape[0].as_int() != 1:
        w_scale = w_scale.reshape((-1,) + (1,) * (acc.ndim - 2))
    else:
        w_scale = w_scale.reshape(())
    scale = ctx.tensor(1).cast(float32).reshape(()) * w_scale
    return _requantize(ctx, acc, scale, 6)


RULES: dict[str, Rule] = {
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear,
    "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer,
    "QLinearMatMul": _qlinear_matmul,
    "QLinearConv": _qlinear_conv,
}

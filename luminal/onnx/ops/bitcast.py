"""BitCast (opset 26) between float32 and int32, exact, from arithmetic (see
floatbits.py); same-width integer pairs (int8/uint8, int16/uint16, bool -> uint8) wrap
as a cast does, since every ONNX integer type computes as int32."""

from __future__ import annotations

from collections.abc import Callable

from onnx import TensorProto

from luminal.dtype import bool_, float32, int32
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.elementwise import cast_to
from luminal.onnx.ops.floatbits import float_bits, int_bits_to_float
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _bitcast(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    to = int(ctx.attr("to"))
    kind = ctx.elem_type(0) or _KINDS.get(x.dtype, 0)
    if kind == TensorProto.FLOAT and to == TensorProto.INT32:
        return float_bits(x)
    if kind == TensorProto.INT32 and to == TensorProto.FLOAT:
        return int_bits_to_float(x)
    same = {(2, 3), (3, 2), (4, 5), (5, 4), (9, 2), (6, 6), (1, 1)}
    if (kind, to) in same:
        return cast_to(x.cast(int32) if x.dtype == bool_ else x, to)
    raise ctx.unsupported(
        f"BitCast from {dtypes.type_name(kind)} to {dtypes.type_name(to)} (luminal "
        "reinterprets float32 <-> int32 and same-width integers only)"
    )


_KINDS = {float32: TensorProto.FLOAT, int32: TensorProto.INT32, bool_: TensorProto.BOOL}


RULES: dict[str, Rule] = {"BitCast": _bitcast}

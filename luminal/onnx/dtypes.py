"""How ONNX element types map onto luminal's five dtypes (see docs/onnx.md).

Every integer type computes as int32 (values are range-checked where data enters),
float64 computes as float32, float16 and bfloat16 are native; outputs are cast back to
the type the model declares, so callers see ONNX's dtypes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from luminal.dtype import DType, bfloat16, bool_, float16, float32, int32
from luminal.errors import DTypeError

_INTEGERS = {
    TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
}
INTEGER_TYPES = frozenset(_INTEGERS)
_FLOATS = {
    TensorProto.FLOAT: (np.float32, float32),
    TensorProto.DOUBLE: (np.float64, float32),
    TensorProto.FLOAT16: (np.float16, float16),
    TensorProto.BFLOAT16: (ml_dtypes.bfloat16, bfloat16),
}


# held as float32 values on the type's grid / as int32 (Cast rounds or wraps onto them)
NARROW_FLOATS = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
}
NARROW_INTEGERS = {
    TensorProto.UINT4: ml_dtypes.uint4,
    TensorProto.INT4: ml_dtypes.int4,
    TensorProto.UINT2: ml_dtypes.uint2,
    TensorProto.INT2: ml_dtypes.int2,
}
_NARROW_NUMPY = {np.dtype(t) for t in [*NARROW_FLOATS.values(), *NARROW_INTEGERS.values()]}


def is_supported(elem_type: int) -> bool:
    return (
        elem_type in _INTEGERS
        or elem_type in _FLOATS
        or elem_type in NARROW_FLOATS
        or elem_type in NARROW_INTEGERS
        or elem_type == TensorProto.BOOL
    )


def type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"type {elem_type}"


def luminal_dtype(elem_type: int) -> DType:
    """The luminal dtype an ONNX element type computes in, or DTypeError."""
    if elem_type in _INTEGERS or elem_type in NARROW_INTEGERS:
        return int32
    if elem_type in _FLOATS:
        return _FLOATS[elem_type][1]
    if elem_type in NARROW_FLOATS:
        return float32
    if elem_type == TensorProto.BOOL:
        return bool_
    raise DTypeError(
        f"ONNX element type {type_name(elem_type)} has no luminal equivalent; supported: "
        "float32/64, float16, bfloat16, float8 (e4m3fn/fnuz, e5m2/fnuz, e8m0), float4e2m1, "
        "(u)int2/4/8/16/32/64 and bool (see docs/onnx.md)"
    )


def numpy_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype ONNX uses for `elem_type` (what callers get back)."""
    if elem_type in _INTEGERS:
        return np.dtype(_INTEGERS[elem_type])
    if elem_type in _FLOATS:
        return np.dtype(_FLOATS[elem_type][0])
    if elem_type == TensorProto.BOOL:
        return np.dtype(np.bool_)
    if elem_type in NARROW_FLOATS:
        return np.dtype(NARROW_FLOATS[elem_type])
    if elem_type in NARROW_INTEGERS:
        return np.dtype(NARROW_INTEGERS[elem_type])
    raise DTypeError(f"ONNX element type {type_name(elem_type)} has no numpy equivalent")


def to_luminal_array(array: np.ndarray, what: str) -> np.ndarray:
    """`array` in the numpy type of its luminal dtype; integers outside int32 raise
    DTypeError naming `what` (a silently wrapped index or id would be wrong)."""
    array = np.asarray(array)
    kind = array.dtype.kind
    if array.dtype in _NARROW_NUMPY:  # float8/float4 values are exact in float32
        wide = (
            np.int32
            if array.dtype in {np.dtype(t) for t in NARROW_INTEGERS.values()}
            else np.float32
        )
        return array.astype(wide)
    if kind == "b":
        return array.astype(np.bool_, copy=False)
    if kind in "iu":
        if array.size and not np.can_cast(array.dtype, np.int32):
            low, high = int(array.min()), int(array.max())
            info = np.iinfo(np.int32)
            if low < info.min or high > info.max:
                raise DTypeError(
                    f"{what}: {array.dtype} values in [{low}, {high}] do not fit luminal's "
                    f"int32 (integers compute as int32, see docs/onnx.md)"
                )
        return array.astype(np.int32, copy=False)
    if array.dtype == np.float16 or array.dtype == np.dtype(ml_dtypes.bfloat16):
        return array
    if kind == "f":
        return array.astype(np.float32, copy=False)
    raise DTypeError(f"{what}: numpy dtype {array.dtype} has no luminal equivalent")


def from_numpy(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype."""
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

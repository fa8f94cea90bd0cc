"""Element types of graph tensors and their numpy storage types."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from luminal.errors import DTypeError


class DType(enum.Enum):
    """A tensor element type. Floating types compute in float32 in the reference runtime."""

    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int32 = "int32"
    bool = "bool"

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16, DType.bfloat16)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    def __repr__(self) -> str:
        return f"lm.{self.value}"

    __str__ = __repr__


_NUMPY: dict[DType, np.dtype] = {
    DType.float32: np.dtype(np.float32),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.int32: np.dtype(np.int32),
    DType.bool: np.dtype(np.bool_),
}

float32 = DType.float32
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
bool_ = DType.bool


def from_numpy(dtype: np.dtype) -> DType:
    """The luminal dtype that stores numpy `dtype` without loss, or DTypeError."""
    dtype = np.dtype(dtype)
    for candidate, np_dtype in _NUMPY.items():
        if np_dtype == dtype:
            return candidate
    raise DTypeError(
        f"numpy dtype {dtype} has no luminal equivalent; "
        "expected float32, float16, bfloat16, int32 or bool"
    )


def as_dtype(value: DType | str | np.dtype | type) -> DType:
    """Accept lm.float32, 'float32', np.float32 or np.dtype('float32')."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        try:
            return DType(value)
        except ValueError:
            pass
    try:
        return from_numpy(np.dtype(value))
    except TypeError:
        raise DTypeError(f"{value!r} is not a dtype") from None


def promote(a: DType, b: DType) -> DType:
    """The dtype two operands are computed in (PyTorch's order: bool < int32 < float)."""
    if a == b:
        return a
    order = [DType.bool, DType.int32, DType.bfloat16, DType.float16, DType.float32]
    if {a, b} == {DType.bfloat16, DType.float16}:
        return DType.float32
    return max(a, b, key=order.index)

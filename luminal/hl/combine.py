"""concat and stack: padded views added together (padding reads zero, so no copies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from luminal.dtype import DType, promote
from luminal.errors import ShapeError
from luminal.hl.movement import normalize_axis
from luminal.shape.expr import ZERO, Expr

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


def concat(tensors: Sequence[GraphTensor], axis: int = 0) -> GraphTensor:
    """Join tensors along an existing axis (torch.cat)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concat: needs at least one tensor")
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError("concat: zero-dimensional tensors cannot be concatenated; use stack")
    a = normalize_axis(axis, first.ndim, "concat", first._shape_text())
    dtype = first.dtype
    for t in tensors[1:]:
        others = [d for i, d in enumerate(t.view.shape) if i != a]
        if t.ndim != first.ndim or others != [d for i, d in enumerate(first.view.shape) if i != a]:
            shapes = ", ".join(x._shape_text() for x in tensors)
            raise ShapeError(f"concat: shapes {shapes} differ outside axis {axis}")
        dtype = promote(dtype, t.dtype)
    if len(tensors) == 1:
        return tensors[0].cast(dtype)
    if dtype == DType.bool:  # padded pieces are added, which bool does not do
        return concat([t.cast(DType.int32) for t in tensors], axis).cast(DType.bool)
    return _join([t.cast(dtype) for t in tensors], a)


def _join(tensors: list[GraphTensor], axis: int) -> GraphTensor:
    """Concatenate validated tensors of one dtype: each half is joined on its own, then
    the two are padded to the full length and added, so every element is copied
    O(log n) times rather than once per tensor."""
    if len(tensors) == 1:
        return tensors[0]
    middle = len(tensors) // 2
    left, right = _join(tensors[:middle], axis), _join(tensors[middle:], axis)
    left_size, right_size = left.view.shape[axis], right.view.shape[axis]
    before: list[tuple[Expr, Expr] | None] = [None] * left.ndim
    after: list[tuple[Expr, Expr] | None] = [None] * left.ndim
    before[axis], after[axis] = (ZERO, right_size), (left_size, ZERO)
    return left.pad(before) + right.pad(after)


def stack(tensors: Sequence[GraphTensor], axis: int = 0) -> GraphTensor:
    """Join tensors along a new axis (torch.stack)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    first = tensors[0]
    for t in tensors[1:]:
        if t.view.shape != first.view.shape:
            shapes = ", ".join(x._shape_text() for x in tensors)
            raise ShapeError(f"stack: tensors must have one shape, got {shapes}")
    a = normalize_axis(axis, first.ndim + 1, "stack", first._shape_text())
    return concat([t.unsqueeze(a) for t in tensors], a)

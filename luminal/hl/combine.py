"""concat and stack: padded views added together (padding reads zero, so no copies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from luminal.errors import ShapeError
from luminal.hl.movement import normalize_axis

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
        same_rank = t.ndim == first.ndim
        if not same_rank or any(
            i != a and x != y for i, (x, y) in enumerate(zip(t.view.shape, first.view.shape, strict=False))
        ):
            shapes = ", ".join(x._shape_text() for x in tensors)
            raise ShapeError(f"concat: shapes {shapes} differ outside axis {axis}")
        if t.dtype != dtype:
            from luminal.dtype import promote

            dtype = promote(dtype, t.dtype)
    tensors = [t.cast(dtype) for t in tensors]
    if len(tensors) == 1:
        return tensors[0]
    total = tensors[0].view.shape[a] * 0
    for t in tensors:
        total = total + t.view.shape[a]
    result = None
    before = total * 0
    for t in tensors:
        after = total - before - t.view.shape[a]
        padding = [None] * t.ndim
        padding[a] = (before, after)
        piece = t.pad(padding)
        result = piece if result is None else result + piece
        before = before + t.view.shape[a]
    return result  # type: ignore[return-value]


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

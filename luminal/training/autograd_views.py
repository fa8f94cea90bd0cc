"""Exact adjoints of views: map a gradient read through a view back onto its source.

An edge reads its source node through a `ShapeTracker` whose `history` lists the
movements that built it from the contiguous source shape. The adjoint of the whole view
is the adjoint of each movement applied in reverse order; each movement has an exact
linear adjoint (docs/autograd.md), kept in one table keyed by the movement's type:

    permute -> inverse permute     expand -> sum over the new axis
    slice   -> pad (strided)       pad    -> slice
    reshape -> reshape back        pool   -> sum of the overlapping windows

Gradients are built from views and primitives (no numpy at build time), so symbolic
dims flow through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from luminal.errors import LuminalError, format_shape
from luminal.shape.expr import ZERO, Expr, sym
from luminal.shape.tracker import (
    Expand,
    Movement,
    Pad,
    Permute,
    Pool,
    Reshape,
    ShapeTracker,
    Slice,
)

if TYPE_CHECKING:
    from luminal.dtype import DType
    from luminal.graph import Graph
    from luminal.tensor import GraphTensor

Shape = tuple[Expr, ...]


# ---------------------------------------------------------------- view helpers
def with_view(x: GraphTensor, view: ShapeTracker | None, retry: Callable) -> GraphTensor:
    """`x` read through `view`, or a contiguous copy of `x` moved by `retry` when one
    view cannot express the movement (a reshape of a padded view, say)."""
    if view is not None:
        return x._with_view(view)
    copy = x.contiguous()
    moved = retry(copy.view)
    assert moved is not None, "a movement must be expressible on a contiguous view"
    return copy._with_view(moved)


def reshaped(x: GraphTensor, shape: Sequence[Expr]) -> GraphTensor:
    shape = tuple(shape)
    if tuple(x.view.shape) == shape:
        return x
    return with_view(x, x.view.reshape(shape), lambda v: v.reshape(shape))


def padded(x: GraphTensor, axis: int, before: Expr, after: Expr) -> GraphTensor:
    """Zero padding on one axis (a free view)."""
    if before == 0 and after == 0:
        return x
    pairs = [(ZERO, ZERO)] * x.ndim
    pairs[axis] = (sym(before), sym(after))
    return x._with_view(x.view.pad(pairs))


def sliced(x: GraphTensor, axis: int, start: Expr, stop: Expr) -> GraphTensor:
    """x[start:stop] on one axis (a free view); bounds must already lie in the dim."""
    if start == 0 and stop == x.view.shape[axis]:
        return x
    ranges = [(ZERO, d, 1) for d in x.view.shape]
    ranges[axis] = (sym(start), sym(stop), 1)
    return x._with_view(x.view.slice(ranges))


def full(graph: Graph, value: float, shape: Sequence[Expr], dtype: DType) -> GraphTensor:
    """`value` broadcast to `shape` (one Constant node, a stride-0 view)."""
    scalar = graph.constant(value, dtype)
    view = scalar.view
    for axis, dim in enumerate(shape):
        view = view.expand(axis, dim)
    return scalar._with_view(view)


def zeros(graph: Graph, shape: Sequence[Expr], dtype: DType) -> GraphTensor:
    return full(graph, 0, shape, dtype)


def place_strided(x: GraphTensor, axis: int, start: Expr, step: int, length: Expr) -> GraphTensor:
    """The adjoint of `x = y[start::step]` on `axis`: a tensor of size `length` there
    holding x[i] at start + i * step and zeros elsewhere. Unsqueeze, pad the new axis to
    `step` and merge it (the values land every `step` places), then trim and pad."""
    n = x.view.shape[axis]
    if n.as_int() == 0:
        shape = list(x.view.shape)
        shape[axis] = length
        return zeros(x.graph, shape, x.dtype)
    if step == 1:
        return padded(x, axis, start, length - start - n)
    shape = list(x.view.shape)
    spread = x._with_view(x.view.expand(axis + 1, 1))
    spread = padded(spread, axis + 1, ZERO, sym(step - 1))
    shape[axis] = n * step
    spread = reshaped(spread, shape)
    used = (n - 1) * step + 1  # up to and including the last value
    spread = sliced(spread, axis, ZERO, used)
    return padded(spread, axis, start, length - start - used)


# ---------------------------------------------------------------- movement adjoints
def _inverse(axes: Sequence[int]) -> list[int]:
    inverse = [0] * len(axes)
    for position, axis in enumerate(axes):
        inverse[axis] = position
    return inverse


def _permute(grad: GraphTensor, move: Permute, shape: Shape) -> GraphTensor:
    return grad._with_view(grad.view.permute(_inverse(move.axes)))


def _expand(grad: GraphTensor, move: Expand, shape: Shape) -> GraphTensor:
    if move.size == 1:
        return reshaped(grad, shape)
    return grad.sum(move.axis)


def _slice(grad: GraphTensor, move: Slice, shape: Shape) -> GraphTensor:
    # unit steps are one pad over all dims; strided dims are placed one by one
    pairs = []
    for (start, stop, step), dim in zip(move.ranges, shape, strict=True):
        pairs.append((start, dim - stop) if step == 1 else (ZERO, ZERO))
    if any(before != 0 or after != 0 for before, after in pairs):
        grad = grad._with_view(grad.view.pad(pairs))
    for axis, ((start, _, step), dim) in enumerate(zip(move.ranges, shape, strict=True)):
        if step != 1:
            grad = place_strided(grad, axis, start, step, dim)
    return grad


def _pad(grad: GraphTensor, move: Pad, shape: Shape) -> GraphTensor:
    if all(before == 0 and after == 0 for before, after in move.padding):
        return grad
    ranges = [
        (before, before + dim, 1) for (before, _), dim in zip(move.padding, shape, strict=True)
    ]
    return grad._with_view(grad.view.slice(ranges))


def _reshape(grad: GraphTensor, move: Reshape, shape: Shape) -> GraphTensor:
    return reshaped(grad, shape)


SHIFTED_TAPS_LIMIT = 8  # kernels up to this size: one strided placement per tap


def _sums_placements(move: Pool) -> bool:
    """Whether `_pool` adds one strided placement per tap (a new node: the sum)."""
    side_by_side = move.dilation == 1 and move.stride == move.kernel
    return not side_by_side and move.kernel <= SHIFTED_TAPS_LIMIT


def _pool(
    grad: GraphTensor, move: Pool, shape: Shape, order: Sequence[int] | None = None
) -> GraphTensor:
    """(..., windows, kernel) -> (..., n): element (w, k) read position
    w * stride + k * dilation, so the adjoint adds each (w, k) there. Non-overlapping
    windows are a reshape; small kernels add one strided placement per tap (cheap
    kernels); larger ones place the windows `stride` apart along each kernel row, shift
    row k right by k * dilation with a pad-and-reshape skew, then sum the rows.
    `order` (placement sums only): the sum permuted by `order`, each placement permuted
    before the adds, so the sum's node is stored in that order."""
    windows, kernel = grad.view.shape[-2], move.kernel
    stride, dilation, n = move.stride, move.dilation, shape[-1]
    lead = tuple(grad.view.shape[:-2])
    if _sums_placements(move):  # convolutions: sum the kernel's strided placements
        total = None
        for tap in range(kernel):
            column = sliced(grad, grad.ndim - 1, sym(tap), sym(tap + 1))
            placed = place_strided(
                reshaped(column, (*lead, windows)), len(lead), sym(tap * dilation), stride, n
            )
            if order is not None:
                placed = placed._with_view(placed.view.permute(order))
            total = placed if total is None else total + placed
        return total
    if dilation == 1 and stride == kernel:  # windows side by side (max pooling): a reshape
        flat = reshaped(grad, (*lead, windows * kernel))
        return padded(flat, len(lead), ZERO, n - windows * kernel)
    rows = grad._with_view(grad.view.permute((*range(grad.ndim - 2), grad.ndim - 1, grad.ndim - 2)))
    length = windows * stride
    if stride != 1:  # (..., kernel, windows) -> (..., kernel, windows * stride)
        rows = place_strided(rows, rows.ndim - 1, ZERO, stride, length)
    if kernel == 1:
        return sliced(reshaped(rows, (*lead, length)), len(lead), ZERO, n)
    # row k of (kernel, length + gap) flattened and re-read with rows `dilation` shorter
    # starts k * dilation later: the skew. gap >= (kernel - 1) * dilation keeps rows apart.
    gap = sym(kernel * dilation)
    width = length + gap - dilation
    rows = padded(rows, rows.ndim - 1, ZERO, gap)
    flat = reshaped(rows, (*lead, kernel * (length + gap)))
    flat = sliced(flat, len(lead), ZERO, kernel * width)
    skewed = reshaped(flat, (*lead, kernel, width))
    # width = windows * stride + (kernel - 1) * dilation >= n, the extra positions are 0
    return sliced(skewed.sum(len(lead)), len(lead), ZERO, n)


MOVEMENT_ADJOINTS: dict[type, Callable[[GraphTensor, Movement, Shape], GraphTensor]] = {
    Permute: _permute,
    Expand: _expand,
    Slice: _slice,
    Pad: _pad,
    Reshape: _reshape,
    Pool: _pool,
}


# ---------------------------------------------------------------- movement shapes
def movement_shape(move: Movement, shape: Shape) -> Shape:
    """The shape a movement produces from `shape` (as ShapeTracker computes it)."""
    if isinstance(move, Permute):
        return tuple(shape[a] for a in move.axes)
    if isinstance(move, Expand):
        return shape[: move.axis] + (move.size,) + shape[move.axis :]
    if isinstance(move, Slice):
        return tuple(
            (stop - start).ceildiv(step) if step != 1 else stop - start
            for start, stop, step in move.ranges
        )
    if isinstance(move, Pad):
        return tuple(d + a + b for d, (a, b) in zip(shape, move.padding, strict=True))
    if isinstance(move, Reshape):
        return tuple(move.shape)
    windows = (move.input_size - move.dilation * (move.kernel - 1) - 1) // move.stride + 1
    return shape[:-1] + (windows, sym(move.kernel))


# ---------------------------------------------------------------- broadcasts last
def _swap_expand(expand: Expand, move: Movement) -> tuple[Movement, Expand] | None:
    """(move', expand') with expand' after move' giving the same view as `expand` then
    `move`, or None when `move` touches the broadcast axis (or is a reshape or pool)."""
    axis, size = expand.axis, expand.size
    if isinstance(move, Permute):
        rest = tuple(a - (a > axis) for a in move.axes if a != axis)
        return Permute(rest), Expand(move.axes.index(axis), size)
    if isinstance(move, Expand) and move.size == 1:  # a size-1 expand is only a reshape
        if move.axis <= axis:
            return move, Expand(axis + 1, size)
        return Expand(move.axis - 1, move.size), expand
    if isinstance(move, Slice) and move.ranges[axis] == (ZERO, size, 1):
        return Slice(move.ranges[:axis] + move.ranges[axis + 1 :]), expand
    if isinstance(move, Pad) and move.padding[axis] == (ZERO, ZERO):
        return Pad(move.padding[:axis] + move.padding[axis + 1 :]), expand
    return None


def broadcasts_last(history: Sequence[Movement]) -> tuple[Movement, ...]:
    """An equivalent history with each broadcast moved as late as it commutes, so the
    adjoint sums over broadcast axes first, straight off the node that produced the
    gradient: a broadcast Mul then reads as one contraction (the matmul backward) instead
    of a materialised product read through a permute."""
    moves = list(history)
    changed = True
    while changed:
        changed = False
        for i in range(len(moves) - 1):
            first = moves[i]
            if isinstance(first, Expand) and first.size != 1:
                swapped = _swap_expand(first, moves[i + 1])
                if swapped is not None:
                    moves[i], moves[i + 1] = swapped
                    changed = True
    return tuple(moves)


def view_adjoint(grad: GraphTensor, view: ShapeTracker) -> GraphTensor:
    """Map `grad` (shape `view.shape`) to `view.source_shape`: each recorded movement's
    adjoint, last movement first."""
    source = tuple(view.source_shape)
    history = broadcasts_last(view.history)
    shapes = [source]
    for move in history[:-1]:
        shapes.append(movement_shape(move, shapes[-1]))
    index = len(history) - 1
    while index >= 0:  # shapes[index] is the move's input
        move = history[index]
        if isinstance(move, Pool) and _sums_placements(move):
            # the permutes undone right after a convolution window's sum (col2im) are
            # folded into it, so the sum is stored in the order the next pass reads: a
            # 5x5 conv's first col2im pass read the columns 1500 floats apart, now along
            # the kernel row (LeNet conv2 input gradient, 1 thread: ~0.6 -> ~0.25 ms)
            pooled = index
            order = list(range(len(shapes[index])))
            while index > 0 and isinstance(history[index - 1], Permute):
                index -= 1
                order = [order[a] for a in _inverse(history[index].axes)]
            identity = order == sorted(order)
            grad = _pool(grad, move, shapes[pooled], None if identity else order)
        else:
            grad = MOVEMENT_ADJOINTS[type(move)](grad, move, shapes[index])
        index -= 1
    if tuple(grad.view.shape) != source:
        raise LuminalError(
            f"Autograd: cannot undo the view {view} over a buffer of shape "
            f"{format_shape(source)}: its movement history does not rebuild it"
        )
    return grad

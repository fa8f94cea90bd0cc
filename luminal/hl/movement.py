"""Movement ops: views where possible, a Contiguous node where a view cannot express it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.shape.expr import ZERO, Expr, ExprLike, sym
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


def normalize_axis(axis: int, ndim: int, op: str, shape_text: str) -> int:
    """A non-negative axis, or ShapeError naming the op and shape."""
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for shape {shape_text} ({ndim} dims)")
    return axis % ndim


def normalize_axes(axes: Any, ndim: int, op: str, shape_text: str) -> tuple[int, ...]:
    """Axes as a sorted tuple of distinct non-negative ints (None: all axes)."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, numbers.Integral):
        axes = (axes,)
    result = tuple(sorted({normalize_axis(a, ndim, op, shape_text) for a in axes}))
    if len(result) != len(tuple(axes)):
        raise ShapeError(f"{op}: repeated axis in {tuple(axes)} for shape {shape_text}")
    return result


class MovementOps:
    """Permute, reshape, expand, slice, pad, pool and friends."""

    # ---------------------------------------------------------------- plumbing
    def _moved(self: GraphTensor, view: ShapeTracker | None, retry: Any) -> GraphTensor:
        """Use `view` when expressible, else materialise and apply `retry` to the copy."""
        if view is not None:
            return self._with_view(view)
        copy = self.contiguous()
        result = retry(copy.view)
        assert result is not None, "a movement must be expressible on a contiguous view"
        return copy._with_view(result)

    def contiguous(self: GraphTensor) -> GraphTensor:
        """A row-major copy (a no-op when the view already is one)."""
        if self.view.is_identity():
            return self
        return self.graph.add_node(ops.Contiguous(), [self])

    # ---------------------------------------------------------------- permutes
    def permute(self: GraphTensor, *axes: Any) -> GraphTensor:
        """Reorder dims: `x.permute(1, 0)` or `x.permute((1, 0))`."""
        if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
            axes = tuple(axes[0])
        text = self._shape_text()
        if len(axes) != self.ndim:
            raise ShapeError(
                f"permute: {axes} does not name each of the {self.ndim} dims of {text}"
            )
        norm = tuple(normalize_axis(a, self.ndim, "permute", text) for a in axes)
        if sorted(norm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {axes} is not a permutation of the dims of {text}")
        if norm == tuple(range(self.ndim)):
            return self
        return self._with_view(self.view.permute(norm))

    def transpose(self: GraphTensor, axis0: int = -2, axis1: int = -1) -> GraphTensor:
        """Swap two dims (the last two by default)."""
        text = self._shape_text()
        a = normalize_axis(axis0, self.ndim, "transpose", text)
        b = normalize_axis(axis1, self.ndim, "transpose", text)
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self: GraphTensor) -> GraphTensor:  # noqa: N802 - numpy/PyTorch name
        return self.permute(tuple(reversed(range(self.ndim))))

    # ---------------------------------------------------------------- reshapes
    def reshape(self: GraphTensor, *shape: Any) -> GraphTensor:
        """Same elements in row-major order with a new shape; one dim may be -1."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral | str | Expr):
            shape = tuple(shape[0])
        total = self.view.n_elements()
        dims: list[Expr | None] = []
        for d in shape:
            if isinstance(d, numbers.Integral) and d == -1:
                dims.append(None)
            else:
                dims.append(sym(d))
        if dims.count(None) > 1:
            raise ShapeError(f"reshape: only one dim may be -1, got {shape}")
        if None in dims:
            known = sym(1)
            for d in dims:
                if d is not None:
                    known = known * d
            if known == 0 or (total % known) != 0:
                raise ShapeError(
                    f"reshape: cannot reshape {self._shape_text()} into {tuple(shape)}"
                )
            dims[dims.index(None)] = total // known
        new_shape = tuple(d for d in dims if d is not None)
        if _product(new_shape) != total:
            raise ShapeError(
                f"reshape: cannot reshape {self._shape_text()} ({total} elements) into "
                f"({', '.join(str(d) for d in new_shape)})"
            )
        if new_shape == self.view.shape:
            return self
        return self._moved(self.view.reshape(new_shape), lambda v: v.reshape(new_shape))

    def view_as(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        return self.reshape(other.view.shape)

    def flatten(self: GraphTensor, start: int = 0, end: int = -1) -> GraphTensor:
        """Merge dims start..end (inclusive) into one."""
        if self.ndim == 0:
            return self.reshape((1,))
        text = self._shape_text()
        a = normalize_axis(start, self.ndim, "flatten", text)
        b = normalize_axis(end, self.ndim, "flatten", text)
        if b < a:
            raise ShapeError(f"flatten: end {end} comes before start {start} for {text}")
        dims = self.view.shape
        return self.reshape(dims[:a] + (_product(dims[a : b + 1]),) + dims[b + 1 :])

    def merge_dims(self: GraphTensor, axis0: int, axis1: int) -> GraphTensor:
        """Merge two adjacent dims into one."""
        text = self._shape_text()
        a = normalize_axis(axis0, self.ndim, "merge_dims", text)
        b = normalize_axis(axis1, self.ndim, "merge_dims", text)
        if b != a + 1:
            raise ShapeError(f"merge_dims: axes {axis0} and {axis1} of {text} are not adjacent")
        return self.flatten(a, b)

    def split_dims(self: GraphTensor, axis: int, size: ExprLike) -> GraphTensor:
        """Split `axis` into (dim // size, size)."""
        text = self._shape_text()
        a = normalize_axis(axis, self.ndim, "split_dims", text)
        dim, inner = self.view.shape[a], sym(size)
        if inner == 0 or (dim % inner) != 0:
            raise ShapeError(f"split_dims: dim {a} ({dim}) of {text} is not divisible by {size}")
        dims = self.view.shape
        return self.reshape(dims[:a] + (dim // inner, inner) + dims[a + 1 :])

    def unsqueeze(self: GraphTensor, axis: int) -> GraphTensor:
        """Insert a size-1 dim at `axis` (negative counts from the end of the result)."""
        a = normalize_axis(axis, self.ndim + 1, "unsqueeze", self._shape_text())
        return self._with_view(self.view.expand(a, 1))

    def squeeze(self: GraphTensor, axis: int | Sequence[int] | None = None) -> GraphTensor:
        """Remove size-1 dims (all of them, or those named)."""
        text = self._shape_text()
        if axis is None:
            axes = [i for i, d in enumerate(self.view.shape) if d == 1]
        else:
            axes = list(normalize_axes(axis, self.ndim, "squeeze", text))
            for a in axes:
                if self.view.shape[a] != 1:
                    raise ShapeError(
                        f"squeeze: dim {a} of {text} has size {self.view.shape[a]}, not 1"
                    )
        if not axes:
            return self
        shape = tuple(d for i, d in enumerate(self.view.shape) if i not in axes)
        return self.reshape(shape)

    # ---------------------------------------------------------------- broadcast
    def expand_dim(self: GraphTensor, axis: int, size: ExprLike) -> GraphTensor:
        """Insert a broadcast dim of `size` at `axis` (free: stride 0)."""
        a = normalize_axis(axis, self.ndim + 1, "expand_dim", self._shape_text())
        return self._with_view(self.view.expand(a, sym(size)))

    def expand(self: GraphTensor, *shape: Any) -> GraphTensor:
        """Broadcast to `shape` (numpy rules: new leading dims, size-1 dims stretch;
        -1 keeps a dim)."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral | str | Expr):
            shape = tuple(shape[0])
        target = list(shape)
        if len(target) < self.ndim:
            raise ShapeError(f"expand: cannot expand {self._shape_text()} to {tuple(shape)}")
        lead = len(target) - self.ndim
        dims = [None if isinstance(d, numbers.Integral) and d == -1 else sym(d) for d in target]
        for i, own in enumerate(self.view.shape):
            want = dims[lead + i]
            if want is None:
                dims[lead + i] = own
            elif own != want and own != 1:
                raise ShapeError(
                    f"expand: dim {i} of {self._shape_text()} (size {own}) cannot be "
                    f"expanded to {want} in target {tuple(shape)}"
                )
        if any(d is None for d in dims[:lead]):
            raise ShapeError(f"expand: -1 is not allowed for new leading dims in {tuple(shape)}")
        final = tuple(d for d in dims if d is not None)
        if final == self.view.shape:
            return self
        stretched = [
            lead + i for i, own in enumerate(self.view.shape) if own == 1 and final[lead + i] != 1
        ]
        result = self
        if stretched:
            result = result.reshape(
                tuple(d for i, d in enumerate(self.view.shape) if lead + i not in stretched)
            )
        view = result.view
        for axis in range(len(final)):
            if axis < lead or axis in stretched:
                view = view.expand(axis, final[axis])
        return result._with_view(view)

    def expand_to(self: GraphTensor, shape: Sequence[ExprLike]) -> GraphTensor:
        return self.expand(tuple(shape))

    # ---------------------------------------------------------------- slices and pads
    def slice(self: GraphTensor, ranges: Sequence[Any]) -> GraphTensor:
        """Per leading dim a (start, stop[, step]) tuple, a python slice, or None (all)."""
        if len(ranges) > self.ndim:
            raise ShapeError(f"slice: {len(ranges)} ranges for {self._shape_text()}")
        full: list[tuple[Expr, Expr, int]] = []
        changed = False
        for axis, dim in enumerate(self.view.shape):
            item = ranges[axis] if axis < len(ranges) else None
            if item is None:
                full.append((ZERO, dim, 1))
                continue
            if isinstance(item, slice):
                start, stop, step = item.start, item.stop, item.step
            else:
                start, stop, step = (tuple(item) + (None, None, None))[:3]
            bounds = _slice_bounds(start, stop, step, dim, axis, self._shape_text())
            changed = changed or bounds != (ZERO, dim, 1)
            full.append(bounds)
        if not changed:
            return self
        return self._with_view(self.view.slice(full))

    def pad(self: GraphTensor, padding: Any, value: float = 0.0) -> GraphTensor:
        """Constant padding with numpy's `pad_width` forms: `n`, `(before, after)` or
        `((before, after),)` for every axis, or one `(before, after)` (or `None`) per axis.
        Amounts are non-negative ints or symbolic dims. Infinite values are clamped to the
        dtype's finite range; NaN pads exactly."""
        pairs = _pad_pairs(padding, self.ndim, self._shape_text())
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise DTypeError(f"pad: value must be a real number, got {value!r}")
        if not self.dtype.is_float and math.isnan(value):
            raise DTypeError(f"pad: cannot fill a {self.dtype.value} tensor with NaN")
        if all(b == 0 and a == 0 for b, a in pairs):
            return self
        padded = self._with_view(self.view.pad(pairs))
        if value == 0:
            return padded
        if self.dtype == DType.bool:  # fill in int32, then back to 0/1
            return self.cast(DType.int32).pad(pairs, value).cast(DType.bool)
        ones = self.graph.constant(1, self.dtype).expand(self.view.shape)
        outside = 1 - ones._with_view(ones.view.pad(pairs))
        if math.isnan(value):  # NaN * 0 is NaN: sqrt(-1) at the pads, sqrt(-0) inside
            return padded + (-outside).sqrt()
        return padded + outside * _finite(value, self.dtype)

    def pool_last_dim(
        self: GraphTensor, kernel: int, stride: int = 1, dilation: int = 1
    ) -> GraphTensor:
        """Sliding windows over the last dim: (..., n) -> (..., windows, kernel), like
        torch.Tensor.unfold(-1, kernel, stride) with dilation. Free when unpadded."""
        if self.ndim == 0:
            raise ShapeError("pool_last_dim: needs at least one dim, got a scalar")
        for name, value in (("kernel", kernel), ("stride", stride), ("dilation", dilation)):
            if not isinstance(value, int) or value < 1:
                raise ShapeError(f"pool_last_dim: {name} must be a positive int, got {value!r}")
        size = self.view.shape[-1].as_int()
        if size is not None and size < dilation * (kernel - 1) + 1:
            raise ShapeError(
                f"pool_last_dim: last dim of {self._shape_text()} is shorter than the window "
                f"(kernel {kernel}, dilation {dilation})"
            )
        return self._moved(
            self.view.pool_last_dim(kernel, stride, dilation),
            lambda v: v.pool_last_dim(kernel, stride, dilation),
        )

    # ---------------------------------------------------------------- indexing
    def __getitem__(self: GraphTensor, key: Any) -> GraphTensor:
        """Integers, slices (positive step), None and Ellipsis, like numpy basic indexing."""
        if not isinstance(key, tuple):
            key = (key,)
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise ShapeError("index: only one Ellipsis is allowed")
        if n_real > self.ndim:
            raise ShapeError(f"index: too many indices ({n_real}) for {self._shape_text()}")
        expanded: list[Any] = []
        for k in key:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(k)
        ranges: list[Any] = []
        drop: list[int] = []
        insert: list[int] = []
        out_axis = 0
        for k in expanded:
            if k is None:
                insert.append(out_axis)
                out_axis += 1
                continue
            axis = len(ranges)
            if isinstance(k, slice):
                ranges.append(k)
                out_axis += 1
            elif isinstance(k, numbers.Integral | Expr) and not isinstance(k, bool):
                dim = self.view.shape[axis]
                index = sym(k)
                known, size = index.as_int(), dim.as_int()
                if known is not None and size is not None and not -size <= known < size:
                    raise ShapeError(
                        f"index: {k} is out of range for dim {axis} of {self._shape_text()}"
                    )
                if known is not None and known < 0:
                    index = dim + known
                ranges.append((index, index + 1, 1))
                drop.append(axis)
            else:
                raise ShapeError(f"index: unsupported index {k!r}; use gather() for tensor indices")
        result = self.slice(ranges)
        if drop:
            result = result.reshape(
                tuple(d for i, d in enumerate(result.view.shape) if i not in drop)
            )
        for axis in insert:
            result = result.unsqueeze(axis)
        return result

    def gather(self: GraphTensor, indices: GraphTensor) -> GraphTensor:
        """Rows of this table at `indices` (int32): shape indices.shape + self.shape[1:].
        Float or bool indices raise DTypeError, as in PyTorch: 2.7 or True is no row."""
        from luminal.tensor import GraphTensor

        if not isinstance(indices, GraphTensor):
            raise DTypeError(f"gather: indices must be an int32 GraphTensor, got {indices!r}")
        if indices.dtype != DType.int32:
            raise DTypeError(
                f"gather: indices must be int32, got {indices.dtype.value} indices of shape "
                f"{indices._shape_text()} for a table of shape {self._shape_text()}"
            )
        if self.ndim == 0:
            raise ShapeError("gather: the table must have at least one dim, got a scalar")
        return self.graph.add_node(ops.Gather(), [self, indices])


def _pad_pairs(padding: Any, ndim: int, text: str) -> list[tuple[Expr, Expr]]:
    """numpy's `pad_width` as one (before, after) pair per axis, or ShapeError."""
    if _is_pad_amount(padding):
        items: list[Any] = [padding] * ndim
    else:
        try:
            items = list(padding)
        except TypeError:
            raise ShapeError(f"pad: padding {padding!r} is not an int or a sequence") from None
        if len(items) == 2 and all(_is_pad_amount(i) for i in items):
            items = [tuple(items)] * ndim  # (before, after) for every axis
        elif len(items) == 1 and ndim != 1:
            items = items * ndim  # ((before, after),) for every axis
        elif len(items) != ndim:
            raise ShapeError(
                f"pad: {len(items)} pad pairs for {text} ({ndim} dims); give one pair, "
                "or one per dim"
            )
    return [_pad_pair(item, axis, text) for axis, item in enumerate(items)]


def _pad_pair(item: Any, axis: int, text: str) -> tuple[Expr, Expr]:
    """(before, after) from None, n, (n,) or (before, after), checked non-negative."""
    if item is None:
        return ZERO, ZERO
    if isinstance(item, numbers.Number | np.bool_):
        if not _is_pad_amount(item):
            raise ShapeError(f"pad: amount {item!r} on dim {axis} of {text} is not an int")
        item = (item, item)
    elif isinstance(item, str | Expr):
        item = (item, item)
    try:
        amounts = tuple(item)
    except TypeError:
        raise ShapeError(f"pad: {item!r} on dim {axis} of {text} is not a pad pair") from None
    if len(amounts) == 1:
        amounts = amounts * 2
    if len(amounts) != 2 or not all(_is_pad_amount(a) for a in amounts):
        raise ShapeError(
            f"pad: {item!r} on dim {axis} of {text} is not a (before, after) pair of ints"
        )
    pair = sym(amounts[0]), sym(amounts[1])
    for amount in pair:
        known = amount.as_int()
        if known is not None and known < 0:
            raise ShapeError(
                f"pad: negative padding {item!r} on dim {axis} of {text}; use slice to remove "
                "elements"
            )
    return pair


def _is_pad_amount(value: Any) -> bool:
    """An int (not a bool: True is no amount) or a symbolic dim."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, numbers.Integral | str | Expr)


def _product(dims: Sequence[Expr]) -> Expr:
    total = sym(1)
    for d in dims:
        total = total * d
    return total


def _finite(value: float, dtype: DType) -> float | int:
    """`value` clamped to the dtype's finite range (the fill is multiplied by a 0/1 mask,
    and inf * 0 would be NaN); integer dtypes take the integer part."""
    import ml_dtypes

    if not dtype.is_float:
        info = np.iinfo(np.int32)
        return int(min(max(value, info.min), info.max))
    limit = float(ml_dtypes.finfo(dtype.numpy).max)
    return min(max(value, -limit), limit)


def _slice_bounds(
    start: Any, stop: Any, step: Any, dim: Expr, axis: int, text: str
) -> tuple[Expr, Expr, int]:
    """Clip python-style bounds (negatives count from the end) to the dim."""
    step = 1 if step is None else int(step)
    if step < 1:
        raise ShapeError(f"slice: step must be positive, got {step} on dim {axis} of {text}")

    def clip(value: Any, default: Expr) -> Expr:
        if value is None:
            return default
        expr = sym(value)
        known = expr.as_int()
        if known is not None and known < 0:
            expr = (dim + known).max(0)
        size = dim.as_int()
        if expr.as_int() is not None and size is not None:
            return sym(min(expr.as_int(), size))
        return expr.min(dim)

    lo = clip(start, ZERO)
    hi = clip(stop, dim).max(lo)
    return lo, hi, step

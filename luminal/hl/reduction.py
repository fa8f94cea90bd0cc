"""Reductions over an axis or a tuple of axes (dropped unless keepdim=True)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from luminal import ops
from luminal.dtype import DType, float32, int32
from luminal.errors import ShapeError
from luminal.hl.binary import not_nan
from luminal.hl.combine import concat
from luminal.hl.movement import normalize_axes
from luminal.shape.expr import sym

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Axes = Any  # int | tuple[int, ...] | None (all axes)


class ReductionOps:
    def _reduce(
        self: GraphTensor, op_type: type, axes: Axes, keepdim: bool, name: str
    ) -> GraphTensor:
        """Apply a single-axis primitive reduction to each axis, innermost first."""
        norm = normalize_axes(axes, self.ndim, name, self._shape_text())
        result = self if self.dtype != DType.bool else self.cast(int32)
        for axis in reversed(norm):
            result = self.graph.add_node(op_type(axis), [result])
        if keepdim:
            for axis in norm:
                result = result.unsqueeze(axis)
        return result

    def _require_nonempty(self: GraphTensor, norm: tuple[int, ...], name: str) -> None:
        """max/min/argmax/argmin of nothing has no value: PyTorch raises, so do we, while
        building when the size is known, at every run for a symbolic one (both runtimes)."""
        size = sym(1)
        for axis in norm:
            size = size * self.view.shape[axis]
        what = (
            f"{name} over dim(s) {list(norm)} of {self._shape_text()} needs at least one "
            "element (it has no identity; PyTorch raises too)"
        )
        known = size.as_int()
        if known == 0:
            raise ShapeError(f"{what}; the reduced size is 0")
        if known is None:
            self.graph.require_nonzero(size, what)

    def _axes_size(self: GraphTensor, axes: Axes) -> Any:
        norm = normalize_axes(axes, self.ndim, "reduce", self._shape_text())
        size = 1
        for axis in norm:
            size = self.view.shape[axis] * size
        return size

    def sum(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Sum over `axes` (all when None)."""
        return self._reduce(ops.SumReduce, axes, keepdim, "sum")

    def max(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Maximum over `axes` (values only; see argmax for indices); an empty axis raises
        ShapeError, as in PyTorch."""
        norm = normalize_axes(axes, self.ndim, "max", self._shape_text())
        self._require_nonempty(norm, "max")
        return self._reduce(ops.MaxReduce, norm, keepdim, "max")

    def min(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Minimum over `axes` (an empty axis raises ShapeError)."""
        norm = normalize_axes(axes, self.ndim, "min", self._shape_text())  # before adding nodes
        self._require_nonempty(norm, "min")
        x = self if self.dtype != DType.bool else self.cast(int32)
        return -((-x)._reduce(ops.MaxReduce, axes, keepdim, "min"))

    def mean(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Arithmetic mean over `axes`."""
        x = self if self.dtype.is_float else self.cast(float32)
        total = x.sum(axes, keepdim)
        return total * self._count(axes, total.dtype).reciprocal()

    def _count(self: GraphTensor, axes: Axes, dtype: DType) -> GraphTensor:
        """The number of reduced elements as a (possibly symbolic) scalar constant."""
        size = self._axes_size(axes)
        if isinstance(size, int):
            return self.graph.constant(float(size), dtype)
        known = size.as_int()
        return self.graph.constant(float(known) if known is not None else size, dtype)

    def var(
        self: GraphTensor, axes: Axes = None, keepdim: bool = False, correction: int = 1
    ) -> GraphTensor:
        """Variance with PyTorch's default correction of 1 (Bessel). The divisor is
        max(n - correction, 0), as in PyTorch, so one element or none gives NaN."""
        x = self if self.dtype.is_float else self.cast(float32)
        centered = x - x.mean(axes, keepdim=True)
        squares = (centered * centered).sum(axes, keepdim)
        divisor = (sym(self._axes_size(axes)) - correction).max(0)
        known = divisor.as_int()
        count = self.graph.constant(float(known) if known is not None else divisor, x.dtype)
        return squares * count.reciprocal()

    def std(
        self: GraphTensor, axes: Axes = None, keepdim: bool = False, correction: int = 1
    ) -> GraphTensor:
        """Standard deviation, correction 1 by default."""
        return self.var(axes, keepdim, correction).sqrt()

    def prod(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Product over `axes`. Known sizes multiply pairwise in a tree (exact for int32,
        right for zeros, infinities and signs); a symbolic size goes through log2/exp2."""
        norm = normalize_axes(axes, self.ndim, "prod", self._shape_text())
        result = self if self.dtype != DType.bool else self.cast(int32)
        for axis in reversed(norm):
            size = result.view.shape[axis].as_int()
            if size is None:
                result = _log_prod(result, axis)
            else:
                order = [i for i in range(result.ndim) if i != axis] + [axis]
                result = _tree_prod(result.permute(order), size)
        if keepdim:
            for axis in norm:
                result = result.unsqueeze(axis)
        return result

    def argmax(self: GraphTensor, axis: int | None = None, keepdim: bool = False) -> GraphTensor:
        """Index (int32) of the first maximum along `axis`; with no axis, of the flattened
        tensor (torch.argmax). An empty axis raises ShapeError, as in PyTorch."""
        return self._arg_extreme(axis, keepdim, "argmax")

    def argmin(self: GraphTensor, axis: int | None = None, keepdim: bool = False) -> GraphTensor:
        """Index (int32) of the first minimum along `axis` (flattened when None); an empty
        axis raises ShapeError."""
        return self._arg_extreme(axis, keepdim, "argmin")

    def _arg_extreme(self: GraphTensor, axis: int | None, keepdim: bool, name: str) -> GraphTensor:
        """argmax, or argmin as the argmax of the negation, after the empty-axis check."""
        text = self._shape_text()
        norm = (
            tuple(range(self.ndim)) if axis is None else normalize_axes(axis, self.ndim, name, text)
        )
        self._require_nonempty(norm, name)
        x = self if self.dtype.is_float else self.cast(float32)
        x = -x if name == "argmin" else x
        if axis is None:
            flat = x.reshape((-1,))._first_max(0, False)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        return x._first_max(norm[0], keepdim)

    def _first_max(self: GraphTensor, axis: int, keepdim: bool) -> GraphTensor:
        """Index of the first maximum (or first NaN, as torch.argmax) of a float tensor."""
        size = self.view.shape[axis]
        is_max = self.eq(self._reduce(ops.MaxReduce, axis, True, "argmax")) + (1 - not_nan(self))
        shape = [1] * self.ndim
        shape[axis] = size
        positions = self.graph.arange(size).cast(self.dtype).reshape(shape).expand(self.view.shape)
        # first maximum: the largest (size - position) among maxima
        count = self._count(axis, self.dtype)
        score = is_max * (count - positions)
        first = count - score._reduce(ops.MaxReduce, axis, keepdim, "argmax")
        return first.cast(int32)


def _tree_prod(x: GraphTensor, size: int) -> GraphTensor:
    """Product over the last dim (of known `size`): halves multiplied level by level, an
    odd element carried to the next level."""
    if size == 0:
        return x.graph.constant(1, x.dtype).expand(x.view.shape[:-1])
    lead: list[None] = [None] * (x.ndim - 1)
    while size > 1:
        half = size // 2
        product = x.slice(lead + [(0, half)]) * x.slice(lead + [(half, 2 * half)])
        if size % 2:
            product = concat([product, x.slice(lead + [(2 * half, size)])], -1)
        x, size = product, half + size % 2
    return x.squeeze(-1)


def _log_prod(x: GraphTensor, axis: int) -> GraphTensor:
    """Product over an axis of symbolic size: magnitude through log2/exp2 (exact zeros
    stay zero), sign from the count of negative factors; int32 results are rounded."""
    values = x if x.dtype.is_float else x.cast(float32)
    magnitude = values.abs().log2().sum(axis).exp2()
    negatives = values.lt(0).sum(axis)
    sign = 1 - 2 * (negatives % 2)
    if x.dtype.is_float:
        return magnitude * sign
    shifted = magnitude + 0.5
    return ((shifted - shifted % 1) * sign).cast(x.dtype)

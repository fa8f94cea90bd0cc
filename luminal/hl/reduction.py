"""Reductions over an axis or a tuple of axes (dropped unless keepdim=True)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from luminal import ops
from luminal.dtype import DType, float32, int32
from luminal.hl.movement import normalize_axes

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Axes = Any  # int | tuple[int, ...] | None (all axes)


class ReductionOps:
    def _reduce(self: GraphTensor, op_type: type, axes: Axes, keepdim: bool, name: str) -> GraphTensor:
        """Apply a single-axis primitive reduction to each axis, innermost first."""
        norm = normalize_axes(axes, self.ndim, name, self._shape_text())
        result = self if self.dtype != DType.bool else self.cast(int32)
        for axis in reversed(norm):
            result = self.graph.add_node(op_type(axis), [result])
        if keepdim:
            for axis in norm:
                result = result.unsqueeze(axis)
        return result

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
        """Maximum over `axes` (values only; see argmax for indices)."""
        return self._reduce(ops.MaxReduce, axes, keepdim, "max")

    def min(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Minimum over `axes`."""
        return -((-self)._reduce(ops.MaxReduce, axes, keepdim, "min"))

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
        """Variance with PyTorch's default correction of 1 (Bessel)."""
        x = self if self.dtype.is_float else self.cast(float32)
        centered = x - x.mean(axes, keepdim=True)
        squares = (centered * centered).sum(axes, keepdim)
        denominator = self._count(axes, x.dtype) - float(correction)
        return squares * denominator.reciprocal()

    def std(
        self: GraphTensor, axes: Axes = None, keepdim: bool = False, correction: int = 1
    ) -> GraphTensor:
        """Standard deviation, correction 1 by default."""
        return self.var(axes, keepdim, correction).sqrt()

    def prod(self: GraphTensor, axes: Axes = None, keepdim: bool = False) -> GraphTensor:
        """Product over `axes`: magnitude through log2/exp2, sign from the count of
        negative factors; exact zeros stay zero."""
        x = self if self.dtype.is_float else self.cast(float32)
        magnitude = x.abs().log2().sum(axes, keepdim).exp2()
        negatives = x.lt(0).sum(axes, keepdim)
        sign = 1 - 2 * (negatives % 2)
        result = magnitude * sign
        return result if self.dtype.is_float else result.cast(self.dtype)

    def argmax(self: GraphTensor, axis: int = -1, keepdim: bool = False) -> GraphTensor:
        """Index (int32) of the first maximum along `axis`."""
        (norm,) = normalize_axes(axis, self.ndim, "argmax", self._shape_text())
        size = self.view.shape[norm]
        x = self if self.dtype.is_float else self.cast(float32)
        is_max = x.eq(x.max(norm, keepdim=True))
        shape = [1] * self.ndim
        shape[norm] = size
        positions = self.graph.arange(size).cast(x.dtype).reshape(shape).expand(x.view.shape)
        # first maximum: the largest (size - position) among maxima
        score = is_max * (self._count(norm, x.dtype) - positions)
        first = self._count(norm, x.dtype) - score.max(norm, keepdim)
        return first.cast(int32)

    def argmin(self: GraphTensor, axis: int = -1, keepdim: bool = False) -> GraphTensor:
        """Index (int32) of the first minimum along `axis`."""
        x = self if self.dtype.is_float else self.cast(float32)
        return (-x).argmax(axis, keepdim)

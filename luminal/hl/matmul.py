"""Matrix products built as a broadcast Mul feeding a SumReduce.

The broadcast product is never materialised: the reference runtime evaluates the pair
as a contraction, and backends lower the same pattern to a matmul kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal.dtype import DType, promote
from luminal.errors import ShapeError
from luminal.hl.binary import broadcast_shapes

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


class MatmulOps:
    def matmul(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        """numpy/PyTorch matmul semantics for 1-D to 5-D operands with batch broadcasting."""
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(
                f"matmul: operands must have at least one dim, got {a._shape_text()} "
                f"and {b._shape_text()}"
            )
        if a.ndim > 5 or b.ndim > 5:
            raise ShapeError(
                f"matmul: supports up to 5-D operands, got {a._shape_text()} @ {b._shape_text()}"
            )
        dtype = promote(a.dtype, b.dtype)
        if dtype == DType.bool:
            dtype = DType.int32
        a, b = a.cast(dtype), b.cast(dtype)
        squeeze_first = a.ndim == 1
        squeeze_last = b.ndim == 1
        if squeeze_first:
            a = a.unsqueeze(0)
        if squeeze_last:
            b = b.unsqueeze(-1)
        m, k = a.view.shape[-2:]
        k2, n = b.view.shape[-2:]
        if k != k2:
            raise ShapeError(
                f"matmul: inner dims differ: {self._shape_text()} @ {other._shape_text()} "
                f"(expected a.shape[-1] == b.shape[-2], got {k} and {k2})"
            )
        batch = broadcast_shapes(a.view.shape[:-2], b.view.shape[:-2], "matmul")
        # a: (..., m, k) -> (..., m, n, k);  b: (..., k, n) -> (..., n, k) -> (..., m, n, k)
        a_full = a.expand(batch + (m, k)).expand_dim(-2, n)
        b_full = b.expand(batch + (k, n)).transpose(-1, -2).expand_dim(-3, m)
        result = (a_full * b_full).sum(-1)
        if squeeze_last:
            result = result.squeeze(-1)
        if squeeze_first:
            result = result.squeeze(-2 if squeeze_last is False else -1)
        return result

    __matmul__ = matmul

    def __rmatmul__(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        return other.matmul(self)

    def dot(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        """Inner product of two 1-D tensors, or matmul for higher ranks."""
        if self.ndim == 1 and other.ndim == 1:
            if self.view.shape != other.view.shape:
                raise ShapeError(
                    f"dot: 1-D operands must match, got {self._shape_text()} and "
                    f"{other._shape_text()}"
                )
            return (self * other).sum(0)
        return self.matmul(other)

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
        from luminal.tensor import GraphTensor

        if not isinstance(other, GraphTensor):
            raise TypeError(f"matmul: the other operand must be a GraphTensor, got {other!r}")
        a, b = self, other
        text = f"{self._shape_text()} @ {other._shape_text()}"
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(f"matmul: operands must have at least one dim, got {text}")
        if a.ndim > 5 or b.ndim > 5:
            raise ShapeError(f"matmul: supports up to 5-D operands, got {text}")
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
                f"matmul: inner dims differ: {text} "
                f"(expected a.shape[-1] == b.shape[-2], got {k} and {k2})"
            )
        try:
            batch = broadcast_shapes(a.view.shape[:-2], b.view.shape[:-2], "matmul")
        except ShapeError:
            raise ShapeError(f"matmul: batch dims of {text} cannot be broadcast together") from None
        dtype = promote(a.dtype, b.dtype)
        if dtype == DType.bool:
            dtype = DType.int32
        a, b = a.cast(dtype), b.cast(dtype)
        # a: (..., m, k) -> (..., m, n, k);  b: (..., k, n) -> (..., n, k) -> (..., m, n, k)
        a_full = a.expand(batch + (m, k)).expand_dim(-2, n)
        b_full = b.expand(batch + (k, n)).transpose(-1, -2).expand_dim(-3, m)
        result = (a_full * b_full).sum(-1)
        if squeeze_last:
            result = result.squeeze(-1)
        if squeeze_first:
            result = result.squeeze(-1 if squeeze_last else -2)
        return result

    def __matmul__(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        from luminal.tensor import GraphTensor

        if not isinstance(other, GraphTensor):
            return NotImplemented  # type: ignore[return-value]
        return self.matmul(other)

    def dot(self: GraphTensor, other: GraphTensor) -> GraphTensor:
        """Inner product of two 1-D tensors, or matmul for higher ranks."""
        if self.ndim == 1 and getattr(other, "ndim", None) == 1:
            if self.view.shape != other.view.shape:
                raise ShapeError(
                    f"dot: 1-D operands must match, got {self._shape_text()} and "
                    f"{other._shape_text()}"
                )
            return (self * other).sum(0)
        return self.matmul(other)

"""Unary math, activations and normalisations, built from Log2/Exp2/Sin/Sqrt/Recip."""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal import ops
from luminal.dtype import float32

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


class UnaryOps:
    def _float(self: GraphTensor) -> GraphTensor:
        """Integer and bool inputs compute in float32, as in PyTorch."""
        return self if self.dtype.is_float else self.cast(float32)

    def _primitive_unary(self: GraphTensor, op: ops.Op) -> GraphTensor:
        return self.graph.add_node(op, [self._float()])

    def log2(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Log2())

    def exp2(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Exp2())

    def sin(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Sin())

    def sqrt(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Sqrt())

    def reciprocal(self: GraphTensor) -> GraphTensor:
        return self._primitive_unary(ops.Recip())

    def abs(self: GraphTensor) -> GraphTensor:
        """|x|, exact for infinities and zeros (max(x, -x))."""
        return self.maximum(-self)

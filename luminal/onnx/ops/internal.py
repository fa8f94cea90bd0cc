"""Rules of the nodes `patterns.rewrite` puts in place of exporter patterns (the private
domain `luminal.internal`); each computes exactly what it replaced."""

from __future__ import annotations

from luminal.dtype import bool_, int32
from luminal.hl.binary import not_nan
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import select, take
from luminal.onnx.ops.matmul import matmul
from luminal.tensor import GraphTensor


def _nan_rows_zero_matmul(ctx: NodeContext) -> GraphTensor:
    """Where(IsNaN(P), 0, P) @ V for softmax weights P, whose rows are NaN everywhere or
    nowhere: the product, then 0 on the rows whose first weight is NaN."""
    weights, values = ctx.tensor(0), ctx.tensor(1)
    product = matmul(weights, values).cast(weights.dtype)
    column = ctx.graph.constant(0, int32).expand((1,))
    first = take(weights, column, weights.ndim - 1)  # (..., rows, 1) whatever the keys
    nan_rows = (1 - not_nan(first)).cast(bool_)
    zero = ctx.graph.constant(0.0, weights.dtype).expand(product.view.shape)
    return select(nan_rows, zero, product)


RULES = {"NanRowsZeroMatMul": _nan_rows_zero_matmul}

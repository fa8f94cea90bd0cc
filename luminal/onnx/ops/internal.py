"""Rules of the nodes `patterns.rewrite` puts in place of exporter patterns (the private
domain `luminal.internal`); each computes exactly what it replaced."""

from __future__ import annotations

from functools import reduce

from luminal.dtype import int32
from luminal.hl.binary import not_nan
from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import full
from luminal.onnx.ops.matmul import matmul
from luminal.shape.expr import var
from luminal.tensor import GraphTensor


def _nan_rows_zero_matmul(ctx: NodeContext) -> GraphTensor:
    """Where(IsNaN(P), 0, P) @ V for softmax weights P, whose rows are NaN everywhere or
    nowhere. V gets a column of ones: that column of the product is each row's sum of
    weights, NaN exactly on the NaN rows (a finite row sums to about 1), so the rows to
    zero are read from the product, and P is read by the product alone (which lets the
    CPU compiler fuse the attention)."""
    weights, values = ctx.tensor(0), ctx.tensor(1)
    width = values.view.shape[-1]
    ones = full(ctx.graph, 1, (*values.view.shape[:-1], 1), values.dtype)
    product = matmul(weights, concat([values, ones], -1).contiguous()).cast(weights.dtype)
    edge = [None] * (product.ndim - 1)
    sums = product.slice([*edge, (width, width + 1)])
    return _zero_rows(product.slice([*edge, (0, width)]), 1 - not_nan(sums))


def _zero_rows(x: GraphTensor, flags: GraphTensor) -> GraphTensor:
    """x with its last-axis rows set to 0 where `flags` (..., 1) is 1, exactly: one row
    gather from x's rows followed by a row of zeros (a select per element would gather,
    and decompose an index, per element)."""
    lead, width = tuple(x.view.shape[:-1]), x.view.shape[-1]
    rows = reduce(lambda a, b: a * b, lead, 1)
    table = concat([x.reshape((-1, width)), full(x.graph, 0, (1, width), x.dtype)], 0)
    own = x.graph.iota(var("z"), lead)
    flag = flags.reshape(lead).cast(int32)
    index = own + flag * (x.graph.constant(rows, int32).expand(lead) - own)
    return table.gather(index).reshape(tuple(x.view.shape))


RULES = {"NanRowsZeroMatMul": _nan_rows_zero_matmul}

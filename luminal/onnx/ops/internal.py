"""Rules of the nodes `patterns.rewrite` puts in place of exporter patterns (the private
domain `luminal.internal`); each computes exactly what it replaced."""

from __future__ import annotations

from functools import reduce

from luminal.dtype import int32
from luminal.hl.binary import not_nan
from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.matmul import matmul
from luminal.shape.expr import var
from luminal.tensor import GraphTensor


def _nan_rows_zero_matmul(ctx: NodeContext) -> GraphTensor:
    """Where(IsNaN(P), 0, P) @ V for softmax weights P, whose rows are NaN everywhere or
    nowhere. A NaN row of P gives a product row of NaN in every column, so the rows to
    replace are the product's all-NaN rows, read from the product itself (P is read by
    the product alone, which lets the CPU compiler fuse the attention, and V is not
    copied). A replaced row is what a row of zeros times V gives: 0, or NaN in a column
    of V holding a NaN or an infinity (0 * inf). A finite row of P whose product is NaN
    in every column is replaced by the same row: each of its columns is NaN only through
    a NaN or an infinity of V's column (or, with finite V, +inf + -inf of overflowed
    partial sums in every column, where the sum order decides anyway)."""
    weights, values = ctx.tensor(0), ctx.tensor(1)
    width = values.view.shape[-1]
    product = matmul(weights, values).cast(weights.dtype)
    if width == 0:
        return product
    rows_nan = 1 - not_nan(product).max(-1, keepdim=True)  # (..., q, 1): 1 on all-NaN rows
    lead = tuple(product.view.shape[:-2])
    zero_rows = (values * 0.0).sum(-2).cast(weights.dtype)  # (V's leading dims, width)
    zero_rows = zero_rows.reshape(
        (1,) * (len(lead) - zero_rows.ndim + 1) + tuple(zero_rows.view.shape)
    )
    return _replace_rows(product, rows_nan, zero_rows.expand((*lead, width)))


def _replace_rows(x: GraphTensor, flags: GraphTensor, replacement: GraphTensor) -> GraphTensor:
    """x (..., q, width) with its last-axis rows replaced where `flags` (..., q, 1) is 1
    by the row of `replacement` (..., width) for their leading index, exactly: one row
    gather from x's rows followed by the replacement rows (a select per element would
    gather, and decompose an index, per element)."""
    shape = tuple(x.view.shape)
    lead, queries, width = shape[:-2], shape[-2], shape[-1]
    rows = reduce(lambda a, b: a * b, (*lead, queries), 1)
    table = concat([x.reshape((-1, width)), replacement.reshape((-1, width))], 0)
    z = var("z")
    own = x.graph.iota(z, (*lead, queries))
    other = x.graph.iota(rows + z // queries, (*lead, queries))
    flag = flags.reshape((*lead, queries)).cast(int32)
    return table.gather(own + flag * (other - own)).reshape(shape)


RULES = {"NanRowsZeroMatMul": _nan_rows_zero_matmul}

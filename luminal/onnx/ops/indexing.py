"""Gather/Scatter families, built on luminal's row Gather and Scatter (index-add).

Element indices are flattened into row indices of a 1-D (or row-major 2-D) table: the
position of every other coordinate comes from an Iota expression, so no index tensor
beyond the model's own is materialised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal import ops
from luminal.dtype import int32
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis_of, take, wrap_negative
from luminal.shape.expr import sym, var
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _product(dims: Any) -> Any:
    total: Any = sym(1)
    for d in dims:
        total = total * d
    return total


def _gather(ctx: NodeContext) -> GraphTensor:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    return take(data, wrap_negative(indices, data.view.shape[axis]), axis)


def _element_rows(data: GraphTensor, indices: GraphTensor, axis: int) -> GraphTensor:
    """Flat positions in `data` of GatherElements/ScatterElements' elements (int32, the
    shape of `indices`)."""
    shape = indices.view.shape
    strides = [_product(data.view.shape[d + 1 :]) for d in range(data.ndim)]
    z = var("z")
    offset: Any = sym(0)
    for d in range(len(shape)):
        if d == axis:
            continue
        coordinate = (z // _product(shape[d + 1 :])) % shape[d]
        offset = offset + coordinate * strides[d]
    base = data.graph.iota(offset, shape)
    picked = wrap_negative(indices, data.view.shape[axis])
    known = strides[axis].as_int()
    stride = data.graph.constant(known if known is not None else strides[axis], int32)
    return base + picked * stride


def _gather_elements(ctx: NodeContext) -> GraphTensor:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    rows = _element_rows(data, indices, axis)
    return data.reshape((-1,)).gather(rows)


def _nd_rows(
    data: GraphTensor, indices: GraphTensor, batch_dims: int
) -> tuple[GraphTensor, GraphTensor]:
    """(table, rows): data as rows of its trailing dims and the row each index tuple of
    GatherND/ScatterND names."""
    k = indices.view.shape[-1].as_int()
    batch = data.view.shape[:batch_dims]
    indexed = data.view.shape[batch_dims : batch_dims + k]
    rest = data.view.shape[batch_dims + k :]
    table = data.reshape((_product(batch) * _product(indexed), *rest))
    lead = indices.view.shape[:-1]
    rows: Any = None
    for j in range(k):
        ranges: list[Any] = [None] * indices.ndim
        ranges[-1] = (j, j + 1)
        column = wrap_negative(indices.slice(ranges).reshape(lead), indexed[j])
        stride = _product(indexed[j + 1 :]).as_int()
        term = column * stride
        rows = term if rows is None else rows + term
    if rows is None:
        rows = data.graph.constant(0, int32).expand(lead)
    if batch_dims:
        per_batch = _product(lead[batch_dims:])
        z = var("z")
        batch_index = data.graph.iota((z // per_batch) * _product(indexed), lead)
        rows = rows + batch_index
    return table, rows


def _gather_nd(ctx: NodeContext) -> GraphTensor:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    table, rows = _nd_rows(data, indices, ctx.attr("batch_dims", 0))
    return table.gather(rows)


def _scatter_rows(ctx: NodeContext, table: GraphTensor, rows: GraphTensor, updates: GraphTensor):
    """`table` with `updates` written (or accumulated) at `rows`: Scatter adds, so a write
    adds the difference from the current value (ONNX leaves repeated indices undefined)."""
    reduction = ctx.attr("reduction", "none")
    flat_rows = rows.reshape((-1,))
    flat_updates = updates.reshape((flat_rows.view.shape[0], *table.view.shape[1:]))
    flat_updates = flat_updates.cast(table.dtype)
    if reduction == "none":
        delta = flat_updates - table.gather(flat_rows)
    elif reduction == "add":
        delta = flat_updates
    else:
        raise ctx.unsupported(f"reduction={reduction!r} (luminal's Scatter only adds)")
    return ctx.graph.add_node(ops.Scatter(), [table, flat_rows, delta.contiguous()])


def _scatter_elements(ctx: NodeContext) -> GraphTensor:
    data, indices, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    rows = _element_rows(data, indices, axis)
    flat = data.reshape((-1,)).contiguous()
    return _scatter_rows(ctx, flat, rows, updates).reshape(data.view.shape)


def _scatter_nd(ctx: NodeContext) -> GraphTensor:
    data, indices, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    table, rows = _nd_rows(data, indices, 0)
    return _scatter_rows(ctx, table.contiguous(), rows, updates).reshape(data.view.shape)


RULES: dict[str, Rule] = {
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "ScatterND": _scatter_nd,
}

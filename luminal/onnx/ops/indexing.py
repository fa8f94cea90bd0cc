"""Gather/Scatter families, built on luminal's row Gather and Scatter (index-add).

Element indices are flattened into row indices of a 1-D (or row-major 2-D) table: the
position of every other coordinate comes from an Iota expression, so no index tensor
beyond the model's own is materialised."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from luminal import ops
from luminal.dtype import int32
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis_of, select, take, wrap_negative
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


def gather_along(data: GraphTensor, indices: GraphTensor, axis: int) -> GraphTensor:
    """numpy.take_along_axis (GatherElements): one flat gather."""
    return data.reshape((-1,)).gather(_element_rows(data, indices, axis))


def _gather_elements(ctx: NodeContext) -> GraphTensor:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    return gather_along(data, indices, axis_of(ctx.attr("axis", 0), data.ndim))


def _reverse_sequence(ctx: NodeContext) -> GraphTensor:
    """Each batch entry's first lens[b] time steps reversed: time index t reads
    lens - 1 - t where t < lens, else t (one GatherElements along the time axis)."""
    x, lens = ctx.tensor(0), ctx.tensor(1).cast(int32)
    time, batch = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    shape = [1] * x.ndim
    shape[time] = x.view.shape[time]
    t = x.graph.arange(x.view.shape[time]).reshape(tuple(shape)).expand(x.view.shape)
    lens_shape = [1] * x.ndim
    lens_shape[batch] = x.view.shape[batch]
    lens = lens.reshape(tuple(lens_shape)).expand(x.view.shape)
    source = t + t.lt(lens) * (lens - 1 - t * 2)
    return gather_along(x, source, time)


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
    elif reduction in _COMBINE:
        return _scatter_combine(table, flat_rows, flat_updates, reduction)
    else:
        raise ctx.unsupported(f"reduction={reduction!r}")
    return ctx.graph.add_node(ops.Scatter(), [table, flat_rows, delta.contiguous()])


_COMBINE = {"mul": 1, "max": -math.inf, "min": math.inf}


def _scatter_combine(
    table: GraphTensor, rows: GraphTensor, updates: GraphTensor, reduction: str
) -> GraphTensor:
    """Scatter with reduction mul/max/min, which luminal's Scatter (an index-add) cannot
    do: every row of `table` is compared with every update's row ((P, M) hits), the
    updates aimed at it are reduced, the others replaced by the identity. Exact, and
    O(P * M) work: fine for the index tensors models carry, not for huge ones."""
    graph = table.graph
    count, rest = table.view.shape[0], len(table.view.shape) - 1
    here = graph.arange(count).reshape((count, 1)).eq(rows.reshape((1, -1)))
    here = here.reshape((*here.view.shape, *([1] * rest)))
    identity = _COMBINE[reduction]
    if not table.dtype.is_float and reduction != "mul":
        info = np.iinfo(np.int32)
        identity = info.min if reduction == "max" else info.max
    fill = graph.constant(identity, table.dtype)
    candidates = select(here, updates.unsqueeze(0), fill)
    if reduction == "mul":
        return table * candidates.prod(1)
    if reduction == "max":
        return table.maximum(candidates.max(1))
    return table.minimum(candidates.min(1))


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


def _tensor_scatter(ctx: NodeContext) -> GraphTensor:
    """KV-cache write (opset 24): cache position p of batch entry b takes update row
    p - write_indices[b] (mod the cache length when circular) where that row exists.
    One GatherElements of the update and an exact select against the past cache."""
    past, update = ctx.tensor(0), ctx.tensor(1).cast(ctx.tensor(0).dtype)
    axis = axis_of(ctx.attr("axis", -2), past.ndim)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode={mode!r}")
    length, rows = past.view.shape[axis], update.view.shape[axis]
    batch = past.view.shape[0]
    if ctx.has(2):
        start = ctx.tensor(2).cast(int32)
    else:
        start = ctx.graph.constant(0, int32).expand((batch,))
    along = [1] * past.ndim
    along[axis] = length
    lead = [1] * past.ndim
    lead[0] = batch
    position = ctx.graph.arange(length).reshape(tuple(along)) - start.reshape(tuple(lead))
    if mode == "circular":
        position = position % ctx.graph.constant(length.as_int(), int32)
    position = position.expand(past.view.shape)
    inside = position.ge(0) * position.lt(ctx.graph.constant(rows.as_int(), int32))
    last = ctx.graph.constant(rows.as_int() - 1, int32)
    safe = position.maximum(ctx.graph.constant(0, int32)).minimum(last)
    return select(inside, gather_along(update, safe, axis), past)


RULES: dict[str, Rule] = {
    "TensorScatter": _tensor_scatter,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ReverseSequence": _reverse_sequence,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "ScatterND": _scatter_nd,
}

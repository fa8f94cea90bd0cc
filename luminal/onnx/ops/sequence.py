"""Sequence values: a sequence is a Python list of values (graph tensors or values
known at load) whose length is known when the model loads, so every sequence op is
list manipulation at import and only the elements live in the graph. Positions and
split sizes must be known at load; a graph input of sequence type is imported with
one graph input per element (the backend does this from the values it is given)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext, Value
from luminal.onnx.ops.common import axis_of
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _sequence(ctx: NodeContext, index: int = 0) -> list[Value]:
    value = ctx.inputs[index] if index < len(ctx.inputs) else None
    if not isinstance(value, list):
        raise ctx.invalid(f"input {index} is not a sequence")
    return value


def _position(ctx: NodeContext, index: int, length: int, default: int) -> int:
    """A known position, counting from the end when negative."""
    if not ctx.has(index):
        return default
    position = int(np.asarray(ctx.static(index, "position")).reshape(-1)[0])
    return position + length if position < 0 else position


def _insert(ctx: NodeContext) -> list[list[Value]]:
    items = list(_sequence(ctx))
    where = _position(ctx, 2, len(items) + 1, len(items))
    items.insert(where, ctx.inputs[1])
    return [items]


def _at(ctx: NodeContext) -> Value:
    items = _sequence(ctx)
    where = _position(ctx, 1, len(items), 0)
    if not 0 <= where < len(items):
        raise ctx.invalid(f"position {where} is outside a sequence of {len(items)}")
    return items[where]


def _erase(ctx: NodeContext) -> list[list[Value]]:
    items = list(_sequence(ctx))
    del items[_position(ctx, 1, len(items), len(items) - 1)]
    return [items]


def _length(ctx: NodeContext) -> np.ndarray:
    return np.array(len(_sequence(ctx)), np.int64)


def _split_to_sequence(ctx: NodeContext) -> list[list[GraphTensor]]:
    x = ctx.tensor(0)
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    dim = int(x.view.shape[axis].as_int())
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.has(1):
        split = np.asarray(ctx.static(1, "split")).reshape(-1)
        if np.asarray(ctx.inputs[1]).ndim == 0:  # a chunk size, the last chunk smaller
            size = int(split[0])
            sizes = [min(size, dim - s) for s in range(0, dim, size)]
        else:
            sizes = [int(s) for s in split]
        keep = True
    else:
        sizes = [1] * dim
    parts, start = [], 0
    for size in sizes:
        ranges: list[Any] = [None] * x.ndim
        ranges[axis] = (start, start + size)
        part = x.slice(ranges)
        parts.append(part if keep else part.squeeze(axis))
        start += size
    return [parts]


def _concat_from_sequence(ctx: NodeContext) -> GraphTensor:
    items = [
        v if isinstance(v, GraphTensor) else ctx.lift(np.asarray(v), f"{ctx.node.output[0]}_{i}")
        for i, v in enumerate(_sequence(ctx))
    ]
    new_axis = bool(ctx.attr("new_axis", 0))
    rank = items[0].ndim + (1 if new_axis else 0)
    axis = axis_of(ctx.attr("axis"), rank)
    if new_axis:
        items = [t.unsqueeze(axis) for t in items]
    return concat(items, axis) if len(items) > 1 else items[0]


def _sequence_map(ctx: NodeContext) -> list[list[Value]]:
    """The body once per element; inputs that are sequences give their i-th element,
    tensors are passed whole."""
    body = ctx.attr("body")
    items = _sequence(ctx)
    names = [i.name for i in body.input]
    results: list[list[Value]] = [[] for _ in body.output]
    for i in range(len(items)):
        feeds = {}
        for name, value in zip(names, ctx.inputs, strict=True):
            feeds[name] = value[i] if isinstance(value, list) else value
        for out, value in zip(results, ctx.run_subgraph(body, feeds), strict=True):
            out.append(value)
    return results


# a rule returns its outputs as a list, so a sequence output is wrapped in one
RULES: dict[str, Rule] = {
    "SequenceEmpty": lambda ctx: [[]],
    "SequenceConstruct": lambda ctx: [list(ctx.inputs)],
    "SequenceInsert": _insert,
    "SequenceAt": _at,
    "SequenceErase": _erase,
    "SequenceLength": _length,
    "SplitToSequence": _split_to_sequence,
    "ConcatFromSequence": _concat_from_sequence,
    "SequenceMap": _sequence_map,
}

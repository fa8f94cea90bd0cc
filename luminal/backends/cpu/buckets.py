"""Bucket Functions: a Python `Function` node whose output is its inputs laid end to end
(flattened, float32) and then changed in place by the callable, as the data-parallel
gradient all-reduce does.

Run generically, such a node costs three copies of its inputs (each handed over as a
fresh array, joined, written back into the arena). The CPU runtime instead places the
node's output in the array the callable provides (`buffer(size)`) and points the
buffers of its inputs into it, so the kernels that compute them write straight into
the bucket and the callable's `reduce(flat)` works on it in place: no copy at all. An
input is placed this way when it is float32, computed by a kernel of this graph (not a
graph input, retrieved or kept), read in its buffer's order (a reshape at most), and read by nothing
but this node (so no later reader sees the reduced values); the others are copied in.

A bucket callable has `bucket = True`, `buffer(size) -> float32 array of size`,
`reduce(flat) -> None`, and `__call__(*inputs)` for every other runtime (which must
return the same as joining the inputs and calling `reduce`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import float32
from luminal.errors import ExecutionError

if TYPE_CHECKING:
    from luminal.graph import Graph


@dataclass(frozen=True)
class BucketLayout:
    """Where each input of a bucket node lives in its flat output (element offsets)."""

    node: int
    size: int
    placed: dict[int, int]  # input node -> offset: its buffer is this part of the bucket
    copied: tuple[tuple[int, int, int], ...]  # (edge index, offset, size) copied in per run

    def bind(self, graph: Graph, pointers: Any, slot: dict[int, int]) -> np.ndarray:
        """The bucket's array for a run plan, with the plan's pointers set into it;
        ExecutionError when the callable's `buffer` is not `size` contiguous float32
        (the kernels would write past it)."""
        node = graph.nodes[self.node]
        flat = node.op.fn.buffer(self.size)
        if not (
            isinstance(flat, np.ndarray)
            and flat.dtype == np.float32
            and flat.shape == (self.size,)
            and flat.flags.c_contiguous
            and flat.flags.writeable
        ):
            got = f"{flat.dtype} {flat.shape}" if isinstance(flat, np.ndarray) else type(flat)
            raise ExecutionError(
                f"Function '{node.op.label}' (node {self.node}): buffer({self.size}) returned "
                f"{got}; expected a writeable contiguous float32 array of shape ({self.size},)"
            )
        base = flat.ctypes.data
        pointers[slot[self.node]] = base
        for node_id, offset in self.placed.items():
            pointers[slot[node_id]] = base + offset * flat.itemsize
        return flat


def is_bucket(op: Any) -> bool:
    return isinstance(op, ops.Function) and getattr(op.fn, "bucket", False) is True


def layouts(
    graph: Graph, steps: list[tuple[int, list[int]]], inputs: list[int], keep: set[int]
) -> dict[int, BucketLayout]:
    """The layout of every bucket Function of a compiled graph whose inputs all have
    static shapes (the others run as plain Functions)."""
    readers: Counter[int] = Counter()
    for _, sources in steps:
        readers.update(set(sources))
    found = {}
    for node_id, _ in steps:
        node = graph.nodes[node_id]
        if not is_bucket(node.op) or node_id in keep:
            continue
        layout = _layout(graph, node_id, readers, set(inputs) | keep)
        if layout is not None:
            found[node_id] = layout
    return found


def _layout(
    graph: Graph, node_id: int, readers: Counter[int], unplaceable: set[int]
) -> BucketLayout | None:
    node = graph.nodes[node_id]
    sizes = [_static_size(e.view.shape) for e in node.inputs]  # what is read, not the buffer
    if None in sizes or node.dtype != float32:
        return None
    sources = Counter(e.source for e in node.inputs)
    placed: dict[int, int] = {}
    copied = []
    offset = 0
    for index, (edge, size) in enumerate(zip(node.inputs, sizes, strict=True)):
        source = graph.nodes[edge.source]
        if (
            edge.source not in unplaceable
            and source.dtype == float32
            and edge.view.is_contiguous()
            and readers[edge.source] == 1
            and sources[edge.source] == 1
        ):
            placed[edge.source] = offset
        else:
            copied.append((index, offset, size))
        offset += size
    if (offset,) != tuple(d.as_int() for d in node.shape):
        return None
    return BucketLayout(node_id, offset, placed, tuple(copied))


def reduce(node: Any, flat: np.ndarray) -> None:
    """Call the bucket's `reduce` on its filled array; its errors are reported as a
    Function's are (an ExecutionError naming the node, caused by the original)."""
    try:
        node.op.fn.reduce(flat)
    except Exception as error:
        raise ExecutionError(
            f"Function '{node.op.label}' raised {type(error).__name__}: {error}"
        ) from error


def _static_size(shape: tuple) -> int | None:
    total = 1
    for dim in shape:
        value = dim.as_int()
        if value is None:
            return None
        total *= value
    return total


__all__ = ["BucketLayout", "is_bucket", "layouts", "reduce"]

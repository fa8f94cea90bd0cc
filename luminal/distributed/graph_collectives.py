"""Collectives inside a graph: Python `Function` nodes that all-reduce or all-gather a
tensor across the ranks, between the compiled segments around them.

Tensor-parallel layers need a collective in the middle of a forward pass. A `Function`
node is the mechanism luminal already has for a call out of a compiled graph: the CPU
runtime ends a C segment before it, hands the node its input as a numpy array, writes
the result into the node's buffer and starts the next segment, and the reference
runtime calls it like any other op. So the collective runs once per `execute()`, in
graph order, on every rank; no runtime hook or new primitive is needed, and the
compilers never rewrite it. Every rank builds and runs the same graph, so the ranks
meet the collectives in the same order (compiling, whose verification runs the graph,
included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from luminal import ops
from luminal.distributed.backend import Communicator
from luminal.errors import ShapeError

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

ALL_REDUCE = "all_reduce sum (tensor parallel)"
ALL_GATHER = "all_gather last dim (tensor parallel)"


class SumAcrossRanks:
    """The callable of an all-reduce node: the sum of every rank's input, the same bits
    on every rank. The input is copied first: the reference runtime may pass a buffer
    that other nodes still read."""

    def __init__(self, communicator: Communicator) -> None:
        self.communicator = communicator

    def __deepcopy__(self, memo: dict) -> SumAcrossRanks:
        """A copied graph (the compiler's reference copy) shares the callable: it holds
        the process's communicator, which cannot be copied."""
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype=np.float32, order="C", copy=True)
        return self.communicator.all_reduce(out, "sum")


class GatherLastDim:
    """The callable of an all-gather node: every rank's (..., n) input side by side in
    rank order, (..., world_size * n), cut to the first `size` columns (the last rank's
    shard may be padded)."""

    def __init__(self, communicator: Communicator, size: int) -> None:
        self.communicator = communicator
        self.size = size

    def __deepcopy__(self, memo: dict) -> GatherLastDim:
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        local = np.ascontiguousarray(x, dtype=np.float32)
        stacked = self.communicator.all_gather(local)  # (world, ..., n)
        joined = np.moveaxis(stacked, 0, -2).reshape(*local.shape[:-1], -1)
        return joined[..., : self.size]


def all_reduce_sum(x: GraphTensor, communicator: Communicator) -> GraphTensor:
    """`x` summed over the ranks (a row-parallel product's partial sums), same shape."""
    if communicator.world_size == 1:
        return x
    return x.graph.add_node(ops.Function(ALL_REDUCE, SumAcrossRanks(communicator)), [x], x.shape)


def all_gather_last_dim(x: GraphTensor, communicator: Communicator, size: int) -> GraphTensor:
    """Every rank's `x` (..., n) joined along the last dim in rank order and cut to
    `size` columns: (..., size). Each rank's shard must have the same n."""
    world = communicator.world_size
    width = x.shape[-1]
    if not isinstance(width, int) or not 0 < size <= world * width:
        raise ShapeError(
            f"all_gather_last_dim: shards of shape {x._shape_text()} on {world} ranks cannot "
            f"give {size} columns"
        )
    if world == 1:
        return x if size == width else x[..., :size]
    shape = (*x.shape[:-1], size)
    op = ops.Function(ALL_GATHER, GatherLastDim(communicator, size))
    return x.graph.add_node(op, [x], shape)


__all__ = [
    "ALL_GATHER",
    "ALL_REDUCE",
    "GatherLastDim",
    "SumAcrossRanks",
    "all_gather_last_dim",
    "all_reduce_sum",
]

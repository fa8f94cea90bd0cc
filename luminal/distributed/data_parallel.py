"""What `TrainStep(..., data_parallel=True)` adds to a training step.

Each rank runs the same graph on its shard of the global batch. One Python `Function`
node takes the gradients and the loss, joined in one flat float32 bucket, and
all-reduces (sums) it in place; the optimizer reads the gradients back out of its
output by views, divided by the world size. On the CPU runtime the bucket is a "bucket Function"
(luminal/backends/cpu/buckets.py): the backward kernels write the gradients into it
directly, so nothing is copied around the all-reduce. So a step is still one `execute()`, with one
collective, and every rank applies the same update to the same parameters: optimizer
state stays identical without ever being sent. Before training, the ranks check that
they built the same parameters and take rank 0's values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from luminal import ops
from luminal.distributed.backend import Communicator
from luminal.dtype import float32
from luminal.errors import DistributedError, ShapeError

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.tensor import GraphTensor

LABEL = "all_reduce gradients (data parallel)"


class GradientBucket:
    """The callable of the all-reduce Function node. It communicates only while `active`
    (TrainStep sets it around the runs that apply an optimizer step), so compiling,
    verifying and the non-final micro-batches of an accumulation never communicate.
    `weight` scales this rank's contribution when shards are uneven; the averaged loss
    of the step is left in `loss`.

    A bucket callable (luminal/backends/cpu/buckets.py): the CPU runtime points the
    gradient buffers into `buffer()`, so the backward kernels write the gradients
    straight into the flat array that `reduce` all-reduces in place; other runtimes
    call it with the gradients and get the joined, reduced copy."""

    bucket = True

    def __init__(self, communicator: Communicator) -> None:
        self.communicator = communicator
        self.active = False
        self.weight = 1.0
        self.loss = float("nan")
        self._flat = np.empty(0, np.float32)

    def __deepcopy__(self, memo: dict) -> GradientBucket:
        """A copied graph (the compiler's reference copy) shares the bucket: it holds
        the process's communicator, which cannot be copied."""
        return self

    def reserve(self, size: int) -> None:
        """Make the bucket's array, where the communicator's all-reduce of it is cheapest
        (a collective: every rank builds its TrainStep at the same point)."""
        self._flat = self.communicator.bucket(size)

    def buffer(self, size: int) -> np.ndarray:
        """The flat float32 array the gradients and the loss live in."""
        if self._flat.size != size:
            self._flat = np.empty(size, np.float32)
        return self._flat

    def reduce(self, flat: np.ndarray) -> None:
        """On an optimizer step, sum the filled bucket over the ranks in place (the
        graph divides the gradients by the world size where the optimizer reads them,
        which costs no pass of its own)."""
        if not self.active:
            return
        if self.weight != 1.0:
            flat *= np.float32(self.weight)
        self.communicator.all_reduce(flat, "sum")
        self.loss = float(flat[-1]) / self.communicator.world_size

    def __call__(self, *pieces: np.ndarray) -> np.ndarray:
        """The gradients and the loss joined into a new flat float32 array and reduced."""
        flat = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in pieces])
        self.reduce(flat)
        return flat


def averaged(
    graph: Graph, grads: Sequence[GraphTensor], loss: GraphTensor, bucket: GradientBucket
) -> list[GraphTensor]:
    """`grads` averaged over the ranks: the gradients and the loss go into one Function
    node whose output is them joined in one flat bucket, summed over the ranks in place
    (on the CPU runtime the backward writes them there directly); the gradients are
    read back out of its output as float32 views divided by the world size (fused into
    the optimizer's kernels)."""
    total = sum(_numel(g) for g in grads) + 1
    bucket.reserve(total)
    inputs = [*grads, loss]
    reduced = graph.add_node(ops.Function(LABEL, bucket), inputs, (total,), float32)
    world_size = bucket.communicator.world_size
    out, offset = [], 0
    for grad in grads:
        size = _numel(grad)
        view = reduced[offset : offset + size].reshape(tuple(int(d) for d in grad.shape))
        out.append(view * (1.0 / world_size) if world_size > 1 else view)
        offset += size
    return out


def _numel(tensor: GraphTensor) -> int:
    return int(np.prod([int(d) for d in tensor.shape], dtype=np.int64))


def shard(arrays: Sequence[np.ndarray], rank: int, world_size: int) -> tuple[list, float]:
    """This rank's contiguous slice of every batch array (np.array_split's sizes), and
    its weight: local samples * world_size / global samples (1.0 for equal shards), so
    that averaging the weighted mean gradients gives the mean over the whole batch."""
    sizes = {len(a) for a in arrays}
    if len(sizes) != 1:
        raise ShapeError(
            f"TrainStep(data_parallel=True): the batch arrays have different lengths "
            f"{sorted(sizes)}; they are split along their first dim"
        )
    total = sizes.pop()
    if total < world_size:
        raise ShapeError(
            f"TrainStep(data_parallel=True): a batch of {total} samples cannot be split "
            f"over {world_size} ranks"
        )
    bounds = [total * r // world_size for r in range(world_size + 1)]
    start, stop = bounds[rank], bounds[rank + 1]
    local = [np.ascontiguousarray(a[start:stop]) for a in arrays]
    return local, (stop - start) * world_size / total


def describe(tensors: Sequence[GraphTensor]) -> list[str]:
    """One line per parameter: its index, input name, shape and dtype."""
    return [
        f"parameter {index} {t.node.op.label!r} {t._shape_text()} {t.dtype.value}"
        for index, t in enumerate(tensors)
    ]


def check_same(communicator: Communicator, what: str, lines: list[str]) -> None:
    """Raise DistributedError on every rank unless all ranks hold the same `lines`,
    naming the first line where some rank differs from rank 0."""
    text = np.frombuffer(json.dumps(lines).encode(), np.uint8)
    lengths = communicator.all_gather(np.array([text.size], np.int64), None)[:, 0]
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: text.size] = text
    gathered = communicator.all_gather(padded, None)
    views = [json.loads(bytes(row[:n]).decode()) for row, n in zip(gathered, lengths, strict=True)]
    reference = views[0]
    for rank, view in enumerate(views[1:], start=1):
        for index in range(max(len(view), len(reference))):
            mine = view[index] if index < len(view) else "nothing"
            theirs = reference[index] if index < len(reference) else "nothing"
            if mine != theirs:
                raise DistributedError(
                    f"{what}: the ranks built different graphs: rank 0 has {theirs}, "
                    f"rank {rank} has {mine} (entry {index}; {len(reference)} vs {len(view)} "
                    "entries)"
                )


def broadcast_inputs(
    communicator: Communicator, graph: Graph, tensors: Sequence[GraphTensor]
) -> None:
    """Give every rank rank 0's data for `tensors` (graph inputs: parameters and optimizer
    state), packed by dtype into one buffer each (one collective per dtype)."""
    by_dtype: dict[np.dtype, list[GraphTensor]] = {}
    for tensor in tensors:
        array = graph.input_data[tensor.node_id]
        by_dtype.setdefault(array.dtype, []).append(tensor)
    for dtype, group in by_dtype.items():
        arrays = [graph.input_data[t.node_id] for t in group]
        flat = np.concatenate([a.reshape(-1) for a in arrays]).astype(dtype, copy=False)
        communicator.broadcast(flat, 0, None)
        offset = 0
        for tensor, array in zip(group, arrays, strict=True):
            piece = flat[offset : offset + array.size].reshape(array.shape)
            graph.input_data[tensor.node_id] = piece.copy()
            offset += array.size


__all__ = [
    "LABEL",
    "GradientBucket",
    "averaged",
    "broadcast_inputs",
    "check_same",
    "describe",
    "shard",
]

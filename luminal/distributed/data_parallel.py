"""What `TrainStep(..., data_parallel=True)` adds to a training step.

Each rank runs the same graph on its shard of the global batch. One Python `Function`
node takes the gradients and the loss, joined in one flat float32 bucket; on the CPU
runtime it is a "bucket Function" (luminal/backends/cpu/buckets.py): the backward
kernels write the gradients into it directly, so nothing is copied. Every rank applies
the same update to the same parameters, so optimizer state stays identical without ever
being sent. Before training, the ranks check that they built the same parameters and
take rank 0's values. Two ways to sum the buckets, chosen by the communicator:

- ranks sharing memory (MPI on one machine: `Communicator.peers`): the bucket is this
  rank's part of a shared window and the other ranks' buckets are graph inputs. The
  Function only fences (a barrier that orders memory); the optimizer's kernels read
  every rank's bucket and sum them in rank order where they read the gradient, so
  there is no reduction pass and no rank writes another's memory. A second fence,
  started after the run and ended before the next one, keeps a rank from overwriting
  its bucket while a peer still reads it.
- otherwise the Function all-reduces (sums) the bucket in place and the optimizer reads
  the gradients back out of its output by views.

Ranks sharing memory also share the parameters (`ParameterShards`, ZeRO-1): they live
in one vector every rank reads, and each rank applies the optimizer to its range of it
only, writing the new values in place; the fence after the run is then ended at once, so
the parameters are whole whenever a step has returned.

Either way the gradients are divided by the world size where the optimizer reads them
(fused into its kernels), and a step is still one `execute()`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.distributed.backend import Communicator
from luminal.dtype import float32
from luminal.errors import DistributedError, ShapeError

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.tensor import GraphTensor

LABEL = "all_reduce gradients (data parallel)"
WRITER_LABEL = "write this rank's range of the parameters (data parallel)"


class GradientBucket:
    """The callable of the bucket Function node. It communicates only while `active`
    (TrainStep sets it around the runs that apply an optimizer step), so compiling,
    verifying and the non-final micro-batches of an accumulation never communicate.
    `weight` scales this rank's contribution when shards are uneven; the averaged loss
    of the step is left in `loss`.

    A bucket callable (luminal/backends/cpu/buckets.py): the CPU runtime points the
    gradient buffers into `buffer()`, so the backward kernels write the gradients
    straight into the flat array that `reduce` works on; other runtimes call it with
    the gradients. With `peers` (every rank's bucket, ranks sharing memory) the
    Function's output is this rank's weighted contribution, left in its shared bucket
    for the peers; otherwise it is the sum over the ranks."""

    bucket = True

    def __init__(self, communicator: Communicator) -> None:
        self.communicator = communicator
        self.active = False
        self.weight = 1.0
        self.loss = float("nan")
        self._flat = np.empty(0, np.float32)
        self.peers: list[np.ndarray] | None = None
        self.peer_inputs: list[tuple[int, np.ndarray]] = []  # graph input -> a peer's bucket
        self._settling = False  # a fence started after the last run, not ended yet
        self.settle_fully = False  # end that fence at once (the ranks share the parameters)
        self._graph: Graph | None = None  # the graph whose inputs the peers' buckets are

    def __deepcopy__(self, memo: dict) -> GradientBucket:
        """A copied graph (the compiler's reference copy) shares the bucket: it holds
        the process's communicator, which cannot be copied."""
        return self

    def reserve(self, size: int) -> None:
        """Make the bucket's array, where the communicator's all-reduce of it is cheapest
        (a collective: every rank builds its TrainStep at the same point), and learn
        whether the peers' buckets can be read directly."""
        self._flat = self.communicator.bucket(size)
        self.peers = self.communicator.peers(self._flat)

    @property
    def array(self) -> np.ndarray:
        """This rank's bucket (the array its fences are made on)."""
        return self._flat

    def buffer(self, size: int) -> np.ndarray:
        """The flat float32 array the gradients and the loss live in."""
        if self._flat.size != size:
            self._flat = np.empty(size, np.float32)
        return self._flat

    def connect(self, graph: Graph) -> None:
        """Point the peers' bucket inputs at the peers' shared arrays. Done after
        compiling: the compiler's verification runs read private zeros instead, as the
        peers may be writing their buckets meanwhile."""
        self._graph = graph
        for node_id, array in self.peer_inputs:
            graph.input_data[node_id] = array

    def reduce(self, flat: np.ndarray) -> None:
        """On an optimizer step, sum the filled bucket over the ranks in place or, with
        `peers`, fence so the peers can read it (the graph divides the gradients by the
        world size where the optimizer reads them, which costs no pass of its own)."""
        if not self.active:
            return
        if self.weight != 1.0:
            flat *= np.float32(self.weight)
        if self.peers is None:
            self.communicator.all_reduce(flat, "sum")
            self.loss = float(flat[-1])
            return
        self.communicator.fence(flat, op="all_reduce")
        loss = self.peers[0][-1]
        for array in self.peers[1:]:
            loss = loss + array[-1]  # the shares, float32, in rank order (as all_reduce)
        self.loss = float(loss)

    def settle(self) -> None:
        """After a run that read the peers' buckets: tell them this rank is done reading
        (the first half of a fence; `ready` ends it)."""
        if self.peers is not None:
            self.communicator.fence_start(self._flat)
            self._settling = True
            if self.settle_fully:  # the peers' new parameters are in place when it returns
                self.ready()

    def ready(self) -> None:
        """Before a run, which writes this rank's bucket: wait until every peer is done
        reading it (by then they almost always are: no waiting). And mark the peers'
        buckets as new data, as `set()` does: the peers rewrite the same arrays every
        run, and a runtime that reuses what it computed from unchanged inputs (the CPU
        runtime) must not take them for stable (with 3 ranks or more a kernel may read
        peers' buckets only)."""
        if self._graph is not None:
            for node_id, _ in self.peer_inputs:
                self._graph.mark_changed(node_id)
        if self._settling:
            self._settling = False
            self.communicator.fence_end(self._flat, op="all_reduce")

    def __call__(self, *pieces: np.ndarray) -> np.ndarray:
        """The gradients and the loss joined into a flat float32 array, reduced (with
        `peers`: left in this rank's shared bucket for the peers to read)."""
        flat = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in pieces])
        if self.peers is None:
            self.reduce(flat)
            return flat
        shared = self.buffer(flat.size)
        shared[...] = flat
        self.reduce(shared)
        return shared.copy()


class ParameterShards:
    """ZeRO-1 for ranks sharing memory: the parameters live in one vector every rank
    reads (`Communicator.partition`), laid end to end, and rank r applies the optimizer
    to its range of it only, so each rank does 1/W of the update and holds 1/W of the
    optimizer state. The update's kernels write the new values in place, through a
    bucket Function over this rank's range (`_RangeWriter`), and the fence that ends the
    step makes them visible: the next forward of every rank reads the whole vector. Only
    for elementwise optimizers (not LAMB) on float32 parameters."""

    def __init__(self, communicator: Communicator, vector: np.ndarray, own: slice) -> None:
        self.communicator = communicator
        self.vector = vector
        self.start, self.stop = own.start, own.stop
        self.views: list[tuple[int, np.ndarray]] = []  # parameter input -> its view
        self.published = False

    @classmethod
    def create(cls, communicator: Communicator, params: Sequence[GraphTensor]) -> Any:
        """The shards, or None where the ranks do not share memory (or the parameters are
        not all float32)."""
        if any(p.dtype != float32 for p in params):
            return None
        made = communicator.partition(sum(_numel(p) for p in params))
        return None if made is None else cls(communicator, *made)

    def step_graph(self, graph: Graph, optimizer: Any, grads: Sequence[GraphTensor]) -> None:
        """This rank's range of the update, written into the vector by a bucket Function
        (side-effect: nothing reads it)."""
        pieces = optimizer.step_graph_range(grads, self.start, self.stop)
        own = self.vector[self.start : self.stop]
        writer = ops.Function(WRITER_LABEL, _RangeWriter(own), side_effect=True)
        graph.add_node(writer, pieces, (self.stop - self.start,), float32)
        offset = 0
        for param in optimizer.params:
            shape = tuple(int(d) for d in param.shape)
            view = self.vector[offset : offset + _numel(param)].reshape(shape)
            self.views.append((param.node_id, view))
            offset += view.size

    def publish(self, graph: Graph, fence_on: np.ndarray) -> None:
        """Copy this rank's range of the parameters' arrays into the vector, fence, and
        make the vector's views the parameters' arrays (a collective: after compiling,
        whose verification runs write junk into this rank's range, and after
        `broadcast_state`)."""
        for (node_id, _), offset, lo, hi in self._owned():
            if lo < hi:
                flat = np.asarray(graph.input_data[node_id], np.float32).reshape(-1)
                self.vector[lo:hi] = flat[lo - offset : hi - offset]
        self.communicator.fence(fence_on, op="broadcast_state")
        for node_id, view in self.views:
            graph.input_data[node_id] = view
        self.published = True

    def check(self, graph: Graph) -> None:
        """Before a step: the parameters are still the vector's views (a `set()` of one
        would train a private copy that no other rank sees)."""
        data = graph.input_data
        for node_id, view in self.views:
            if data[node_id] is not view:
                name = graph.nodes[node_id].op.label
                raise DistributedError(
                    f"TrainStep(data_parallel=True): parameter {name!r} was set() after "
                    "the step was built; the ranks share the parameters' memory, so call "
                    "step.broadcast_state() on every rank after setting them (it takes "
                    "rank 0's values)"
                )

    def gather_state(self, graph: Graph, states: dict[str, list[Any]]) -> dict[str, list]:
        """Every rank's ranges of the optimizer state joined into whole arrays shaped like
        the parameters (a collective): by kind, aligned with the parameters."""
        bounds = self._bounds()
        ranges = list(zip(bounds, bounds[1:], strict=False))
        longest = max(b - a for a, b in ranges)
        full: dict[str, list] = {}
        for kind, tensors in states.items():
            mine = np.zeros(longest, np.float32)
            pieces = [graph.input_data[t.node_id].reshape(-1) for t in tensors if t is not None]
            joined = np.concatenate(pieces) if pieces else mine[:0]
            mine[: joined.size] = joined
            rows = self.communicator.all_gather(mine, None)
            flat = np.concatenate([row[: b - a] for row, (a, b) in zip(rows, ranges, strict=True)])
            full[kind] = self._split(flat)
        return full

    def scatter_state(self, graph: Graph, states: dict[str, list[Any]], full: dict) -> None:
        """Set this rank's ranges of the optimizer state from whole arrays (`full`, by
        kind, aligned with the parameters; the same on every rank)."""
        for kind, tensors in states.items():
            flat = np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in full[kind]])
            for (_, _, lo, hi), tensor in zip(self._owned(), tensors, strict=True):
                if tensor is not None:
                    graph.input_data[tensor.node_id] = flat[lo:hi].copy()

    def _owned(self) -> list[tuple[tuple[int, np.ndarray], int, int, int]]:
        """Per parameter, in order: (its input and view, its offset in the vector, and the
        part of this rank's range inside it as [lo, hi) of the vector: empty when lo >= hi)."""
        out, offset = [], 0
        for entry in self.views:
            size = entry[1].size
            out.append((entry, offset, max(self.start, offset), min(self.stop, offset + size)))
            offset += size
        return out

    def _bounds(self) -> list[int]:
        size, world = self.vector.size, self.communicator.world_size
        return [size * r // world for r in range(world + 1)]

    def _split(self, flat: np.ndarray) -> list[np.ndarray]:
        out, offset = [], 0
        for _, view in self.views:
            out.append(flat[offset : offset + view.size].reshape(view.shape).copy())
            offset += view.size
        return out


class _RangeWriter:
    """The bucket callable over this rank's range of the shared parameters: the CPU
    runtime points the new values' buffers into it, so the update kernels write them in
    place (each element is read and written by the same kernel); other runtimes call it
    with the new values, which it writes there."""

    bucket = True

    def __init__(self, own: np.ndarray) -> None:
        self.own = own

    def __deepcopy__(self, memo: dict) -> _RangeWriter:
        return self

    def buffer(self, size: int) -> np.ndarray:
        return self.own

    def reduce(self, flat: np.ndarray) -> None:
        pass  # the values are in place; the step's closing fence publishes them

    def __call__(self, *pieces: np.ndarray) -> np.ndarray:
        flat = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in pieces])
        self.own[...] = flat
        return flat


def averaged(
    graph: Graph, grads: Sequence[GraphTensor], loss: GraphTensor, bucket: GradientBucket
) -> list[GraphTensor]:
    """`grads` averaged over the ranks: the gradients and the loss go into one Function
    node whose output is them joined in one flat bucket (on the CPU runtime the backward
    writes them there directly), summed over the ranks in place, or, when the ranks
    share memory, summed where the optimizer reads them from every rank's bucket (the
    peers' are graph inputs; `bucket.connect` points them at the peers' arrays). The
    gradients are read as float32 views divided by the world size (fused into the
    optimizer's kernels)."""
    total = sum(_numel(g) for g in grads) + 1
    bucket.reserve(total)
    communicator = bucket.communicator
    world_size = communicator.world_size
    # the loss goes in as this rank's share of the mean, so the ranks' entries sum to it;
    # a kernel of its own computes it, so the bucket holds it without a copy (the
    # retrieved loss itself, read again after the bucket, would be copied in by Python
    # every run: ~0.08 ms of the MLP's 2-rank step)
    share = loss * (1.0 / world_size) if world_size > 1 else loss
    inputs = [*grads, share]
    reduced = graph.add_node(ops.Function(LABEL, bucket), inputs, (total,), float32)
    sources = [reduced]
    if bucket.peers is not None:
        sources = []
        for rank, array in enumerate(bucket.peers):
            if rank == communicator.rank:
                sources.append(reduced)
                continue
            peer = graph.tensor((total,), dtype=float32, name=f"rank {rank} gradient bucket")
            peer.set(np.zeros(total, np.float32))
            bucket.peer_inputs.append((peer.node_id, array))
            sources.append(peer)
    out, offset = [], 0
    for grad in grads:
        size = _numel(grad)
        shape = tuple(int(d) for d in grad.shape)
        views = [source[offset : offset + size].reshape(shape) for source in sources]
        summed = views[0]
        for view in views[1:]:
            summed = summed + view  # in rank order: every rank computes the same bits
        out.append(summed * (1.0 / world_size) if world_size > 1 else summed)
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
    "ParameterShards",
    "averaged",
    "broadcast_inputs",
    "check_same",
    "describe",
    "shard",
]

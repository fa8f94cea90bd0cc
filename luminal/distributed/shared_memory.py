"""Buckets in memory the ranks share: the MPI backend's path for an array made by
`Communicator.bucket()` when every rank runs on one machine.

The bucket is this rank's part of an MPI shared-memory window (`MPI_Win_allocate_shared`),
so the peers read it directly. Ranks synchronize through the window itself: each
publishes a counter of the fences it started (after its bucket, alone in a cache line)
and a fence ends when every rank's counter has caught up, with `Win_sync` before
publishing and after waiting to order the loads and stores (MPI's shared-memory model).
The two halves can be apart: the data-parallel step starts a fence when it is done
reading the peers' buckets and ends it only before its next run writes its own, where
the peers have almost always started it already (no waiting, no barrier round trip).
Waiting is polled with the communicator's failure notices and deadline, so a missing
peer is an error, never a hang.

The data-parallel step only fences (the optimizer's kernels sum the peers' buckets where
they read the gradients, luminal/distributed/data_parallel.py). `all_reduce` sums in
place: a fence (every rank has written its values), each rank r sums chunk r of every
rank's array in rank order and writes the result into chunk r of every array, a second
fence. Each chunk is summed by one rank, so every rank ends with the same bits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

_LINE = 64  # bytes: a fence counter sits alone in a cache line after the bucket

# `wait(done)`: poll `done()` until true, raising on a timeout or a peer's failure
Wait = Callable[[Callable[[], bool]], None]


class SharedBucket:
    """One float32 array per rank in a shared window, and each rank's fence counter."""

    def __init__(self, MPI: Any, comm: Any, size: int) -> None:
        counter = -(-size * 4 // _LINE) * _LINE
        self.window = MPI.Win.Allocate_shared(counter + _LINE, 4, comm=comm)
        self.arrays = []
        self.counters = []
        for rank in range(comm.Get_size()):
            memory, _ = self.window.Shared_query(rank)
            self.arrays.append(np.frombuffer(memory, np.float32, size))
            self.counters.append(np.frombuffer(memory, np.int64, 1, offset=counter))
        self.window.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch, so Sync may be called
        rank, world = comm.Get_rank(), comm.Get_size()
        self.rank = rank
        self.started = 0  # fences this rank started
        self.counters[rank][0] = 0
        self.window.Sync()
        comm.Barrier()  # every counter is 0 before any rank reads one
        self.chunk = slice(size * rank // world, size * (rank + 1) // world)
        self.scratch = np.empty(self.chunk.stop - self.chunk.start, np.float32)

    @property
    def array(self) -> np.ndarray:
        return self.arrays[self.rank]

    def all_reduce(self, op: str, wait: Wait) -> None:
        """Sum ("sum" or "avg") every rank's array into all of them."""
        self.fence(wait)
        chunk = self.chunk
        parts = [array[chunk] for array in self.arrays]
        total = parts[self.rank] if self.rank < 2 else self.scratch  # never an unread part
        np.add(parts[0], parts[1], out=total)
        for part in parts[2:]:
            np.add(total, part, out=total)
        if op == "avg":
            np.divide(total, np.float32(len(parts)), out=total)
        for part in parts:
            if part is not total:
                part[...] = total
        self.fence(wait)

    def fence(self, wait: Wait) -> None:
        """Every rank's stores before it are visible to every rank's loads after it."""
        self.fence_start()
        self.fence_end(wait)

    def fence_start(self) -> None:
        """Publish this rank's stores so far and that it reached the fence."""
        self.started += 1
        self.window.Sync()
        self.counters[self.rank][0] = self.started

    def fence_end(self, wait: Wait) -> None:
        """Wait until every rank has started the fence this rank started last."""
        wait(self._everyone_started)
        self.window.Sync()

    def _everyone_started(self) -> bool:
        started = self.started
        return all(int(counter[0]) >= started for counter in self.counters)


class SharedPartition:
    """A float32 vector in one shared window, rank r owning elements [n·r//W, n·(r+1)//W)
    as its segment of the window. MPI allocates the segments one after the other (unless
    told otherwise), so the whole vector is one array every rank reads: the data-parallel
    step keeps the parameters there, each rank writing only its range (ZeRO-1). `None`
    from `create` where the segments are not contiguous."""

    def __init__(self, window: Any, vector: np.ndarray, start: int, stop: int) -> None:
        self.window = window
        self.vector = vector
        self.start, self.stop = start, stop

    @classmethod
    def create(cls, MPI: Any, comm: Any, size: int) -> SharedPartition | None:
        rank, world = comm.Get_rank(), comm.Get_size()
        bounds = [size * r // world for r in range(world + 1)]
        own = bounds[rank + 1] - bounds[rank]
        window = MPI.Win.Allocate_shared(own * 4, 4, comm=comm)
        addresses = []
        for peer in range(world):
            memory, _ = window.Shared_query(peer)
            addresses.append(np.frombuffer(memory, np.uint8).ctypes.data)
        if any(a != addresses[0] + 4 * b for a, b in zip(addresses, bounds, strict=False)):
            return None  # freeing the window is collective and blocking: left to the job's end
        window.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch, so Sync may be called
        vector = np.ctypeslib.as_array((ctypes.c_float * size).from_address(addresses[0]))
        return cls(window, vector, bounds[rank], bounds[rank + 1])


def node_local(MPI: Any, comm: Any) -> bool:
    """Whether every rank of `comm` can share memory with every other (one machine)."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return bool(local.Get_size() == comm.Get_size())
    finally:
        local.Free()


__all__ = ["SharedBucket", "SharedPartition", "node_local"]

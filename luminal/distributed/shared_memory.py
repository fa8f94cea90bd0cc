"""All-reduce through memory the ranks share: the MPI backend's path for an array made by
`Communicator.bucket()` when every rank runs on one machine.

The bucket is this rank's part of an MPI shared-memory window (`MPI_Win_allocate_shared`),
so the peers read it directly. An all-reduce is then: a barrier (every rank has written
its values), each rank r sums chunk r of every rank's array in rank order and writes the
result into chunk r of every array, a second barrier (every chunk is written). Each rank
reads 2 and writes 2 of its 1/W chunks per rank (W = 2: 5.4 MB of memory traffic for a
2.68 MB bucket) and no message is copied through MPI's cells; measured on the loaded
2-core machine for the MLP's 2.68 MB: 0.1-0.2 ms CPU per rank against 0.7-1.1 ms for
`Iallreduce` plus the division of "avg" (docs/distributed.md). Each chunk is summed by
one rank, so every rank ends with the same bits. Barriers are `Ibarrier`s polled against
the deadline with the communicator's failure notices, so a missing peer is an error,
never a hang; `Win_sync` around them orders the loads and stores (MPI's shared-memory
model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class SharedBucket:
    """One float32 array per rank in a shared window; `all_reduce` sums them in place."""

    def __init__(self, MPI: Any, comm: Any, size: int) -> None:
        self.window = MPI.Win.Allocate_shared(size * 4, 4, comm=comm)
        self.arrays = []
        for rank in range(comm.Get_size()):
            memory, _ = self.window.Shared_query(rank)
            self.arrays.append(np.frombuffer(memory, np.float32, size))
        self.window.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch, so Sync may be called
        rank, world = comm.Get_rank(), comm.Get_size()
        self.rank = rank
        self.chunk = slice(size * rank // world, size * (rank + 1) // world)
        self.scratch = np.empty(self.chunk.stop - self.chunk.start, np.float32)

    @property
    def array(self) -> np.ndarray:
        return self.arrays[self.rank]

    def all_reduce(self, op: str, barrier: Callable[[], None]) -> None:
        """Sum ("sum" or "avg") every rank's array into all of them; `barrier()` waits
        for every rank (raising on a timeout or a peer's failure)."""
        self.fence(barrier)
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
        self.fence(barrier)

    def fence(self, barrier: Callable[[], None]) -> None:
        """`barrier()` with the window synchronized on both sides: every rank's stores
        before it are visible to every rank's loads after it."""
        self.window.Sync()
        barrier()
        self.window.Sync()


def node_local(MPI: Any, comm: Any) -> bool:
    """Whether every rank of `comm` can share memory with every other (one machine)."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return bool(local.Get_size() == comm.Get_size())
    finally:
        local.Free()


__all__ = ["SharedBucket", "node_local"]

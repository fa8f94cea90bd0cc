"""The `mpi` backend: mpi4py on whatever MPI the process was launched with.

Every collective is non-blocking (`Iallreduce`, `Ibcast`, ...) and polled against a
deadline, so a peer that never arrives becomes a `DistributedError` within the timeout
instead of a hang. A second communicator carries failure notices: a rank dying of an
uncaught exception tells every peer why (their waiting collective raises with that
text), waits a moment for them to report, then calls `MPI_Abort`, which ends the job.
A rank killed outright is handled by the launcher (`mpiexec` ends the job) or, failing
that, by the timeout.
"""

from __future__ import annotations

import atexit
import sys
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

import numpy as np

from luminal.distributed.backend import Communicator
from luminal.distributed.shared_memory import SharedBucket, SharedPartition, node_local
from luminal.errors import DistributedError

_NOTICE_TAG = 7
_NOTICE_BYTES = 2048
_GRACE_SECONDS = 2.0  # how long a failing rank waits for its peers' reports before Abort
# then how long it lets mpiexec forward what the peers printed: aborting the moment the
# last notice arrived cut a peer's traceback mid-way on a loaded machine (its final
# line, the error, never reached the log)
_DRAIN_SECONDS = 0.5


class MPICommunicator(Communicator):
    backend = "mpi"

    def __init__(self, timeout: float) -> None:
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise DistributedError(
                "init(backend='mpi'): mpi4py is not installed; pip install 'luminal[mpi]' "
                "(mpi4py and the MPICH wheel)"
            ) from error
        self.MPI = MPI
        world = MPI.COMM_WORLD
        super().__init__(world.Get_rank(), world.Get_size(), timeout)
        self.comm = world.Dup()  # collectives: apart from any MPI traffic of the user's
        self.control = world.Dup()  # failure notices
        self.failed: dict[int, str] = {}
        self.shared: dict[int, SharedBucket] = {}  # by address of this rank's array
        self._returned: dict[int, SharedBucket] = {}  # by id of the array bucket() returned
        self._partitions: list[Any] = []  # windows of partition(): synced by every fence
        self._notice = bytearray(_NOTICE_BYTES)
        self._listen()
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.close)

    # ---------------------------------------------------------------- collectives
    def bucket(self, size: int) -> np.ndarray:
        """In a shared-memory window when every rank is on this machine, so that its
        all-reduce reads the peers' arrays directly (luminal/distributed/shared_memory.py)."""
        self._usable("bucket")
        if self.world_size == 1 or size == 0 or not node_local(self.MPI, self.comm):
            return super().bucket(size)
        shared = SharedBucket(self.MPI, self.comm, size)
        self.shared[shared.array.ctypes.data] = shared
        self._returned[id(shared.array)] = shared
        return shared.array

    def partition(self, size: int) -> tuple[np.ndarray, slice] | None:
        """In a shared window whose segments are the ranks' ranges, when every rank is on
        this machine (luminal/distributed/shared_memory.py)."""
        self._usable("partition")
        if self.world_size == 1 or size < self.world_size or not node_local(self.MPI, self.comm):
            return None
        part = SharedPartition.create(self.MPI, self.comm, size)
        if part is None:
            return None
        self._partitions.append(part.window)
        return part.vector, slice(part.start, part.stop)

    def peers(self, array: np.ndarray) -> list[np.ndarray] | None:
        shared = self._shared(array)
        return None if shared is None else list(shared.arrays)

    def _fence_start(self, array: np.ndarray) -> None:
        for window in self._partitions:  # their stores too, before the counter says so
            window.Sync()
        shared = self._shared(array)
        if shared is not None:
            shared.fence_start()

    def _fence_end(self, array: np.ndarray, timeout: float, op: str) -> None:
        shared = self._shared(array)
        if shared is None:
            self._wait(op, self.comm.Ibarrier(), timeout)
        else:
            shared.fence_end(self._waiter(op, timeout))
        for window in self._partitions:
            window.Sync()

    def _shared(self, array: np.ndarray) -> SharedBucket | None:
        """The shared window `array` is this rank's whole part of, if any (the array
        `bucket()` returned is recognized without asking numpy for its address, which
        costs ~1.5 us: the data-parallel step asks 4 times per step)."""
        shared = self._returned.get(id(array))
        if shared is not None and shared.array is array:
            return shared
        shared = self.shared.get(array.ctypes.data)
        if shared is None or (array.size, array.dtype) != (shared.array.size, np.float32):
            return None
        return shared

    def _all_reduce(self, array: np.ndarray, op: str, timeout: float) -> None:
        shared = self._shared(array)
        if shared is not None and op in ("sum", "avg"):
            shared.all_reduce(op, self._waiter("all_reduce", timeout))
            return
        MPI = self.MPI
        mpi_op = {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
        self._wait("all_reduce", self.comm.Iallreduce(MPI.IN_PLACE, array, mpi_op), timeout)
        if op == "avg":
            array /= array.dtype.type(self.world_size)

    def _broadcast(self, array: np.ndarray, root: int, timeout: float) -> None:
        self._wait("broadcast", self.comm.Ibcast(_bytes(array), root=root), timeout)

    def _all_gather(self, array: np.ndarray, out: np.ndarray, timeout: float) -> None:
        self._wait("all_gather", self.comm.Iallgather(_bytes(array), _bytes(out)), timeout)

    def _reduce_scatter(self, array: np.ndarray, out: np.ndarray, op: str, timeout: float) -> None:
        MPI = self.MPI
        mpi_op = {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
        request = self.comm.Ireduce_scatter_block(array, out, mpi_op)
        self._wait("reduce_scatter", request, timeout)
        if op == "avg":
            out /= out.dtype.type(self.world_size)

    def _barrier(self, timeout: float) -> None:
        self._wait("barrier", self.comm.Ibarrier(), timeout)

    # ---------------------------------------------------------------- waiting
    def _wait(self, op: str, request: Any, timeout: float) -> None:
        self.poll(op, request.Test, timeout, self._peer_failure)

    def _waiter(self, op: str, timeout: float) -> Callable[[Callable[[], bool]], None]:
        """Polls a condition (a shared-memory fence) as `_wait` polls a request."""
        return lambda done: self.poll(op, done, timeout, self._peer_failure)

    def _listen(self) -> None:
        self._request = self.control.Irecv(
            [self._notice, self.MPI.BYTE], source=self.MPI.ANY_SOURCE, tag=_NOTICE_TAG
        )

    def _peer_failure(self) -> str | None:
        """A failure notice received since the last call, as the text to raise with."""
        status = self.MPI.Status()
        if self._request is None or not self._request.Test(status):
            return None
        source = status.Get_source()
        text = bytes(self._notice[: status.Get_count(self.MPI.BYTE)]).decode(errors="replace")
        self.failed[source] = text
        self._listen()
        return f"rank {source} failed: {text}"

    # ---------------------------------------------------------------- failure
    def _excepthook(
        self, kind: type[BaseException], error: BaseException, trace: TracebackType | None
    ) -> None:
        """Print the traceback, tell the peers, give them a moment to say why they stop
        (so every rank's message reaches the log), then end the whole job."""
        self._previous_hook(kind, error, trace)
        sys.stderr.flush()
        if self.world_size == 1:
            return
        line = traceback.format_exception_only(kind, error)[-1].strip()
        self.notify(line)
        deadline = time.monotonic() + _GRACE_SECONDS
        while len(self.failed) < self.world_size - 1 and time.monotonic() < deadline:
            if self._peer_failure() is None:
                time.sleep(0.001)
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(_DRAIN_SECONDS)
        self.MPI.COMM_WORLD.Abort(1)

    def notify(self, text: str) -> None:
        """Send a failure notice to every other rank (small: eager, completes locally)."""
        payload = text.encode()[:_NOTICE_BYTES]
        requests = [
            self.control.Isend([payload, self.MPI.BYTE], dest=peer, tag=_NOTICE_TAG)
            for peer in range(self.world_size)
            if peer != self.rank
        ]
        deadline = time.monotonic() + _GRACE_SECONDS
        while not self.MPI.Request.Testall(requests) and time.monotonic() < deadline:
            time.sleep(0.001)

    def close(self) -> None:
        """Cancel the pending notice receive (MPI_Finalize must not find it) and restore
        the exception hook. Idempotent; also runs at exit."""
        if self._request is not None:
            self._request.Cancel()
            self._request.Wait()
            self._request = None
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook
        super().close()


def _bytes(array: np.ndarray) -> Any:
    """A contiguous array as raw bytes for data-movement collectives (any dtype)."""
    return array.reshape(-1).view(np.uint8)


__all__ = ["MPICommunicator"]

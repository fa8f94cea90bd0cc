"""The `local` backend: ranks are threads of one process, for tests and for trying the
data-parallel code without a launcher.

`run_local(fn, world_size)` runs `fn()` on `world_size` threads, each bound to its own
rank (`dist.rank()` inside `fn` is that thread's). A collective is a rendezvous of the
threads: each deposits its array, the last to arrive lets all of them compute the same
result in rank order, and a second rendezvous frees the slots. When a thread raises, the
group is aborted: every thread waiting in (or later entering) a collective raises
`DistributedError` naming the failed rank, and `run_local` re-raises the first error.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.distributed.backend import Communicator, reduce_arrays
from luminal.errors import DistributedError, LuminalError


class LocalGroup:
    """What the threads of one local world share: the slots and the rendezvous."""

    def __init__(self, world_size: int, timeout: float) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self.slots: list[Any] = [None] * world_size
        self.rendezvous = threading.Barrier(world_size)
        self.failure: str | None = None  # set when a rank raised

    def abort(self, rank: int, error: BaseException) -> None:
        if self.failure is None:
            text = traceback.format_exception_only(type(error), error)[-1].strip()
            self.failure = f"rank {rank} failed: {text}"
        self.rendezvous.abort()


class LocalCommunicator(Communicator):
    backend = "local"

    def __init__(self, group: LocalGroup, rank: int) -> None:
        super().__init__(rank, group.world_size, group.timeout)
        self.group = group

    def _exchange(
        self, op: str, value: Any, combine: Callable[[list[Any]], Any], timeout: float
    ) -> Any:
        """Deposit `value`, wait for all ranks, return `combine(values in rank order)`."""
        group = self.group
        group.slots[self.rank] = value
        self._meet(op, timeout)
        result = combine(list(group.slots))
        self._meet(op, timeout)  # nobody reuses the slots before everyone has read them
        return result

    def _meet(self, op: str, timeout: float) -> None:
        try:
            self.group.rendezvous.wait(timeout)
        except threading.BrokenBarrierError:
            if self.group.failure is not None:
                raise self.fail(op, self.group.failure) from None
            raise self.fail(
                op, f"the other ranks did not join or finish it within {timeout:g} s"
            ) from None

    def _all_reduce(self, array: np.ndarray, op: str, timeout: float) -> None:
        array[...] = self._exchange("all_reduce", array, lambda v: reduce_arrays(v, op), timeout)

    def _broadcast(self, array: np.ndarray, root: int, timeout: float) -> None:
        array[...] = self._exchange("broadcast", array, lambda v: v[root].copy(), timeout)

    def _all_gather(self, array: np.ndarray, out: np.ndarray, timeout: float) -> None:
        out[...] = self._exchange("all_gather", array, np.stack, timeout)

    def _reduce_scatter(self, array: np.ndarray, out: np.ndarray, op: str, timeout: float) -> None:
        def mine(values: list[np.ndarray]) -> np.ndarray:
            chunks = [np.split(v, self.world_size)[self.rank] for v in values]
            return reduce_arrays(chunks, op)

        out[...] = self._exchange("reduce_scatter", array, mine, timeout)

    def _barrier(self, timeout: float) -> None:
        self._exchange("barrier", None, lambda v: None, timeout)


def run_local(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 60.0
) -> list[Any]:
    """Run `fn(*args)` on `world_size` threads, one rank each; return their results in
    rank order. If any rank raises, the group is aborted and the first error is raised
    here (after every thread has stopped)."""
    from luminal.distributed import api

    if world_size < 1:
        raise LuminalError(f"run_local: world_size must be >= 1, got {world_size}")
    group = LocalGroup(world_size, timeout)
    results: list[Any] = [None] * world_size
    errors: list[tuple[int, BaseException]] = []

    def body(rank: int) -> None:
        communicator = LocalCommunicator(group, rank)
        api.bind_thread(communicator)
        try:
            results[rank] = fn(*args)
        except BaseException as error:  # a rank's failure must stop its peers
            errors.append((rank, error))
            group.abort(rank, error)
        finally:
            api.bind_thread(None)

    threads = [
        threading.Thread(target=body, args=(rank,), name=f"luminal-rank-{rank}")
        for rank in range(world_size)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        root = [e for _, e in errors if not isinstance(e, DistributedError)] or [errors[0][1]]
        raise root[0]
    return results


__all__ = ["LocalCommunicator", "LocalGroup", "run_local"]

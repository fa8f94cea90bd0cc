"""What every backend implements, and the checks and messages they share.

A `Communicator` is one rank's handle on a group of processes (or threads, for the
`local` backend). Its collectives work in place on numpy arrays and take a timeout in
seconds; a collective that cannot finish in time, or that learns that a peer failed,
raises `DistributedError` naming the op, this rank and what it waited for. After such an
error the communicator is broken: every later collective raises at once, since the ranks
no longer agree on which collective comes next.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.errors import DistributedError, DTypeError, LuminalError, ShapeError, format_shape

OPS = ("sum", "avg", "max", "min")
# After this long waiting for a collective, poll more gently (a slow peer, not a fast op).
_SPIN_SECONDS = 0.05


class Communicator:
    """One rank of a group. Subclasses implement the `_`-prefixed collectives; the public
    methods check their arguments and the group's health first."""

    backend = "none"

    def __init__(self, rank: int, world_size: int, timeout: float) -> None:
        self.rank = rank
        self.world_size = world_size
        self.timeout = float(timeout)
        self.broken: str | None = None  # why the group cannot be used any more

    # ---------------------------------------------------------------- public collectives
    def all_reduce(self, array: np.ndarray, op: str, timeout: float | None = None) -> np.ndarray:
        check_array("all_reduce", array, writable=True)
        check_op("all_reduce", op, array)
        self._usable("all_reduce")
        if self.world_size > 1:
            self._all_reduce(array, op, self._timeout(timeout))
        return array

    def broadcast(
        self, array: np.ndarray, root: int = 0, timeout: float | None = None
    ) -> np.ndarray:
        check_array("broadcast", array, writable=True)
        self._check_root("broadcast", root)
        self._usable("broadcast")
        if self.world_size > 1:
            self._broadcast(array, root, self._timeout(timeout))
        return array

    def all_gather(self, array: np.ndarray, timeout: float | None = None) -> np.ndarray:
        check_array("all_gather", array, writable=False)
        self._usable("all_gather")
        out = np.empty((self.world_size, *array.shape), array.dtype)
        if self.world_size == 1:
            out[0] = array
        else:
            self._all_gather(np.ascontiguousarray(array), out, self._timeout(timeout))
        return out

    def reduce_scatter(
        self, array: np.ndarray, op: str, timeout: float | None = None
    ) -> np.ndarray:
        check_array("reduce_scatter", array, writable=False)
        check_op("reduce_scatter", op, array)
        if array.ndim == 0 or array.shape[0] % self.world_size != 0:
            raise ShapeError(
                f"reduce_scatter: the first dim of {format_shape(array.shape)} must divide "
                f"into {self.world_size} equal chunks (one per rank)"
            )
        self._usable("reduce_scatter")
        if self.world_size == 1:
            return array.copy()
        out = np.empty((array.shape[0] // self.world_size, *array.shape[1:]), array.dtype)
        self._reduce_scatter(np.ascontiguousarray(array), out, op, self._timeout(timeout))
        return out

    def barrier(self, timeout: float | None = None) -> None:
        self._usable("barrier")
        if self.world_size > 1:
            self._barrier(self._timeout(timeout))

    def bucket(self, size: int) -> np.ndarray:
        """A float32 array of `size` for repeated in-place all-reduces (the data-parallel
        gradient bucket), placed where this backend's all-reduce of it is cheapest (MPI on
        one machine: memory the ranks share). A collective: every rank calls it, in the
        same order."""
        return np.empty(size, np.float32)

    def peers(self, array: np.ndarray) -> list[np.ndarray] | None:
        """Every rank's array of a bucket that `bucket()` made, in rank order, when this
        rank can read the others' directly (ranks sharing memory); None otherwise. Read
        them only between two fences that every rank makes."""
        return None

    def partition(self, size: int) -> tuple[np.ndarray, slice] | None:
        """A float32 array of `size` elements that every rank reads and writes in place
        (memory the ranks share), and the slice of it this rank owns: rank r owns
        elements [size·r//W, size·(r+1)//W), which only it writes; a `fence` of a bucket
        makes those writes visible to every rank. None where the ranks do not share
        memory (data parallelism then keeps the whole optimizer step on every rank).
        A collective (every rank makes its partitions at the same points)."""
        return None

    def fence(self, array: np.ndarray, timeout: float | None = None, op: str = "fence") -> None:
        """A barrier after which every rank's writes to its `bucket()` array before it
        are visible to every rank that reads it through `peers()`: `fence_start` then
        `fence_end`. `op` names it in errors (the data-parallel step calls its fences
        "all_reduce": they are that collective's synchronization, the sum being done by
        the reader)."""
        self.fence_start(array)
        self.fence_end(array, timeout, op)

    def fence_start(self, array: np.ndarray) -> None:
        """A fence's first half, which returns at once: this rank's writes so far are
        published. Do other work, then `fence_end`: a rank can learn that its peers are
        done reading its bucket without waiting for them at that moment."""
        self._usable("fence")
        if self.world_size > 1:
            self._fence_start(array)

    def fence_end(self, array: np.ndarray, timeout: float | None = None, op: str = "fence") -> None:
        """A fence's second half: wait until every rank has made its `fence_start`."""
        self._usable(op)
        if self.world_size > 1:
            self._fence_end(array, self._timeout(timeout), op)

    def close(self) -> None:
        """Release what the backend holds; collectives raise afterwards."""
        self.broken = self.broken or "the group was shut down"

    # ---------------------------------------------------------------- backend hooks
    def _all_reduce(self, array: np.ndarray, op: str, timeout: float) -> None:
        raise NotImplementedError

    def _broadcast(self, array: np.ndarray, root: int, timeout: float) -> None:
        raise NotImplementedError

    def _all_gather(self, array: np.ndarray, out: np.ndarray, timeout: float) -> None:
        raise NotImplementedError

    def _reduce_scatter(self, array: np.ndarray, out: np.ndarray, op: str, timeout: float) -> None:
        raise NotImplementedError

    def _barrier(self, timeout: float) -> None:
        raise NotImplementedError

    def _fence_start(self, array: np.ndarray) -> None:
        pass  # the whole barrier is in _fence_end

    def _fence_end(self, array: np.ndarray, timeout: float, op: str) -> None:
        self._barrier(timeout)

    # ---------------------------------------------------------------- shared helpers
    def _timeout(self, timeout: float | None) -> float:
        value = self.timeout if timeout is None else float(timeout)
        if not value > 0:
            raise LuminalError(f"distributed: timeout must be > 0 seconds, got {timeout}")
        return value

    def _check_root(self, op: str, root: int) -> None:
        if not 0 <= int(root) < self.world_size:
            raise LuminalError(f"{op}: root {root} is not a rank of a world of {self.world_size}")

    def _usable(self, op: str) -> None:
        if self.broken is not None:
            raise DistributedError(
                f"{op} on rank {self.rank} of {self.world_size}: the group is unusable "
                f"({self.broken})"
            )

    def fail(self, op: str, why: str) -> DistributedError:
        """Mark the group broken and return the error to raise."""
        self.broken = f"{op} failed earlier: {why}"
        return DistributedError(f"{op} on rank {self.rank} of {self.world_size}: {why}")

    def poll(self, op: str, done: Callable[[], bool], timeout: float, peer_failure: Any) -> None:
        """Call `done()` until it is true: busy at first (MPI progresses only inside its
        calls), yielding the core between tries (on a machine with more runnable processes
        than cores, the peer we wait for may need it: measured on 2 loaded cores, a
        tensor-parallel decode step took 42-62 ms with the yield, 89 ms without), then with
        short sleeps. `peer_failure()` returns a peer's failure notice or None; either a
        notice or the deadline raises DistributedError."""
        start = time.monotonic()
        deadline = start + timeout
        while not done():
            notice = peer_failure()
            if notice is not None:
                raise self.fail(op, notice)
            now = time.monotonic()
            if now > deadline:
                raise self.fail(
                    op, f"the other ranks did not join or finish it within {timeout:g} s"
                )
            if now - start > _SPIN_SECONDS:
                time.sleep(0.0005)
            else:
                os.sched_yield()


def check_array(op: str, array: Any, writable: bool) -> None:
    """Collectives take C-contiguous numpy arrays (in place ones must be writable)."""
    if not isinstance(array, np.ndarray):
        raise LuminalError(f"{op}: expected a numpy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise LuminalError(
            f"{op}: the array of shape {format_shape(array.shape)} is not C-contiguous"
        )
    if writable and not array.flags.writeable:
        raise LuminalError(f"{op}: the array of shape {format_shape(array.shape)} is read-only")
    if array.dtype.kind not in "fiub":
        raise DTypeError(f"{op}: arrays of dtype {array.dtype} cannot be communicated")


def check_op(name: str, op: str, array: np.ndarray) -> None:
    if op not in OPS:
        raise LuminalError(f"{name}: unknown op {op!r}; expected one of {OPS}")
    if op == "avg" and array.dtype.kind not in "f":
        raise DTypeError(f"{name}: op 'avg' needs a float array, got {array.dtype}")


def reduce_arrays(values: list[np.ndarray], op: str) -> np.ndarray:
    """The reduction of `values` in rank order (every rank computes the same bits)."""
    result = values[0].copy()
    for value in values[1:]:
        if op in ("sum", "avg"):
            result += value
        elif op == "max":
            np.maximum(result, value, out=result)
        else:
            np.minimum(result, value, out=result)
    if op == "avg":
        result /= result.dtype.type(len(values))
    return result


__all__ = ["OPS", "Communicator", "check_array", "check_op", "reduce_arrays"]

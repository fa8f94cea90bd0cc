"""The `gloo` backend: torch.distributed's CPU collectives, for jobs started by `torchrun`.

torch is optional here (never a dependency of the core): it is imported only when this
backend is chosen. Arrays are shared with torch through `torch.from_numpy` (no copy).
Each collective runs asynchronously and is waited on with the timeout; any failure
(timeout, a peer that closed its connection) becomes a `DistributedError` naming the op.
When one rank dies, torchrun stops the others; a peer blocked in a collective sees the
closed connection first and raises.
"""

from __future__ import annotations

import atexit
import datetime
from typing import Any

import numpy as np

from luminal.distributed.backend import Communicator
from luminal.errors import DistributedError, DTypeError


class GlooCommunicator(Communicator):
    backend = "gloo"

    def __init__(self, timeout: float) -> None:
        try:
            import torch
            import torch.distributed as torch_dist
        except ImportError as error:
            raise DistributedError(
                "init(backend='gloo'): torch is not installed (pip install torch)"
            ) from error
        self.torch = torch
        self.dist = torch_dist
        self.owns_group = not torch_dist.is_initialized()
        if self.owns_group:  # env:// reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
            try:
                torch_dist.init_process_group("gloo", timeout=_delta(timeout))
            except Exception as error:  # a bad address, a peer that never comes
                raise DistributedError(
                    f"init(backend='gloo'): torch.distributed.init_process_group failed: {error}"
                ) from error
        super().__init__(torch_dist.get_rank(), torch_dist.get_world_size(), timeout)
        if self.owns_group:  # gloo's threads must stop before interpreter teardown (SIGABRT)
            atexit.register(self.close)
        self._ops = {
            "sum": torch_dist.ReduceOp.SUM,
            "avg": torch_dist.ReduceOp.SUM,  # gloo has no AVG: sum, then divide
            "max": torch_dist.ReduceOp.MAX,
            "min": torch_dist.ReduceOp.MIN,
        }

    def _all_reduce(self, array: np.ndarray, op: str, timeout: float) -> None:
        work = self.dist.all_reduce(self._tensor(array), op=self._ops[op], async_op=True)
        self._wait("all_reduce", work, timeout)
        if op == "avg":
            array /= array.dtype.type(self.world_size)

    def _broadcast(self, array: np.ndarray, root: int, timeout: float) -> None:
        work = self.dist.broadcast(self._tensor(array), src=root, async_op=True)
        self._wait("broadcast", work, timeout)

    def _all_gather(self, array: np.ndarray, out: np.ndarray, timeout: float) -> None:
        parts = [self._tensor(out[index]) for index in range(self.world_size)]
        work = self.dist.all_gather(parts, self._tensor(array.copy()), async_op=True)
        self._wait("all_gather", work, timeout)

    def _reduce_scatter(self, array: np.ndarray, out: np.ndarray, op: str, timeout: float) -> None:
        """gloo has no reduce_scatter: all-reduce a copy and keep this rank's chunk."""
        reduced = array.copy()
        self._all_reduce(reduced, op, timeout)
        out[...] = np.split(reduced, self.world_size)[self.rank]

    def _barrier(self, timeout: float) -> None:
        self._wait("barrier", self.dist.barrier(async_op=True), timeout)

    def _tensor(self, array: np.ndarray) -> Any:
        try:
            return self.torch.from_numpy(array.reshape(array.shape or (1,)))
        except TypeError as error:
            raise DTypeError(f"gloo: torch cannot share arrays of dtype {array.dtype}") from error

    def _wait(self, op: str, work: Any, timeout: float) -> None:
        try:
            work.wait(_delta(timeout))
        except Exception as error:  # torch raises RuntimeError / DistBackendError
            text = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise self.fail(op, f"torch.distributed (gloo) reported: {text}") from error

    def close(self) -> None:
        if self.owns_group and self.dist.is_initialized():
            self.dist.destroy_process_group()
        super().close()


def _delta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


__all__ = ["GlooCommunicator"]

"""The process group: `init` picks a backend from how the job was launched, and the
collectives run on it.

One communicator per process (MPI, gloo), or per thread inside `run_local` (the local
backend binds each thread to its rank). Collectives work in place on C-contiguous numpy
arrays and raise `DistributedError` within `timeout` seconds (default 60, or
`LUMINAL_DISTRIBUTED_TIMEOUT`) when a peer fails or never arrives: never a hang.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import numpy as np

from luminal.distributed.backend import Communicator
from luminal.errors import DistributedError, LuminalError

BACKENDS = ("mpi", "gloo", "local")
DEFAULT_TIMEOUT = 60.0
# Variables that launchers set for each rank (MPICH/Intel MPI and Slurm's PMI, Open MPI,
# PMIx), and torchrun's.
MPI_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR")

_process: Communicator | None = None
_thread = threading.local()


def detect_backend(environ: Mapping[str, str] = os.environ) -> str:
    """The backend a launcher asks for: "gloo" under torchrun, "mpi" under mpiexec /
    srun (PMI, Open MPI or PMIx variables), otherwise "local" (a world of one)."""
    if all(name in environ for name in TORCHRUN_VARIABLES):
        return "gloo"
    if any(name in environ for name in MPI_RANK_VARIABLES):
        return "mpi"
    return "local"


def init(backend: str | None = None, *, timeout: float | None = None) -> Communicator:
    """Join the process group (once per process; a second call with the same backend
    returns the same group). `backend=None` detects it from the launcher's variables;
    "local" outside `run_local` is a world of one process. `timeout` is the default
    deadline of every collective, in seconds."""
    global _process
    bound = getattr(_thread, "communicator", None)
    if bound is not None:  # inside run_local: the thread already has its rank
        return bound
    backend = detect_backend() if backend is None else backend
    if backend not in BACKENDS:
        raise LuminalError(f"init: unknown backend {backend!r}; expected one of {BACKENDS}")
    if _process is not None:
        if _process.backend != backend:
            raise DistributedError(
                f"init: already initialised with backend {_process.backend!r}, "
                f"asked for {backend!r}; call shutdown() first"
            )
        return _process
    seconds = _default_timeout() if timeout is None else float(timeout)
    if not seconds > 0:
        raise LuminalError(f"init: timeout must be > 0 seconds, got {timeout}")
    _process = _create(backend, seconds)
    return _process


def _create(backend: str, timeout: float) -> Communicator:
    if backend == "mpi":
        from luminal.distributed.mpi import MPICommunicator

        return MPICommunicator(timeout)
    if backend == "gloo":
        from luminal.distributed.gloo import GlooCommunicator

        return GlooCommunicator(timeout)
    from luminal.distributed.local import LocalCommunicator, LocalGroup

    return LocalCommunicator(LocalGroup(1, timeout), 0)


def _default_timeout() -> float:
    text = os.environ.get("LUMINAL_DISTRIBUTED_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        return float(text)
    except ValueError:
        raise LuminalError(
            f"LUMINAL_DISTRIBUTED_TIMEOUT must be a number of seconds, got {text!r}"
        ) from None


def shutdown() -> None:
    """Leave the process group (torch's destroy_process_group); init may be called again."""
    global _process
    if _process is not None:
        _process.close()
        _process = None


def bind_thread(communicator: Communicator | None) -> None:
    """Make `communicator` this thread's group (the local backend's threads)."""
    _thread.communicator = communicator


def current() -> Communicator:
    """This thread's or process's communicator; DistributedError before `init`."""
    communicator = getattr(_thread, "communicator", None) or _process
    if communicator is None:
        raise DistributedError(
            "luminal.distributed is not initialised: call luminal.distributed.init() "
            "(launch with mpiexec -n N or torchrun --nproc-per-node N for several ranks)"
        )
    return communicator


def is_initialized() -> bool:
    return getattr(_thread, "communicator", None) is not None or _process is not None


def rank() -> int:
    """This rank, 0 .. world_size() - 1."""
    return current().rank


def world_size() -> int:
    return current().world_size


def backend() -> str:
    return current().backend


def all_reduce(array: np.ndarray, op: str = "sum", *, timeout: float | None = None) -> np.ndarray:
    """Reduce `array` over all ranks in place ("sum", "avg", "max", "min"); returns it.
    Every rank ends with the same bits."""
    return current().all_reduce(array, op, timeout)


def broadcast(array: np.ndarray, root: int = 0, *, timeout: float | None = None) -> np.ndarray:
    """Overwrite `array` on every rank with rank `root`'s, in place; returns it."""
    return current().broadcast(array, root, timeout)


def all_gather(array: np.ndarray, *, timeout: float | None = None) -> np.ndarray:
    """Every rank's `array` (same shape and dtype everywhere), stacked in rank order:
    a new array of shape (world_size, *array.shape)."""
    return current().all_gather(array, timeout)


def reduce_scatter(
    array: np.ndarray, op: str = "sum", *, timeout: float | None = None
) -> np.ndarray:
    """Reduce `array` over all ranks and return this rank's chunk of the result: its first
    dim split into world_size equal parts (a new array)."""
    return current().reduce_scatter(array, op, timeout)


def barrier(*, timeout: float | None = None) -> None:
    """Wait until every rank has called barrier."""
    current().barrier(timeout)


__all__ = [
    "BACKENDS",
    "DEFAULT_TIMEOUT",
    "all_gather",
    "all_reduce",
    "backend",
    "barrier",
    "bind_thread",
    "broadcast",
    "current",
    "detect_backend",
    "init",
    "is_initialized",
    "rank",
    "reduce_scatter",
    "shutdown",
    "world_size",
]

"""Several processes as one: collectives on numpy arrays over MPI, torch.distributed's
gloo, or threads (`local`), and the pieces of data-parallel training.

    import luminal.distributed as dist
    dist.init()                      # the backend follows the launcher (mpiexec, torchrun)
    dist.all_reduce(grads, op="avg") # in place, the same bits on every rank

See docs/distributed.md.
"""

from luminal.distributed.api import (
    BACKENDS,
    DEFAULT_TIMEOUT,
    all_gather,
    all_reduce,
    backend,
    barrier,
    broadcast,
    current,
    detect_backend,
    init,
    is_initialized,
    rank,
    reduce_scatter,
    shutdown,
    world_size,
)
from luminal.distributed.backend import Communicator
from luminal.distributed.local import run_local
from luminal.errors import DistributedError

__all__ = [
    "BACKENDS",
    "DEFAULT_TIMEOUT",
    "Communicator",
    "DistributedError",
    "all_gather",
    "all_reduce",
    "backend",
    "barrier",
    "broadcast",
    "current",
    "detect_backend",
    "init",
    "is_initialized",
    "rank",
    "reduce_scatter",
    "run_local",
    "shutdown",
    "world_size",
]

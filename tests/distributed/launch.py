"""Starting a 2-rank job from a test: mpiexec (from the MPICH wheel, next to the test's
Python in the virtual environment's bin folder, so no activated PATH is needed) or
torchrun, one OpenMP/BLAS thread per rank, killed if it outlives its timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        env.pop(name, None)  # the test process's own launcher, if any, is not the job's
    return env


def mpiexec(mode: str, folder: Path, timeout: float, ranks: int = 2, **env: str):
    """`mpiexec -n ranks python -m tests.distributed.worker mode folder`."""
    command = [str(BIN / "mpiexec"), "-launcher", "fork", "-n", str(ranks), sys.executable]
    return _run([*command, "-m", "tests.distributed.worker", mode, str(folder)], timeout, env)


def torchrun(mode: str, folder: Path, timeout: float, **env: str):
    command = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    return _run([*command, "-m", "tests.distributed.worker", mode, str(folder)], timeout, env)


def _run(command: list[str], timeout: float, extra: dict[str, str]):
    env = environment()
    env.update(extra)
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def results(folder: Path, ranks: int = 2) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(folder / f"rank{rank}.npz")) for rank in range(ranks)]

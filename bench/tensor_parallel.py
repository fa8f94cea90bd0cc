"""Tensor-parallel decode time per token with 1 and 2 MPI ranks, one thread each.

    .venv/bin/python bench/tensor_parallel.py [--steps N] [--repeats N] [--layers N]

Starts `mpiexec -n 1` and `mpiexec -n 2` (from the MPICH wheel next to this Python) on
itself. Each rank builds its shard of a small Llama of seeded random weights (hidden
1024, 16 heads / 8 key/value heads, MLP 2816, vocabulary 32000, `--layers` layers:
about 113 M parameters at 4 layers) with `luminal.models.tensor_parallel`, compiles a
decode session with lm.CPUCompiler(), runs an 8-token prompt and then times single-token
steps with the KV cache. With 1 rank the model has no collective at all (the plain
decoder). Reported: time per token (best of `--repeats` means over `--steps` steps,
rank 0), tokens/s, the 2-rank speed-up, and the share of the step spent in the
collectives (2 all-reduces per layer and the logits' all-gather: communication plus
waiting for the slower rank, timed on rank 0). bench/distributed.py prints the same
table after its training one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

CONFIG: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
PROMPT = np.arange(1, 9, dtype=np.int32)[None]


def worker(layers: int, steps: int, repeats: int) -> None:
    """One rank: build its shard, compile, time decode steps; rank 0 prints one JSON line."""
    import luminal as lm
    import luminal.distributed as dist
    from luminal.models import Llama
    from luminal.models.tensor_parallel import tensor_parallel_model

    communicator = dist.init()
    spent = _time_collectives(communicator)
    lm.nn.manual_seed(dist.rank())
    config = {**CONFIG, "num_hidden_layers": layers}
    model = tensor_parallel_model(Llama, lm.Graph(), config, communicator)
    session = model.session()
    start = time.perf_counter()
    logits = session.prefill(PROMPT)
    first = time.perf_counter() - start  # compile + prompt
    token = np.argmax(logits, -1)
    for _ in range(3):
        session.step(token)
    best, share = float("inf"), 0.0
    for _ in range(repeats):
        session.prefill(PROMPT)  # the same cache lengths in every repeat
        dist.barrier()
        spent[0] = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            session.step(token)
        seconds = (time.perf_counter() - start) / steps
        if seconds < best:
            best, share = seconds, spent[0] / steps / seconds
    if dist.rank() == 0:
        params = sum(int(np.prod(p.shape)) for p in model.parameters())
        row = {"ranks": dist.world_size(), "layers": layers, "token": best, "comm_share": share}
        print(json.dumps({**row, "first": first, "params_rank0": params}), flush=True)
    dist.barrier()
    dist.shutdown()


def _time_collectives(comm: Any) -> list[float]:
    """Make `comm.all_reduce` and `comm.all_gather` add their wall time to the returned
    one-element list."""
    spent = [0.0]
    for name in ("all_reduce", "all_gather"):
        original = getattr(comm, name)

        def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(comm, name, timed)
    return spent


def launch(ranks: int, layers: int, steps: int, repeats: int) -> dict:
    """Rank 0's row of `mpiexec -n ranks` running this file's worker."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    command = [str(mpiexec), "-launcher", "fork", "-n", str(ranks), sys.executable, __file__]
    command += ["--worker", "--layers", str(layers), "--steps", str(steps)]
    command += ["--repeats", str(repeats)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    job = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if job.returncode != 0:
        raise SystemExit(f"mpiexec -n {ranks} failed:\n{job.stdout}\n{job.stderr}")
    return next(json.loads(line) for line in job.stdout.splitlines() if line.startswith("{"))


def report(layers: int, steps: int, repeats: int) -> None:
    """Run 1 and 2 ranks and print the table."""
    one, two = (launch(n, layers, steps, repeats) for n in (1, 2))
    print(
        f"\nTensor-parallel decode, Llama hidden {CONFIG['hidden_size']}, {layers} layers, "
        f"vocab {CONFIG['vocab_size']} ({one['params_rank0'] / 1e6:.0f} M parameters; "
        f"{two['params_rank0'] / 1e6:.0f} M per rank with 2), 1 thread per rank"
    )
    print(f"{'ranks':>5}{'ms/token':>10}{'tokens/s':>10}{'speed-up':>10}{'comm':>7}")
    for row in (one, two):
        speedup = one["token"] / row["token"]
        print(
            f"{row['ranks']:>5}{row['token'] * 1e3:>10.2f}{1 / row['token']:>10.1f}"
            f"{speedup:>9.2f}x{row['comm_share']:>7.0%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.layers, args.steps, args.repeats)
        return
    report(args.layers, args.steps, args.repeats)


if __name__ == "__main__":
    main()

"""Data-parallel training throughput with 1 and 2 MPI ranks, one thread each.

    .venv/bin/python bench/distributed.py [--batch-per-rank N ...] [--steps N] [--repeats N]

Starts `mpiexec -n 1` and `mpiexec -n 2` (from the MPICH wheel next to this Python) on
itself. 1 rank runs the plain TrainStep; with 2, each rank runs `TrainStep(...,
data_parallel=True)` (SGD, momentum 0.9, compiled with lm.CPUCompiler()) for the MLP
784-512-512-10 and LeNet-5 of bench/training.py, with a fixed batch per rank (weak
scaling: the global batch grows with the ranks, as in DDP). Reported: step time (best
of `--repeats` means over `--steps` steps, rank 0), samples/s of the global batch, the
2-rank/1-rank throughput ratio, scaling efficiency (ratio / 2), and the share of the
step spent in the gradient all-reduce (communication plus waiting for the slower rank;
measured on rank 0 by timing the communicator). Then rank 0's CPU time per step by
phase (compute and optimizer segments, the all-reduce's own work, waiting for the
peer, the rest; "(ZeRO-1)" where each rank updates only its range of the parameters,
which the ranks share: MPI on one machine), steadier than wall time on a shared
machine, with the speed-up in CPU time and without the waiting; then strong scaling
where both b and 2b were measured.
Then bench/tensor_parallel.py's table: tensor-parallel decode time per token of a small
Llama with 1 and 2 ranks (`--no-tensor-parallel` skips it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rows import Row
from timing import Timer

MODELS = {"MLP 784-512-512-10": (784,), "LeNet-5 1x28x28": (1, 28, 28)}


def worker(batches: list[int], steps: int, repeats: int) -> None:
    """One rank: time every (model, batch) step; rank 0 prints one JSON line each."""
    import luminal.distributed as dist

    dist.init()
    clock = _time_all_reduce(dist.current())
    for name, shape in MODELS.items():
        for batch in batches:
            timings = measure(name, shape, batch, steps, repeats, clock)
            if dist.rank() == 0:
                row = {"model": name, "ranks": dist.world_size(), "batch": batch}
                print(json.dumps({**row, **timings}), flush=True)


class Clock:
    """Seconds spent in phases of the steps, wall and this process's CPU time."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def clear(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, adding its wall and CPU time to `phase`."""

        def run(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - wall
                self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - cpu

        return run


def _time_all_reduce(comm: Any) -> Clock:
    """A clock whose "comm" phase is the time spent in `comm.all_reduce` and the fences
    (ranks sharing memory: the gradient sum is in the optimizer's kernels, the step only
    fences), and "wait" the part of it spent polling (waiting for the peer, by MPI
    requests or the shared-memory fence counters), so comm - wait is the reduction's own
    work, or the fences' memory synchronization."""
    clock = Clock()
    for name in ("all_reduce", "fence_start", "fence_end"):  # fence() calls the two
        setattr(comm, name, clock.timed("comm", getattr(comm, name)))
    comm.poll = clock.timed("wait", comm.poll)
    return clock


def _time_segments(compiled: Any, clock: Clock) -> None:
    """Add each compiled C segment's time to "compute" (forward, backward) or, after
    the gradient bucket, "optimizer" (the 1-rank step is one segment: all "compute")."""
    phase = "compute"
    runners = []
    for runner in compiled.runners:
        if runner is None:
            phase = "optimizer"
            runners.append(None)
        else:
            runners.append(clock.timed(phase, runner))
    compiled.runners = runners


def measure(
    name: str, shape: tuple, batch: int, steps: int, repeats: int, clock: Clock
) -> dict[str, float]:
    """Best mean step time over `repeats` (wall), and that repeat's per-step phases: CPU
    time of the step, of the compute and optimizer segments, of the all-reduce, and the
    all-reduce's share of the step's wall time."""
    from training import luminal_lenet, luminal_mlp

    import luminal as lm
    import luminal.distributed as dist
    from luminal.training import SGD, TrainStep, losses

    makers = {"MLP 784-512-512-10": luminal_mlp, "LeNet-5 1x28x28": luminal_lenet}
    cx = lm.Graph()
    lm.nn.manual_seed(0)
    step = TrainStep.build(
        makers[name](cx),
        losses.cross_entropy,
        functools.partial(SGD, lr=0.01, momentum=0.9),
        ("batch", *shape),
        data_parallel=dist.world_size() > 1,  # 1 rank: the plain step, no bucket
    )
    _time_segments(step.graph.compiled, clock)
    rng = np.random.default_rng(0)
    world = dist.world_size()
    x = rng.standard_normal((batch * world, *shape)).astype(np.float32)
    y = rng.integers(0, 10, batch * world).astype(np.int32)
    for _ in range(steps):
        step(x, y)
    best: dict[str, float] = {"step": float("inf")}
    for _ in range(repeats):
        dist.barrier()
        clock.clear()
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(x, y)
        seconds = (time.perf_counter() - start) / steps
        if seconds < best["step"]:
            best = {
                "step": seconds,
                "cpu": (time.process_time() - cpu) / steps,
                "comm_share": clock.wall.get("comm", 0.0) / steps / seconds,
                **{f"{k}_cpu": v / steps for k, v in clock.cpu.items()},
            }
    best["sharded"] = step._shards is not None  # ZeRO-1: each rank updates 1/W of the params
    return best


def launch(ranks: int, args: argparse.Namespace) -> list[dict]:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    command = [str(mpiexec), "-launcher", "fork", "-n", str(ranks), sys.executable, __file__]
    command += ["--worker", "--steps", str(args.steps), "--repeats", str(args.repeats)]
    command += ["--batch-per-rank", *map(str, args.batch_per_rank)]
    # every thread pool at 1 per rank: the dashboard runs benches with MKL_NUM_THREADS=2,
    # and 2 ranks x 2 spinning MKL threads on 2 cores made the 2-rank step ~15x slower
    one = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {**os.environ, **dict.fromkeys(one, "1")}
    job = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if job.returncode != 0:
        raise SystemExit(f"mpiexec -n {ranks} failed:\n{job.stdout}\n{job.stderr}")
    return [json.loads(line) for line in job.stdout.splitlines() if line.startswith("{")]


def measured(args: argparse.Namespace) -> dict[tuple[str, int, int], dict]:
    """Rank 0's rows of `mpiexec -n 1` and `-n 2`, by (model, batch per rank, ranks)."""
    return {(r["model"], r["batch"], r["ranks"]): r for n in (1, 2) for r in launch(n, args)}


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: seconds per sample with 2 ranks against 1 rank (weak scaling,
    1 thread per rank; the worker keeps its own best-of-means timing, not `timer`)."""
    steps, repeats = (5, 2) if quick else (10, 3)
    args = argparse.Namespace(batch_per_rank=[64], steps=steps, repeats=repeats)
    results, rows = measured(args), []
    for name in MODELS:
        for batch in args.batch_per_rank:
            one, two = results[(name, batch, 1)], results[(name, batch, 2)]
            note = f"comm {two['comm_share']:.0%} of the 2-rank step; 1 thread per rank"
            case = f"{name} data-parallel, batch {batch}/rank, per sample"
            per_sample = two["step"] / (2 * batch), one["step"] / batch
            rows.append(
                Row("distributed", case, per_sample[0], "luminal 1 rank", per_sample[1], note)
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-per-rank", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-tensor-parallel", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.batch_per_rank, args.steps, args.repeats)
        return
    from mpi4py import MPI

    print(f"{MPI.Get_library_version().splitlines()[0]}; 1 thread per rank; {os.cpu_count()} cores")
    rows = measured(args)
    print(
        f"\n{'model':<22}{'batch/rank':>11}{'1 rank':>12}{'2 ranks':>12}"
        f"{'samples/s 1':>13}{'samples/s 2':>13}{'speed-up':>10}{'eff.':>7}{'comm':>7}"
    )
    for name in MODELS:
        for batch in args.batch_per_rank:
            one, two = rows[(name, batch, 1)], rows[(name, batch, 2)]
            rate_one, rate_two = batch / one["step"], 2 * batch / two["step"]
            speedup = rate_two / rate_one
            print(
                f"{name:<22}{batch:>11}{one['step'] * 1e3:>9.2f} ms{two['step'] * 1e3:>9.2f} ms"
                f"{rate_one:>13,.0f}{rate_two:>13,.0f}{speedup:>9.2f}x{speedup / 2:>7.0%}"
                f"{two['comm_share']:>7.0%}"
            )
    print_cpu_phases(rows, args.batch_per_rank)
    print_strong_scaling(rows, args.batch_per_rank)
    if not args.no_tensor_parallel:
        from tensor_parallel import report  # bench/tensor_parallel.py, beside this file

        report(layers=4, steps=20, repeats=3)


def print_cpu_phases(rows: dict[tuple[str, int, int], dict], batches: list[int]) -> None:
    """Rank 0's CPU time per step by phase. What 2 ranks add to a rank's own work
    ("compute" + "optimizer") is the all-reduce's work, the waiting for the peer (CPU
    time too: the wait polls) and the Python around the bucket ("other" also holds the
    step's Python that 1 rank has too); on a loaded machine CPU time is steadier than
    wall time. 1 rank's step is one C segment, so its optimizer is inside "compute".
    "w/o wait": the speed-up if the peer were never late (on a loaded machine it is
    late because it waits for a core; on free cores, by the ranks' noise only)."""
    names = ("compute", "optimizer", "reduce", "wait", "other", "total")
    print("\nCPU time per step on rank 0 (ms):")
    header = f"{'CPU speed-up':>14}{'w/o wait':>11}"
    print(f"{'':<48}" + "".join(f"{n:>10}" for n in names) + header)
    for name in MODELS:
        for batch in batches:
            for ranks in (1, 2):
                row = rows[(name, batch, ranks)]
                get = row.get
                reduce = get("comm_cpu", 0.0) - get("wait_cpu", 0.0)
                phases = [get("compute_cpu", 0.0), get("optimizer_cpu", 0.0), reduce]
                phases += [get("wait_cpu", 0.0), row["cpu"] - sum(phases) - get("wait_cpu", 0.0)]
                one = rows[(name, batch, 1)]["cpu"]
                busy = row["cpu"] - get("wait_cpu", 0.0)
                ratio = "" if ranks == 1 else f"{2 * one / row['cpu']:.2f}x"
                ratio += "" if ranks == 1 else f"{2 * one / busy:>10.2f}x"
                label = f"{name} b{batch} {ranks} rank{'s' if ranks > 1 else ''}"
                label += " (ZeRO-1)" if row.get("sharded") else ""
                print(
                    f"  {label:<46}"
                    + "".join(f"{v * 1e3:>10.3f}" for v in (*phases, row["cpu"]))
                    + f"{ratio:>25}"
                )


def print_strong_scaling(rows: dict[tuple[str, int, int], dict], batches: list[int]) -> None:
    """The same global batch on 1 and 2 ranks (1 rank at 2b against 2 ranks at b each),
    where the optimizer's update, repeated on every rank, is not halved."""
    pairs = [b for b in batches if 2 * b in batches]
    if not pairs:
        return
    print("\nStrong scaling (global batch 2b: 1 rank at 2b, 2 ranks at b each):")
    for name in MODELS:
        for batch in pairs:
            one, two = rows[(name, 2 * batch, 1)], rows[(name, batch, 2)]
            print(
                f"  {name:<22} 2b = {2 * batch:<4} wall {one['step'] / two['step']:.2f}x, "
                f"CPU time {one['cpu'] / two['cpu']:.2f}x"
            )


if __name__ == "__main__":
    main()

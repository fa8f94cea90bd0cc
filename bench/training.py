"""Training-step time of the CPU backend against PyTorch eager, with equal threads.

    .venv/bin/python bench/training.py [--threads N] [--rounds N] [--clock wall|cpu]

One training step = forward, cross-entropy loss, backward and an SGD (momentum 0.9)
update, at batch 64, for an MLP 784-512-512-10 and LeNet-5 on 1x28x28 (Conv2d(1,6,5,
padding=2), ReLU, MaxPool2d(2), Conv2d(6,16,5), ReLU, MaxPool2d(2), 400-120-84-10).
luminal runs `lm.training.TrainStep` (one compiled graph: forward, backward and update;
the Python call sets the batch, runs the graph, hands the new weights over and reads the
loss); PyTorch runs `zero_grad(); loss.backward(); opt.step()` eagerly. Both start from
the same weights, and the losses of the first steps are compared as a sanity check.
Forward-only (inference) times are printed for context. The MLP's step is also timed in
bfloat16 mixed precision (float32 master weights, bf16 forward and backward: luminal's
`mixed_precision="bf16"` against `torch.autocast("cpu", torch.bfloat16)`), and luminal's
bf16 step is set against its float32 step.

Timing (docs/benchmarks.md, "Training step"): both warmed up, then `--rounds` interleaved
rounds, the order reversed every other round, each round timing a batch of steps per
side; the time is the median over rounds, ratio = luminal / torch of the medians (below 1
is faster). The fastest and slowest rounds and the load average are printed: at 2 threads
on 2 cores, any other runnable process stalls both sides' OpenMP barriers, and a spread
of 2x or more between rounds says the machine was not quiet. `--clock cpu` times process
CPU time instead (with `--threads 1`: at 2 threads idle workers spin and are counted).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import time
from collections.abc import Callable

# luminal first: it puts its OpenMP settings (GOMP_SPINCOUNT) in the environment, and
# libgomp reads them once, when the first library that needs it loads. torch's libgomp
# then serves both sides with them, as in bench/run_all.py (which imports luminal before
# the bench); imported after torch, they were ignored on both sides.
import luminal as lm  # isort: skip
from luminal.backends.cpu import toolchain  # isort: skip

# isort: split
import numpy as np
import torch
import torch.nn as tnn
from rows import Row
from timing import Rounds, Timer

from luminal.search.cache import cpu_model
from luminal.training import SGD, TrainStep, losses

BATCH = 64
LR, MOMENTUM = 0.01, 0.9


def torch_mlp() -> tnn.Module:
    return tnn.Sequential(
        tnn.Flatten(), tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(),
        tnn.Linear(512, 10),
    )  # fmt: skip


def torch_lenet() -> tnn.Module:
    return tnn.Sequential(
        tnn.Conv2d(1, 6, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Conv2d(6, 16, 5), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
        tnn.Linear(400, 120), tnn.ReLU(), tnn.Linear(120, 84), tnn.ReLU(), tnn.Linear(84, 10),
    )  # fmt: skip


class Flatten(lm.nn.Module):
    """(N, ...) -> (N, features), like torch.nn.Flatten (no parameters)."""

    def __init__(self, graph: lm.Graph) -> None:
        super().__init__(graph)

    def forward(self, x: lm.GraphTensor) -> lm.GraphTensor:
        return x.flatten(1)


def luminal_mlp(cx: lm.Graph) -> lm.nn.Module:
    nn = lm.nn
    return nn.Sequential(
        cx, Flatten(cx), nn.Linear(cx, 784, 512), nn.ReLU(), nn.Linear(cx, 512, 512), nn.ReLU(),
        nn.Linear(cx, 512, 10),
    )  # fmt: skip


def luminal_lenet(cx: lm.Graph) -> lm.nn.Module:
    nn = lm.nn
    return nn.Sequential(
        cx, nn.Conv2d(cx, 1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(cx, 6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), Flatten(cx),
        nn.Linear(cx, 400, 120), nn.ReLU(), nn.Linear(cx, 120, 84), nn.ReLU(),
        nn.Linear(cx, 84, 10),
    )  # fmt: skip


def bench_model(
    name: str,
    make_torch: Callable[[], tnn.Module],
    make_luminal: Callable[[lm.Graph], lm.nn.Module],
    input_shape: tuple[int, ...],
    timer: Timer,
    precision: str | None = None,
) -> list[tuple[str, float, float]]:
    """Train step (and, in float32, forward) rows: (label, luminal s, torch s); with
    `precision` ("bf16") both sides train in that mixed precision."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, *input_shape)).astype(np.float32)
    y = rng.integers(0, 10, BATCH).astype(np.int32)
    torch.manual_seed(0)
    reference = make_torch()
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    # torch: eager training step
    model = make_torch()
    model.load_state_dict(reference.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    autocast = torch.autocast("cpu", torch.bfloat16, enabled=precision is not None)

    def torch_step() -> float:
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = tnn.functional.cross_entropy(model(tx).float(), ty)
        loss.backward()
        opt.step()
        return loss.item()

    def torch_forward() -> None:
        with torch.no_grad():
            reference(tx)

    # luminal: one compiled graph per training step, and a forward-only graph
    cx = lm.Graph()
    lm_model = make_luminal(cx)
    lm_model.load_state_dict(state)
    start = time.perf_counter()
    step = TrainStep.build(
        lm_model,
        losses.cross_entropy,
        functools.partial(SGD, lr=LR, momentum=MOMENTUM),
        ("batch", *input_shape),
        mixed_precision=precision,
    )
    compile_seconds = time.perf_counter() - start
    fx = lm.Graph()
    forward_model = make_luminal(fx)
    forward_model.load_state_dict(state)
    fin = fx.tensor((BATCH, *input_shape)).set(x)
    forward_model(fin).retrieve()
    fx.compile(lm.CPUCompiler())

    first = 3  # same weights, same batch: the first losses must agree
    ours = [step(x, y) for _ in range(first)]
    theirs = [torch_step() for _ in range(first)]
    loss_error = float(np.max(np.abs(np.subtract(ours, theirs))))

    train = timer.times({"luminal": lambda: step(x, y), "torch eager": torch_step})
    timed = [("train step", train)]
    if precision is None:
        timed.append(
            ("forward", timer.times({"luminal": fx.execute, "torch eager": torch_forward}))
        )
    name = f"{name} {precision}" if precision else name
    rows = [(f"{name} {what}", times["luminal"], times["torch eager"]) for what, times in timed]
    print(
        f"  {name}: compile {compile_seconds:.2f} s (kernel cache warm or cold), "
        f"|loss - torch loss| over the first {first} steps {loss_error:.1e}"
    )
    return rows


MLP = ("MLP 784-512-512-10", torch_mlp, luminal_mlp, (784,))
MODELS = (MLP, ("LeNet-5 1x28x28", torch_lenet, luminal_lenet, (1, 28, 28)))


def all_rows(timer: Timer) -> list[tuple[str, float, float]]:
    """Both models in float32, then the MLP's train step in bf16."""
    rows = [row for model in MODELS for row in bench_model(*model, timer)]
    return rows + bench_model(*MLP, timer, precision="bf16")


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: train step and forward of both models against torch eager."""
    return [
        Row("training", label, ours, "torch eager", theirs)
        for label, ours, theirs in all_rows(timer)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timed rounds")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time, for --threads 1 on a shared machine",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    toolchain.set_num_threads(args.threads)
    threads = toolchain.get_num_threads()
    print(
        f"machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores; threads: "
        f"torch {torch.get_num_threads()}, luminal OpenMP {threads.openmp} / BLAS "
        f"{threads.blas}; torch {torch.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}"
    )
    print(f"batch {BATCH}, SGD lr {LR} momentum {MOMENTUM}, cross-entropy; {args.clock} clock")
    print(f"load average at start: {os.getloadavg()[0]:.2f}\n")
    clock = time.process_time if args.clock == "cpu" else None
    timer = Rounds(args.rounds, batch_seconds=0.05, budget=30.0, alternate=True, clock=clock)
    rows = all_rows(timer)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(f"\n{'':<36}{'luminal':>12}{'torch eager':>14}{'ratio':>9}   rounds (min-max, ms)")
    for label, ours, theirs in rows:
        print(
            f"{label:<36}{ours * 1e3:>9.3f} ms{theirs * 1e3:>11.3f} ms{ours / theirs:>8.2f}x"
            f"   luminal {_spread(ours)}, torch {_spread(theirs)}"
        )
    step = {label: ours for label, ours, _ in rows}
    full, half = step[f"{MLP[0]} train step"], step[f"{MLP[0]} bf16 train step"]
    print(f"luminal MLP train step, bf16 / float32: {half / full:.2f}x")


def _spread(seconds: float) -> str:
    """The fastest and slowest round of a median that kept its samples."""
    samples = getattr(seconds, "samples", (seconds,))
    return f"{min(samples) * 1e3:.2f}-{max(samples) * 1e3:.2f}"


if __name__ == "__main__":
    main()

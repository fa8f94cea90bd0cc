"""Reference runtime against hand-written numpy doing the same work, in one run.

    .venv/bin/python bench/reference_runtime.py [--repeats N]

Prints absolute times and the ratio luminal / numpy (goal: within 3x on both).
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable

import numpy as np
from rows import Row
from timing import BestOf, Timer

import luminal as lm


def mlp_case(rng: np.random.Generator) -> tuple[Callable[[], object], Callable[[], object]]:
    sizes = [784, 512, 512, 10]
    weights = [
        rng.standard_normal((i, o)).astype(np.float32) * 0.05
        for i, o in zip(sizes, sizes[1:], strict=False)
    ]
    biases = [rng.standard_normal(o).astype(np.float32) * 0.05 for o in sizes[1:]]
    x_data = rng.standard_normal((64, 784)).astype(np.float32)

    cx = lm.Graph()
    x = cx.tensor((64, 784)).set(x_data)
    h = x
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = h @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b)
        if i < len(weights) - 1:
            h = h.relu()
    out = h.retrieve()

    def numpy_mlp() -> np.ndarray:
        a = x_data
        for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
            a = a @ w + b
            if i < len(weights) - 1:
                a = np.maximum(a, 0)
        return a

    cx.execute()
    np.testing.assert_allclose(out.numpy(), numpy_mlp(), rtol=1e-3, atol=1e-4)
    return cx.execute, numpy_mlp


def matmul_case(rng: np.random.Generator) -> tuple[Callable[[], object], Callable[[], object]]:
    n = 1024
    a_data = rng.standard_normal((n, n)).astype(np.float32)
    b_data = rng.standard_normal((n, n)).astype(np.float32)
    cx = lm.Graph()
    out = (cx.tensor((n, n)).set(a_data) @ cx.tensor((n, n)).set(b_data)).retrieve()
    cx.execute()
    np.testing.assert_allclose(out.numpy(), a_data @ b_data, rtol=1e-3, atol=1e-2)
    return cx.execute, lambda: a_data @ b_data


CASES = {"MLP 784-512-512-10, b=64": mlp_case, "matmul 1024^3": matmul_case}


def run(timer: Timer) -> list[Row]:
    """Print the table's rows; return them (luminal = the uncompiled reference runtime)."""
    rng = np.random.default_rng(0)
    rows = []
    for name, case in CASES.items():
        ours, theirs = case(rng)
        times = timer.times({"luminal": ours, "numpy": theirs})
        t_ours, t_theirs = times["luminal"], times["numpy"]
        print(f"{name:<28}{t_ours * 1e3:>12.3f}{t_theirs * 1e3:>12.3f}{t_ours / t_theirs:>7.2f}x")
        note = "reference runtime (no compile)"
        rows.append(Row("reference_runtime", name, t_ours, "numpy", t_theirs, note))
    return rows


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows."""
    return run(timer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"numpy {np.__version__}"
    )
    print(f"{'case':<28}{'luminal ms':>12}{'numpy ms':>12}{'ratio':>8}")
    run(BestOf(args.repeats))


if __name__ == "__main__":
    main()

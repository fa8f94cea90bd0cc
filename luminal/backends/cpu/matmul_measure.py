"""Compiling and timing generated matmuls outside a graph: what the schedule space was
tuned with, and the helpers its tests use (`reference_matmul` is the float64 oracle)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import numpy as np

from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import PRELUDE
from luminal.backends.cpu.matmul_codegen import render_matmul
from luminal.backends.cpu.matmul_schedule import MatmulSchedule
from luminal.errors import LuminalError
from luminal.schedule.epilogue import Epilogue

_ARGUMENT_TYPES = [ctypes.c_void_p] * 5


def build_matmuls(sources: Sequence[tuple[str, str]]) -> ctypes.CDLL:
    """Compile rendered kernels (`(name, render_matmul(name, ...))`) into one library."""
    library = toolchain.load(
        toolchain.build_shared([(name, PRELUDE + src) for name, src in sources])
    )
    for name, _ in sources:
        function = getattr(library, name)
        function.argtypes, function.restype = _ARGUMENT_TYPES, None
    return library


def bench_matmul_schedules(
    m: int,
    n: int,
    k: int,
    schedules: Sequence[MatmulSchedule],
    repeats: int = 7,
    *,
    a_trans: bool = False,
    b_trans: bool = False,
    epilogue: Epilogue | None = None,
    check: bool = True,
    seed: int = 0,
) -> list[tuple[MatmulSchedule, float]]:
    """Seconds per call of each schedule (min over `repeats` rounds; each round runs every
    candidate in turn, so load from other processes is spread over all of them). Uses the
    calling thread's OpenMP thread count (`toolchain.set_num_threads`). With `check`, each
    result is compared with numpy first and a wrong kernel raises LuminalError."""
    epilogue = epilogue or Epilogue()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if a_trans else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if b_trans else (k, n), dtype=np.float32)
    bias = rng.standard_normal(n if epilogue.bias == "row" else m, dtype=np.float32)
    residual = rng.standard_normal((m, n), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    lda, ldb = a.shape[1], b.shape[1]
    names = [f"lm_bench_mm_{i}" for i in range(len(schedules))]
    library = build_matmuls(
        [
            (name, render_matmul(name, m, n, k, a_trans, b_trans, lda, ldb, n, s, epilogue))
            for name, s in zip(names, schedules, strict=True)
        ]
    )
    arguments = [x.ctypes.data for x in (c, a, b, bias, residual)]
    functions = [getattr(library, name) for name in names]
    expected = reference_matmul(a, b, a_trans, b_trans, epilogue, bias, residual) if check else None
    for schedule, function in zip(schedules, functions, strict=True):
        function(*arguments)  # warm-up: page faults, thread pool start
        if expected is not None and not np.allclose(c, expected, rtol=1e-3, atol=1e-3 * k**0.5):
            raise LuminalError(f"matmul schedule {schedule.key()} computed a wrong result")
    best = [float("inf")] * len(schedules)
    for _ in range(repeats):
        for index, function in enumerate(functions):
            start = time.perf_counter()
            function(*arguments)
            best[index] = min(best[index], time.perf_counter() - start)
    return list(zip(schedules, best, strict=True))


def reference_matmul(
    a: np.ndarray,
    b: np.ndarray,
    a_trans: bool,
    b_trans: bool,
    epilogue: Epilogue,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """What a rendered kernel computes, in float64 numpy (for tests and checks)."""
    out = (a.T if a_trans else a).astype(np.float64) @ (b.T if b_trans else b).astype(np.float64)
    if epilogue.bias == "row":
        out = out + bias[None, :]
    elif epilogue.bias == "col":
        out = out + bias[:, None]
    if epilogue.residual:
        out = out + residual
    if epilogue.activation == "relu":
        out = np.maximum(out, 0.0)
    return out

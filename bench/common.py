"""What every benchmark shares: timing, equal threads, the machine line, copy bandwidth."""

from __future__ import annotations

import os
import platform

import numpy as np
from timing import best_of

import luminal as lm

__all__ = ["best_of", "equal_threads", "parallel_copy_seconds"]

COPY_KERNEL = """
void parallel_copy(float* out, const float* x, const long long* numel) {
    #pragma omp parallel for
    for (long long i = 0; i < numel[0]; i++) out[i] = x[i];
}
"""


def equal_threads(threads: int, libraries: str = "") -> None:
    """Give PyTorch and luminal (OpenMP and BLAS) the same thread count; print the machine."""
    import torch

    from luminal.backends.cpu import toolchain

    torch.set_num_threads(threads)
    toolchain.set_num_threads(threads)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, threads {threads}, "
        f"torch {torch.__version__}, numpy {np.__version__}{libraries}"
    )


def parallel_copy_seconds(x: np.ndarray, repeats: int) -> float:
    """Time of an all-threads copy of `x` (the machine's copy bandwidth: 2 * x.nbytes / t)."""
    cx = lm.Graph()
    out = lm.custom_kernel([cx.tensor(x.shape).set(x)], COPY_KERNEL, x.shape).retrieve()
    cx.compile(lm.CPUCompiler(verify=False))
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), x)
    return best_of(cx.execute, repeats)

"""What every benchmark shares: timing, equal threads, the machine line, copy bandwidth."""

from __future__ import annotations

import os
import platform
import time

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


READ_KERNEL = """
void parallel_read(int* out, const int* x, const long long* numel) {
    unsigned int total = 0;
    #pragma omp parallel for reduction(+:total)
    for (long long i = 0; i < numel[1]; i++) total += (unsigned int)x[i];
    out[0] = (int)total;
}
"""


def read_bandwidth(gigabytes: float = 1.0, repeats: int = 5) -> tuple[float, float]:
    """Bytes/s of an all-threads sum over a large array (read only), and bytes per
    CPU-second of it (all threads' CPU time: on a shared machine this moves less)."""
    x = np.ones(int(gigabytes * 2**30) // 4, np.int32)
    cx = lm.Graph()
    source = cx.tensor(x.shape, dtype="int32").set(x)
    out = lm.custom_kernel([source], READ_KERNEL, (1,), dtype="int32").retrieve()
    cx.compile(lm.CPUCompiler(verify=False))
    cx.execute()
    assert int(out.numpy()[0]) == x.size % 2**32
    wall, cpu = [], []
    for _ in range(repeats):
        start, used = time.perf_counter(), time.process_time()
        cx.execute()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - used)
    return x.nbytes / min(wall), x.nbytes / min(cpu)

"""Packed-weight matrix-vector kernels alone (decode's inner loop): GB/s of weights read
by one activation row times TinyLlama's 5632 x 2048 matrix, for Q8_0, Q4_0 and Q4_K and
each activation precision (16: the default two 8-bit levels, 8: llama.cpp's Q8, 32:
float), with the matrix in cache (the kernels' arithmetic speed) and streamed from
memory (copies of it filling 320 MB, in a memory-mapped file's 4 KiB pages as decode
reads a GGUF file), next to a plain sum over the same bytes; the share compares bytes
per CPU-second, which a loaded machine moves less than wall time. Every figure is the
median of `--repeats` runs, each the best of 10 calls, in one C loop (no Python per
call).

    .venv/bin/python bench/quant_kernels.py [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from luminal.backends.cpu.toolchain import CFLAGS
from luminal.quant import FORMATS, quantize
from luminal.quant.ops import SIXTEEN_BIT, format_source

N, K = 5632, 2048
TIMING = """
#include <omp.h>
#include <time.h>
static double lq_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* best[0], best[1]: wall and CPU seconds of the best of `calls` passes over `slices`
   matrices (n x k) */
void lq_bench(float* out, const float* x, const uint8_t* w, long long slices, int bits,
              int calls, double* best) {
    best[0] = best[1] = 1e30;
    for (int c = 0; c < calls; c++) {
        const double start = omp_get_wtime(), used = lq_cpu();
        for (long long s = 0; s < slices; s++)
            lq_matmul(out, x, w + s * N_ * ROW, 1, N_, K_, ROW, 8, bits, DOT, FDOT, DEQUANT);
        const double t = omp_get_wtime() - start, u = lq_cpu() - used;
        best[0] = t < best[0] ? t : best[0];
        best[1] = u < best[1] ? u : best[1];
    }
}

void lq_read(const uint8_t* w, long long bytes, int calls, double* best) {
    best[0] = best[1] = 1e30;
    for (int c = 0; c < calls; c++) {
        const double start = omp_get_wtime(), used = lq_cpu();
        long long total = 0;
#pragma omp parallel for reduction(+ : total)
        for (long long i = 0; i < bytes / 8; i++) total += ((const long long*)w)[i];
        const double t = omp_get_wtime() - start, u = lq_cpu() - used;
        best[0] = t < best[0] && total != 1 ? t : best[0];
        best[1] = u < best[1] ? u : best[1];
    }
}
"""


def library(kind: str, folder: Path) -> ctypes.CDLL:
    fmt = FORMATS[kind]
    defines = {
        "N_": N,
        "K_": K,
        "ROW": f"{fmt.row_bytes(K)}LL",
        "DOT": f"lq_dot_{kind}",
        "FDOT": f"lq_fdot_{kind}",
        "DEQUANT": f"lq_dequant_{kind}",
    }
    source = folder / f"{kind}.c"
    source.write_text(format_source(fmt) + TIMING)
    path = folder / f"{kind}.so"
    flags = [*CFLAGS, "-shared", *(f"-D{k}={v}" for k, v in defines.items())]
    subprocess.run(["gcc", *flags, str(source), "-o", str(path), "-lm"], check=True)
    return ctypes.CDLL(str(path))


def measure(lib: ctypes.CDLL, packed: np.ndarray, slices: int, bits: int) -> tuple[float, float]:
    """GB/s of weights and GB per CPU-second: `packed` holds `slices` copies of the
    matrix, one after another."""
    x = np.random.default_rng(1).standard_normal(K).astype(np.float32)
    out = np.empty(N, np.float32)
    best = np.empty(2)
    pointer = ctypes.c_void_p
    args = (out.ctypes.data_as(pointer), x.ctypes.data_as(pointer), packed.ctypes.data_as(pointer))
    lib.lq_bench(
        *args,
        ctypes.c_longlong(slices),
        ctypes.c_int(bits),
        ctypes.c_int(10),
        best.ctypes.data_as(pointer),
    )
    return packed.nbytes / best[0] / 1e9, packed.nbytes / best[1] / 1e9


def read(lib: ctypes.CDLL, packed: np.ndarray) -> tuple[float, float]:
    """GB/s and GB per CPU-second of a plain all-threads sum over `packed`."""
    best = np.empty(2)
    pointer = ctypes.c_void_p
    lib.lq_read(
        packed.ctypes.data_as(pointer),
        ctypes.c_longlong(packed.nbytes),
        ctypes.c_int(10),
        best.ctypes.data_as(pointer),
    )
    return packed.nbytes / best[0] / 1e9, packed.nbytes / best[1] / 1e9


def file_backed(array: np.ndarray, folder: Path) -> np.ndarray:
    """`array` as a read-only memory-mapped file: 4 KiB page-cache pages, as decode reads
    a GGUF file (numpy's own large arrays get transparent huge pages)."""
    path = folder / "streamed.bin"
    array.tofile(path)
    return np.memmap(path, dtype=array.dtype, mode="r", shape=array.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before libgomp starts its threads
    rng = np.random.default_rng(0)
    print(f"threads {args.threads}; medians of {args.repeats} runs, each the best of 10")
    print("memory: copies filling 320 MB in a memory-mapped file (4 KiB pages); share: the")
    print("matvec's GB per CPU-second over a plain read's of the same bytes (wall in brackets)")
    columns = ("format", "bits", "cache GB/s", "memory GB/s", "read GB/s", "share")
    print(" ".join(f"{c:>11}" for c in columns))
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("q8_0", "q4_0", "q4_k"):
            lib = library(kind, Path(folder))
            one = np.ascontiguousarray(quantize(rng.standard_normal((N, K), np.float32), kind))
            copies = max(1, (320 << 20) // one.nbytes)
            big = file_backed(np.tile(one.reshape(-1), copies), Path(folder))
            for bits in (16, 8, 32) if kind in SIXTEEN_BIT else (8, 32):
                cache, memory, plain = [], [], []
                for _ in range(args.repeats):
                    cache.append(measure(lib, one, 1, bits)[0])
                    memory.append(measure(lib, big, copies, bits))
                    plain.append(read(lib, big))
                c = statistics.median(cache)
                m, r = (statistics.median(v[0] for v in values) for values in (memory, plain))
                share = statistics.median(a[1] / b[1] for a, b in zip(memory, plain, strict=True))
                wall = statistics.median(a[0] / b[0] for a, b in zip(memory, plain, strict=True))
                print(
                    f"{kind:>11} {bits:>11} {c:11.1f} {m:11.1f} {r:11.1f} {share:5.0%} ({wall:.0%})"
                )
            del big


if __name__ == "__main__":
    main()

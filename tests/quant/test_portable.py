"""The kernels' fallbacks: built for plain x86-64 (scalar loops), for AVX2 without
AVX-512 (maddubs integer dots), for AVX-512 without VNNI and for this CPU (the integer
prefill tiles where it has VNNI), every format, activation precision and path agrees
with the reference."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from luminal.quant import FORMATS, dequantize, quantize
from luminal.quant.ops import SIXTEEN_BIT, TILED, format_source
from luminal.quant.reference import QuantMatmul

N, K = 12, 768


@pytest.mark.parametrize("arch", ["x86-64", "haswell", "skylake-avx512", "native"])
def test_fallback_kernels_match_the_reference(tmp_path: Path, arch: str) -> None:
    rng = np.random.default_rng(1)
    for kind, fmt in FORMATS.items():
        repack = f"lq_repack_{kind}" if kind in TILED else "NULL"
        entry = (
            "void run(float* o, const float* x, const unsigned char* w, long long m, int bits) {"
            f" lq_matmul(o, x, w, m, {N}, {K}, {fmt.row_bytes(K)}, 8, bits, lq_dot_{kind},"
            f" lq_fdot_{kind}, lq_dequant_{kind}, {repack}); }}"
        )
        source = tmp_path / f"{kind}.c"
        source.write_text(format_source(fmt) + "\n" + entry)
        library = tmp_path / f"{kind}.so"
        flags = ["-O2", f"-march={arch}", "-fopenmp", "-shared", "-fPIC", "-Werror", "-Wall"]
        subprocess.run(["gcc", *flags, str(source), "-o", str(library), "-lm"], check=True)
        run = ctypes.CDLL(str(library)).run
        packed = quantize(rng.standard_normal((N, K)).astype(np.float32), kind)
        scale_weights = np.abs(dequantize(packed, kind, (N, K))).T
        for rows in (1, 3, 9):
            for bits in (8, 16, 32) if kind in SIXTEEN_BIT else (8, 32):
                x = rng.standard_normal((rows, K)).astype(np.float32)
                out = np.zeros((rows, N), np.float32)
                pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in (out, x, packed)]
                run(*pointers, ctypes.c_longlong(rows), ctypes.c_int(bits))
                prefill_bits = 8 if bits == 8 and kind in TILED else 32
                reference = QuantMatmul(kind, N, K, bits, 8, prefill_bits)(x, packed)
                assert np.all(np.abs(out - reference) <= 1e-6 * (np.abs(x) @ scale_weights))

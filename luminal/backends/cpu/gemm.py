"""luminal's float32 matrix product (`gemm.c`), one translation unit linked into every
compiled graph's library, so it compiles once per machine (the object cache) instead of
once per sgemm kernel. Kernels call `lm_sgemm` (declared by `PROTOTYPE`); it multiplies
in its own packed, register-blocked kernel or calls the BLAS (see `gemm.c`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

PROTOTYPE = (
    "void lm_sgemm(int, int, long long, long long, long long, const float*, long long, "
    "const float*, long long, float*, long long, long long, long long);\n"
    "long long lm_sgemm_gather(int, long long, long long, long long, const float*, long long, "
    "const float*, const long long*, float*, long long, long long, long long);"
)

# the variants that apply an epilogue as C is stored (a fused consumer's bias per row or
# column of C, residual, activation and its scale), which only kernels fusing one call
# (`sgemm_epilogue.py`)
EPILOGUE_PROTOTYPE = (
    "void lm_sgemm_ep(int, int, long long, long long, long long, const float*, long long, "
    "const float*, long long, float*, long long, long long, long long, const float*, "
    "const float*, const float*, int, float);\n"
    "long long lm_sgemm_gather_ep(int, long long, long long, long long, const float*, "
    "long long, const float*, const long long*, float*, long long, long long, long long, "
    "const float*, const float*, const float*, int, float);"
)


@cache
def tile_source() -> str:
    """gemm_tile.c: the register tile (static functions only), which the product and the
    fused Winograd convolution (`winograd.py`) each compile into their own unit."""
    return (Path(__file__).parent / "gemm_tile.c").read_text()


@cache
def _source() -> str:
    return (Path(__file__).parent / "gemm.c").read_text()


def support_unit(blas_sgemm: str) -> tuple[str, str]:
    """The (name, C source) unit defining `lm_sgemm`, calling `blas_sgemm` (the BLAS's
    cblas_sgemm symbol) for the products it leaves to the BLAS."""
    return "lm_gemm", f"#define LM_BLAS_SGEMM {blas_sgemm}\n{tile_source()}\n{_source()}"

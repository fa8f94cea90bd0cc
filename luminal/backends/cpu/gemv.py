"""Matrix products with a few rows (`gemv.c`): the decode path of a linear layer.

A decoder's projections are `x @ W.T` with M = batch * seq rows, symbolic, so one kernel
serves the prompt (M = 32) and every decoded token (M = 1). Their sgemm kernels call
`lm_sgemm_rows` (declared by `PROTOTYPE`), which streams W across all threads when M is
at most 4 and hands anything else to `lm_sgemm`. One translation unit, linked into every
library that links the BLAS, beside `gemm.c`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from luminal.shape.expr import Expr

NAME = "lm_sgemm_rows"
PROTOTYPE = (
    "void lm_sgemm_rows(int, int, long long, long long, long long, const float*, long long, "
    "const float*, long long, float*, long long, long long, long long);\n"
)
# its variant with a fused reader (`sgemm_epilogue.py`): lm_sgemm_ep's epilogue arguments
EPILOGUE_PROTOTYPE = (
    "void lm_sgemm_rows_ep(int, int, long long, long long, long long, const float*, "
    "long long, const float*, long long, float*, long long, long long, long long, "
    "const float*, const float*, const float*, int, float);"
)
MAX_ROWS = 4  # LM_GEMV_ROWS of gemv.c
NO_TRANS, TRANS = 111, 112


@cache
def _source() -> str:
    return (Path(__file__).parent / "gemv.c").read_text()


def support_unit() -> tuple[str, str]:
    """The (name, C source) unit defining `lm_sgemm_rows`."""
    return "lm_gemv", _source()


MIN_WEIGHTS = 16384  # a static product with fewer B elements stays with lm_sgemm


def takes_rows_path(
    trans_a: int, trans_b: int, rows: Expr, cols: Expr, depth: Expr, blocked: bool
) -> bool:
    """Whether an sgemm call may take the few-rows path at run time: A as stored, B
    transposed (W in (out, in) layout), C's columns in one block, and M symbolic (a
    decoder's batch * seq) or at most MAX_ROWS with a B of at least MIN_WEIGHTS."""
    if trans_a != NO_TRANS or trans_b != TRANS or blocked:
        return False
    m, weights = rows.as_int(), (cols * depth).as_int()
    return m is None or (m <= MAX_ROWS and (weights is None or weights >= MIN_WEIGHTS))

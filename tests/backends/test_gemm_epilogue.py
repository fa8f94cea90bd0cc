"""lm_sgemm_ep (gemm.c): the product with its consumer fused into the store (bias per row
or per column of C, a residual matrix, ReLU or GELU-erf times a scale) against numpy and
torch, through every path of the
product: the packed kernel (full and edge tiles, K over several blocks, C's columns in
blocks as a convolution of several images writes them), the BLAS for small products, the
split-K path, and K = 0, on one and two threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from luminal.schedule.activation_probe import gelu_erf
from tests.backends.gemm_calls import NO_TRANS, TRANS, epilogue_function

RELU, GELU = 1, 2


@pytest.fixture(scope="module")
def sgemm_ep():  # noqa: ANN201
    return epilogue_function()


def _pointer(x: np.ndarray | None) -> int | None:
    return None if x is None else x.ctypes.data


def fused(sgemm_ep, a, b, tb, row_bias, col_bias, residual, act, blocks=1, scale=1.0):  # noqa: ANN001, ANN201
    """act(a @ op(b) + row_bias[:, None] + col_bias + residual) * scale through lm_sgemm_ep, C
    (and the residual, in C's layout) with its columns in `blocks` blocks, one after
    another in memory as images are: (block, row, column) with a spare column per row
    that must stay untouched."""
    m, k = a.shape
    n = b.shape[0] if tb == TRANS else b.shape[1]
    width = n // blocks
    c = np.full((blocks, m, width + 1), 7.0, np.float32)
    res = None
    if residual is not None:
        res = np.zeros_like(c)
        res[:, :, :width] = residual.reshape(m, blocks, width).transpose(1, 0, 2)
    ldc, stride = width + 1, m * (width + 1)
    args = (a.ctypes.data, k, b.ctypes.data, b.shape[1], c.ctypes.data, ldc, width, stride)
    pointers = (_pointer(row_bias), _pointer(col_bias), _pointer(res))
    sgemm_ep(NO_TRANS, tb, m, n, k, *args, *pointers, act, scale)
    assert (c[:, :, width] == 7.0).all()
    return c[:, :, :width].transpose(1, 0, 2).reshape(m, n)


def expected(a, b, tb, row_bias, col_bias, residual, act, scale=1.0):  # noqa: ANN001, ANN201
    value = a.astype(np.float64) @ (b.T if tb == TRANS else b).astype(np.float64)
    if row_bias is not None:
        value = value + row_bias[:, None]
    if col_bias is not None:
        value = value + col_bias
    if residual is not None:
        value = value + residual
    if act == GELU:
        return gelu_erf(value.astype(np.float32), scale)
    return np.maximum(value, 0) if act == RELU else value


# the BLAS (5 x 7 x 3), the packed kernel with edge tiles (17 x 97 x 300, 64 x 200 x 129),
# K in two blocks (40 x 49 x 600), split K on two threads (5 x 7 x 5000), more rows than
# columns with K in three blocks (each row panel through all of K, a partial last row
# panel, the last column tile two whole vectors wide), the last column tile one whole
# vector wide (37 x 112 x 50)
SHAPES = [
    (5, 7, 3),
    (17, 97, 300),
    (64, 200, 129),
    (40, 48, 600),
    (5, 7, 5000),
    (203, 128, 1000),
    (37, 112, 50),
]
KINDS = ["row", "col", "residual", "relu", "gelu", "all"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("count", [1, 2])
def test_epilogue_equals_numpy(sgemm_ep, threads, rng, shape, kind, count) -> None:  # noqa: ANN001
    threads(count)
    m, n, k = shape
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    row_bias = f(m) if kind in ("row", "all") else None
    col_bias = f(n) if kind in ("col", "all") else None
    residual = f(m, n) if kind in ("residual", "all") else None
    act = {"relu": RELU, "all": RELU, "gelu": GELU}.get(kind, 0)
    a = f(m, k)
    for tb in (NO_TRANS, TRANS):
        b = f(n, k) if tb == TRANS else f(k, n)
        got = fused(sgemm_ep, a, b, tb, row_bias, col_bias, residual, act)
        want = expected(a, b, tb, row_bias, col_bias, residual, act)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{kind} {tb}")


@pytest.mark.parametrize("blocks", [2, 3])
def test_epilogue_on_column_blocks(sgemm_ep, threads, rng, blocks) -> None:  # noqa: ANN001
    """C's columns in blocks (a convolution of several images: rows the channels): the
    row bias is per channel, the residual in C's layout, block widths not a tile's."""
    threads(2)
    m, k, n = 24, 70, 130 * blocks
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    a, b, row_bias, residual = f(m, k), f(k, n), f(m), f(m, n)
    got = fused(sgemm_ep, a, b, NO_TRANS, row_bias, None, residual, RELU, blocks)
    want = expected(a, b, NO_TRANS, row_bias, None, residual, RELU)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_relu_keeps_nan_and_k_zero_gets_the_epilogue(sgemm_ep, rng) -> None:  # noqa: ANN001
    m, n, k = 16, 96, 64
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    a[3, 5] = np.nan
    got = fused(sgemm_ep, a, b, NO_TRANS, None, None, None, RELU)
    assert np.isnan(got[3]).all() and not np.isnan(np.delete(got, 3, axis=0)).any()
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    empty = np.zeros((m, 0), np.float32)
    got = fused(sgemm_ep, empty, np.zeros((0, n), np.float32), NO_TRANS, None, bias, None, RELU)
    np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(bias, 0), (m, n)))


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_gelu_matches_torch_and_keeps_its_edges(sgemm_ep, threads, rng, scale) -> None:  # noqa: ANN001
    """GELU-erf (times `scale`: an ONNX export's GELU can leave its 1/2 to a later op) over
    pre-activations from -8 to 8 against torch's exact GELU, and the edges as the graph's
    formula has them: huge values saturate, NaN stays NaN."""
    threads(1)
    m, n, k = 16, 96, 64
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    residual = np.linspace(-8, 8, m * n, dtype=np.float32).reshape(m, n)
    residual[0, :3] = [np.nan, 1e30, -1e30]
    got = fused(sgemm_ep, a, b, NO_TRANS, None, None, residual, GELU, scale=scale)
    value = torch.from_numpy((a.astype(np.float64) @ b + residual).astype(np.float32))
    want = torch.nn.functional.gelu(value).numpy() * scale
    assert np.isnan(got[0, 0]) and got[0, 1] == 1e30 * scale and got[0, 2] == 0
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-5, atol=1e-5)

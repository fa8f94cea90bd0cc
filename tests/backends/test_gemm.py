"""luminal's float32 product `lm_sgemm` (gemm.c), called directly against numpy: every
transpose pair, edge tiles in each dimension, K across several packed blocks, a leading
dimension wider than the row, K = 0, NaN, the BLAS path for small products and the
split-K path for a small output with a long K, on one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backends.gemm_calls import (
    NO_TRANS,
    TRANS,
    gather_function,
)


def product(sgemm, a: np.ndarray, b: np.ndarray, ta: int, tb: int, pad: int = 0):  # noqa: ANN001
    """op(a) @ op(b) through lm_sgemm into a matrix with `pad` extra columns (filled with
    7, which must stay untouched)."""
    m, k = (a.shape[1], a.shape[0]) if ta == TRANS else a.shape
    n = b.shape[0] if tb == TRANS else b.shape[1]
    c = np.full((m, n + pad), 7.0, np.float32)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    pointers = (a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], c.ctypes.data, n + pad)
    sgemm(ta, tb, m, n, k, *pointers, n, 0)
    assert (c[:, n:] == 7.0).all()
    return c[:, :n]


def reference(a: np.ndarray, b: np.ndarray, ta: int, tb: int) -> np.ndarray:
    a = a.T if ta == TRANS else a
    b = b.T if tb == TRANS else b
    return a.astype(np.float64) @ b.astype(np.float64)


# (m, n, k): edge tiles along each dim; K over two blocks (600: two of 300); the first
def _check_every_transpose_pair(sgemm, rng, m: int, n: int, k: int) -> None:  # noqa: ANN001
    """An m x n x k product with A and B each stored as is or transposed, vs numpy."""
    for ta in (NO_TRANS, TRANS):
        for tb in (NO_TRANS, TRANS):
            a = rng.uniform(-1, 1, (k, m) if ta == TRANS else (m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (n, k) if tb == TRANS else (k, n)).astype(np.float32)
            got = product(sgemm, a, b, ta, tb, pad=3)
            np.testing.assert_allclose(got, reference(a, b, ta, tb), rtol=1e-4, atol=1e-4)


# two are below the packed kernel's threshold (BLAS), 5 x 7 x 5000 splits K; 203 x 125 x
# 1000 (more rows than columns, K in three blocks) walks each row panel through all of K;
# the last column tiles one vector wide (97, 200, 49: partial; 112: whole) or two (125:
# partial; 128: whole)
SHAPES = [
    (5, 7, 3),
    (9, 50, 40),
    (17, 97, 300),
    (64, 200, 129),
    (40, 49, 600),
    (5, 7, 5000),
    (203, 125, 1000),
    (37, 112, 50),
    (65, 128, 64),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("count", [1, 2])
def test_products_equal_numpy(sgemm, threads, rng, shape, count) -> None:  # noqa: ANN001
    threads(count)
    _check_every_transpose_pair(sgemm, rng, *shape)


@pytest.mark.parametrize("shape", [(16, 150, 4500), (9, 49, 4099), (4, 1000, 4096)])
def test_split_k_slices_that_fill_the_tiles(sgemm, threads, rng, shape) -> None:  # noqa: ANN001
    """Two threads, a small output and a long K: each thread's K slice runs in the packed
    kernel when it fills the register tiles (LeNet conv2's weight gradient is 16 x 150
    over 6400), the slices' products then added; every transpose pair, odd K."""
    threads(2)
    _check_every_transpose_pair(sgemm, rng, *shape)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(("m", "k"), [(203, 1000), (64, 384), (13, 769)])
def test_rows_of_a_read_in_place(sgemm, threads, rng, count: int, m: int, k: int) -> None:  # noqa: ANN001
    """A (not transposed) is read where it lies, rows `lda` apart with lda wider than K,
    its last partial row panel packed; K in equal blocks (1000: 334 + 334 + 332, 769:
    257 + 257 + 255), C's later blocks added to the first."""
    threads(count)
    a_wide = rng.uniform(-1, 1, (m, k + 5)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, 100)).astype(np.float32)
    c = np.full((m, 100), 7.0, np.float32)
    sgemm(NO_TRANS, NO_TRANS, m, 100, k, a_wide.ctypes.data, k + 5, b.ctypes.data, 100,
          c.ctypes.data, 100, 100, 0)  # fmt: skip
    expected = a_wide[:, :k].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


def test_empty_k_writes_zeros(sgemm) -> None:  # noqa: ANN001
    a, b = np.zeros((40, 0), np.float32), np.zeros((0, 60), np.float32)
    assert (product(sgemm, a, b, NO_TRANS, NO_TRANS, pad=2) == 0).all()


def test_nan_reaches_its_row_only(sgemm, rng) -> None:  # noqa: ANN001
    a = rng.uniform(-1, 1, (48, 100)).astype(np.float32)
    b = rng.uniform(-1, 1, (100, 96)).astype(np.float32)
    a[3, 50] = np.nan
    got = product(sgemm, a, b, NO_TRANS, NO_TRANS)
    assert np.isnan(got[3]).all() and not np.isnan(np.delete(got, 3, axis=0)).any()


@pytest.mark.parametrize(
    "shape", [(5, 3, 7, 9), (40, 4, 49, 300), (64, 3, 100, 64), (200, 2, 40, 500)]
)
def test_columns_in_blocks(sgemm, rng, shape) -> None:  # noqa: ANN001
    """C's columns (image, position) written as (image, row, position): blocks of
    `width` columns, `stride` apart (a convolution of several images); BLAS (the first
    shape) and the packed kernel, tiles inside a block and across blocks (the last: more
    rows than columns and two K blocks, each row panel through all of K; its last tile
    two vectors wide, inside the second block)."""
    m, images, width, k = shape
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, images * width)).astype(np.float32)
    c = np.full((images, m, width + 1), 7.0, np.float32)
    row, stride = width + 1, m * (width + 1)
    n = images * width
    sgemm(
        NO_TRANS,
        NO_TRANS,
        m,
        n,
        k,
        a.ctypes.data,
        k,
        b.ctypes.data,
        n,
        c.ctypes.data,
        row,
        width,
        stride,
    )
    expected = (a.astype(np.float64) @ b).reshape(m, images, width).transpose(1, 0, 2)
    np.testing.assert_allclose(c[:, :, :width], expected, rtol=1e-4, atol=1e-4)
    assert (c[:, :, width] == 7.0).all()


@pytest.mark.parametrize(
    ("images", "channels", "size", "out", "stride"), [(3, 5, 9, 16, 1), (2, 8, 20, 12, 2)]
)
def test_gathered_columns_equal_im2col(sgemm, rng, images, channels, size, out, stride) -> None:  # noqa: ANN001
    """lm_sgemm_gather: a 3x3 convolution's columns read from the padded input through
    the (size, stride) axes table (stride 1: runs along image rows copied whole; stride
    2: element by element), output written as (image, channel, position)."""
    gather = gather_function()
    padded = size + 2
    side = (padded - 3) // stride + 1
    positions, taps = side * side, channels * 9
    x = rng.uniform(-1, 1, (images, channels, padded, padded)).astype(np.float32)
    w = rng.uniform(-1, 1, (out, taps)).astype(np.float32)
    table = [3, channels, padded * padded, 3, padded, 3, 1]
    table += [3, images, channels * padded * padded, side, padded * stride, side, stride]
    axes = np.array(table, np.int64)
    c = np.zeros((images, out, positions), np.float32)
    n = images * positions
    args = (w.ctypes.data, taps, x.ctypes.data, axes.ctypes.data, c.ctypes.data)
    assert gather(NO_TRANS, out, n, taps, *args, positions, positions, out * positions) == 0
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    columns = windows[:, :, ::stride, ::stride].transpose(1, 4, 5, 0, 2, 3).reshape(taps, n)
    expected = (w.astype(np.float64) @ columns).reshape(out, images, positions).transpose(1, 0, 2)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)

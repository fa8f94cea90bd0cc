"""lm_sgemm_gather (gemm.c) packing its columns straight from a convolution's padded
input, against numpy's im2col product: strided convolutions whose output rows are runs of
columns 2 apart (stride 2, packed as even elements of vector pairs) of every length
around the vector width and the 48-column panel, and other strides (element by element)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from luminal.backends.cpu import toolchain
from tests.backends.gemm_calls import I64, NO_TRANS, gather_function


@pytest.fixture(scope="module")
def gather():  # noqa: ANN201 - a ctypes function
    return gather_function()


def convolve(gather, x: np.ndarray, w: np.ndarray, size: int, stride: int) -> np.ndarray:  # noqa: ANN001
    """(images, out, positions) of a size x size convolution of the padded input `x`
    (images, channels, height, width) through lm_sgemm_gather's (size, stride) table."""
    images, channels, height, width = x.shape
    rows, cols = (height - size) // stride + 1, (width - size) // stride + 1
    out, taps, positions = w.shape[0], channels * size * size, rows * cols
    table = [3, channels, height * width, size, width, size, 1]
    table += [3, images, channels * height * width, rows, width * stride, cols, stride]
    axes = np.array(table, np.int64)
    c = np.zeros((images, out, positions), np.float32)
    n = images * positions
    args = (w.ctypes.data, taps, x.ctypes.data, axes.ctypes.data, c.ctypes.data)
    assert gather(NO_TRANS, out, n, taps, *args, positions, positions, out * positions) == 0
    return c


def im2col(x: np.ndarray, w: np.ndarray, size: int, stride: int) -> np.ndarray:
    images, out = x.shape[0], w.shape[0]
    windows = np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    positions = windows.shape[2] * windows.shape[3]
    columns = windows.transpose(1, 4, 5, 0, 2, 3).reshape(w.shape[1], images * positions)
    product = w.astype(np.float64) @ columns.astype(np.float64)
    return product.reshape(out, images, positions).transpose(1, 0, 2)


# output widths at stride 2: shorter than half a vector, half a vector and more, one
# vector +- 1, between one and two (28: ResNet-18's 56 -> 28), the 48-column panel +- 1,
# and rows that several panels split
@pytest.mark.parametrize("side", [5, 8, 12, 15, 16, 17, 28, 31, 47, 48, 49, 70])
def test_stride_two_rows_of_every_length(gather, rng, side) -> None:  # noqa: ANN001
    padded = 2 * side + 1  # a 3x3 window at stride 2: the last column is the last element
    x = rng.uniform(-1, 1, (2, 3, padded, padded)).astype(np.float32)
    w = rng.uniform(-1, 1, (9, 27)).astype(np.float32)
    np.testing.assert_allclose(convolve(gather, x, w, 3, 2), im2col(x, w, 3, 2), atol=1e-4)


# output widths at stride 1 whose runs in a 48-column panel are copied whole: runs of 1-3,
# 4-7, 8-15 and 16 or more elements, whole rows and rows that panels split
@pytest.mark.parametrize("side", [8, 9, 12, 14, 20, 28, 56])
def test_stride_one_rows_of_every_length(gather, rng, side) -> None:  # noqa: ANN001
    padded = side + 2  # a 3x3 window at stride 1: the last column is the last element
    x = rng.uniform(-1, 1, (2, 3, padded, padded)).astype(np.float32)
    w = rng.uniform(-1, 1, (9, 27)).astype(np.float32)
    np.testing.assert_allclose(convolve(gather, x, w, 3, 1), im2col(x, w, 3, 1), atol=1e-4)


@pytest.mark.parametrize(("shape", "stride"), [((1, 64, 9, 9), 1), ((2, 50, 11, 11), 2)])
@pytest.mark.parametrize("count", [1, 2])
def test_more_rows_than_columns_through_all_of_k(
    gather, threads, rng, shape, stride, count
) -> None:  # noqa: ANN001
    """203 output channels over 49 or 50 columns, K (576, 450) in two blocks: each task
    packs its gathered panels for all of K and walks each row panel (the last of 3 rows)
    through every K block (lm_whole_k_task)."""
    threads(count)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, (203, shape[1] * 9)).astype(np.float32)
    expected = im2col(x, w, 3, stride)
    np.testing.assert_allclose(convolve(gather, x, w, 3, stride), expected, atol=1e-4)


@pytest.mark.parametrize(("size", "stride"), [(7, 2), (3, 3), (1, 2), (2, 2)])
def test_other_windows_and_strides(gather, rng, size, stride) -> None:  # noqa: ANN001
    """A 7x7/2 stem, stride 3 (columns 3 apart: element by element), a 1x1/2 shortcut,
    2x2/2 (runs of 2 apart that end at the input's last element)."""
    x = rng.uniform(-1, 1, (1, 3, 37, 41)).astype(np.float32)
    w = rng.uniform(-1, 1, (16, 3 * size * size)).astype(np.float32)
    expected = im2col(x, w, size, stride)
    np.testing.assert_allclose(convolve(gather, x, w, size, stride), expected, atol=1e-4)


def test_nan_stays_in_its_columns(gather, rng) -> None:  # noqa: ANN001
    """A NaN in the input reaches exactly the outputs whose windows hold it (no lanes
    mixed up by the even-element shuffles)."""
    x = rng.uniform(-1, 1, (1, 2, 65, 65)).astype(np.float32)
    x[0, 1, 20, 31] = np.nan
    w = rng.uniform(-1, 1, (8, 18)).astype(np.float32)
    got, expected = convolve(gather, x, w, 3, 2), im2col(x, w, 3, 2)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize("out", [8, 16, 32, 40])
def test_few_rows_read_in_place(gather, rng, out) -> None:  # noqa: ANN001
    """Up to 4 row panels (32 output channels) a panel of 48 consecutive columns (inside
    one output row of 70) is read where it lies instead of packed; the panels that cross
    a row, the last partial one, and 40 channels (packed) alike."""
    x = rng.uniform(-1, 1, (2, 5, 72, 72)).astype(np.float32)
    w = rng.uniform(-1, 1, (out, 45)).astype(np.float32)
    np.testing.assert_allclose(convolve(gather, x, w, 3, 1), im2col(x, w, 3, 1), atol=1e-4)


def test_few_rows_of_a_wider_matrix(rng) -> None:  # noqa: ANN001
    """lm_sgemm with 16 rows reads B's panels in place at B's own leading dimension (a
    column slice of a wider matrix), K over two packed blocks."""
    path = toolchain.build_shared([("probe", "int lm_probe(void) { return 0; }\n")], True)
    sgemm = toolchain.load(path).lm_sgemm
    pointer = ctypes.c_void_p
    sgemm.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, I64, pointer, I64, pointer, I64]
    sgemm.argtypes += [pointer, I64, I64, I64]
    m, n, k, ldb = 16, 150, 300, 163
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, ldb)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    sgemm(NO_TRANS, NO_TRANS, m, n, k, a.ctypes.data, k, b.ctypes.data, ldb, c.ctypes.data, n, n, 0)
    expected = a.astype(np.float64) @ b[:, :n].astype(np.float64)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)

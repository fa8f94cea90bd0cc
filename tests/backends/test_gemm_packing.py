"""Operands lm_sgemm (gemm.c) packs by transposing 4 x 4 blocks in registers (A as stored,
B transposed: the forward `x @ W.T` of a linear layer, a convolution's weight gradient),
at every edge of those blocks, against numpy; and a batch-summed product whose operands'
leading dimension is `batch * positions` read in place (no packing copy), against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler
from tests.backends.gemm_calls import NO_TRANS, TRANS
from tests.conftest import uniform

# (m, n, k): n and k around multiples of 4 (whole and partial 4 x 4 blocks), m with and
# without a partial row panel, K over several packed blocks of 256
SHAPES = [(16, 150, 1030), (8, 48, 64), (13, 51, 259), (64, 97, 130), (9, 53, 4 * 256 + 3)]
# fewer rows than a register tile (4 to 7: the packed kernel, the rest of the tile zeros)
FEW_ROWS = [(4, 200, 330), (6, 130, 400), (7, 49, 1000)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("count", [1, 2])
def test_transposing_packs_equal_numpy(sgemm, threads, rng, shape, count) -> None:  # noqa: ANN001
    """A as stored and B transposed (both packed by 4 x 4 transposes), each with a leading
    dimension wider than its rows; C's spare columns stay untouched."""
    threads(count)
    m, n, k = shape
    a = rng.uniform(-1, 1, (m, k + 5)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, k + 3)).astype(np.float32)
    c = np.full((m, n + 2), 7.0, np.float32)
    sgemm(
        NO_TRANS,
        TRANS,
        m,
        n,
        k,
        a.ctypes.data,
        k + 5,
        b.ctypes.data,
        k + 3,
        c.ctypes.data,
        n + 2,
        n,
        0,
    )
    expected = a[:, :k].astype(np.float64) @ b[:, :k].T.astype(np.float64)
    np.testing.assert_allclose(c[:, :n], expected, rtol=1e-4, atol=1e-4)
    assert (c[:, n:] == 7.0).all()


@pytest.mark.parametrize("shape", FEW_ROWS)
@pytest.mark.parametrize("count", [1, 2])
def test_few_rows_equal_numpy(sgemm, threads, rng, shape, count) -> None:  # noqa: ANN001
    """Every transpose pair, with C's columns in blocks of 10 (a convolution's layout) and
    whole, on one and two threads."""
    threads(count)
    m, n, k = shape
    for ta in (NO_TRANS, TRANS):
        for tb in (NO_TRANS, TRANS):
            a = rng.uniform(-1, 1, (k, m) if ta == TRANS else (m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (n, k) if tb == TRANS else (k, n)).astype(np.float32)
            expected = (a.T if ta == TRANS else a).astype(np.float64) @ (
                b.T if tb == TRANS else b
            ).astype(np.float64)
            c = np.full((m, n), 7.0, np.float32)
            sgemm(ta, tb, m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1],
                  c.ctypes.data, n, n, 0)  # fmt: skip
            np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
            blocks = np.full((n // 10, m, 10), 7.0, np.float32)
            sgemm(ta, tb, m, n // 10 * 10, k, a.ctypes.data, a.shape[1], b.ctypes.data,
                  b.shape[1], blocks.ctypes.data, 10, 10, m * 10)  # fmt: skip
            got = blocks.transpose(1, 0, 2).reshape(m, -1)
            np.testing.assert_allclose(got, expected[:, : n // 10 * 10], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 25, 5003), (3, 7, 4100), (16, 150, 2048)])
@pytest.mark.parametrize("count", [1, 2])
def test_small_output_long_k_dots_equal_numpy(sgemm, threads, rng, shape, count) -> None:  # noqa: ANN001
    """A times B transposed with a small output and a long K (a weight gradient: vector
    dot products, K split between threads on two), odd rows, columns past a group of 4,
    a K tail past the vectors, leading dimensions wider than the rows."""
    threads(count)
    m, n, k = shape
    a = rng.uniform(-1, 1, (m, k + 1)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, k + 2)).astype(np.float32)
    a[m - 1, k - 1] = np.nan  # the last row's K tail
    c = np.full((m, n + 1), 7.0, np.float32)
    sgemm(NO_TRANS, TRANS, m, n, k, a.ctypes.data, k + 1, b.ctypes.data, k + 2, c.ctypes.data,
          n + 1, n, 0)  # fmt: skip
    expected = a[:, :k].astype(np.float64) @ b[:, :k].T.astype(np.float64)
    np.testing.assert_allclose(c[:, :n], expected, rtol=1e-4, atol=1e-3)
    assert np.isnan(c[m - 1, :n]).all() and (c[:, n] == 7.0).all()


def test_nan_in_a_transposed_b_reaches_its_column_only(sgemm, rng) -> None:  # noqa: ANN001
    a = rng.uniform(-1, 1, (16, 300)).astype(np.float32)
    b = rng.uniform(-1, 1, (50, 300)).astype(np.float32)
    b[45, 298] = np.nan  # in the last, partial 4-row group and the K tail
    c = np.zeros((16, 50), np.float32)
    sgemm(
        NO_TRANS,
        TRANS,
        16,
        50,
        300,
        a.ctypes.data,
        300,
        b.ctypes.data,
        300,
        c.ctypes.data,
        50,
        50,
        0,
    )
    assert np.isnan(c[:, 45]).all() and not np.isnan(np.delete(c, 45, axis=1)).any()


def test_batch_summed_operands_with_a_batch_sized_stride_are_read_in_place(rng) -> None:  # noqa: ANN001
    """sum over (b, p) of g[c, b, p] x[k, b, p] (a convolution's weight gradient against
    its im2col columns, stored (taps, batch, positions)): K = b * 40 runs along memory in
    both, the leading dimension is 40 * b, so both are read where they lie. (The leading
    dimension was once required to be provably >= 1, which `40 * b` is not for b = 0, and
    both operands were copied.)"""
    cx = lm.Graph()
    g = cx.tensor((6, "b", 40)).set(uniform(rng, (6, 3, 40)))
    x = cx.tensor((25, "b", 40)).set(uniform(rng, (25, 3, 40)))
    out = (g.permute(1, 0, 2) @ x.permute(1, 2, 0)).sum(0).retrieve()  # (6, 25)
    compiled = cx.compile(CPUCompiler())
    sources = [k.source for s in compiled.segments for k in s.kernels]
    gemm = [s for s in sources if "lm_sgemm(11" in s]
    assert len(gemm) == 1 and "malloc" not in gemm[0], gemm
    for batch in (3, 7):
        g_data, x_data = uniform(rng, (6, batch, 40)), uniform(rng, (25, batch, 40))
        g.set(g_data)
        x.set(x_data)
        cx.execute()
        expected = torch.einsum("cbp,kbp->ck", torch.tensor(g_data), torch.tensor(x_data))
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)

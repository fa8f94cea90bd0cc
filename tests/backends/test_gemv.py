"""The few-rows product `lm_sgemm_rows` (gemv.c), the decode path of a linear layer:
called directly against numpy (1 to 4 rows streamed, 5 handed to lm_sgemm; K with and
without a vector tail; leading dimensions wider than the rows; one and two threads), and
from a compiled graph whose row count is symbolic."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from tests.backends.gemm_calls import NO_TRANS, TRANS, product_function


@pytest.fixture(scope="module")
def rows_product():  # noqa: ANN201 - a ctypes function
    return product_function("lm_sgemm_rows")


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("m", [1, 2, 4, 5])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (7, 15), (100, 16), (37, 67), (1000, 899)])
def test_rows_product_equals_numpy(rows_product, threads, count, m, n, k):  # noqa: ANN001
    threads(count)
    rng = np.random.default_rng(m * 1000 + n + k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    pad = 3
    a = np.zeros((m, k + pad), np.float32)
    b = np.zeros((n, k + pad), np.float32)
    a[:, :k], b[:, :k] = x, w
    c = np.full((m, n + pad), 7.0, np.float32)
    rows_product(
        NO_TRANS, TRANS, m, n, k, a.ctypes.data, k + pad, b.ctypes.data, k + pad,
        c.ctypes.data, n + pad, n, 0,
    )  # fmt: skip
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(c[:, :n], expected, rtol=1e-5, atol=1e-4 * np.sqrt(k))
    assert (c[:, n:] == 7.0).all()


def test_rows_product_propagates_nan(rows_product):  # noqa: ANN001
    x = np.ones((1, 40), np.float32)
    w = np.ones((20, 40), np.float32)
    w[3, 17] = np.nan
    c = np.zeros((1, 20), np.float32)
    rows_product(
        NO_TRANS, TRANS, 1, 20, 40, x.ctypes.data, 40, w.ctypes.data, 40, c.ctypes.data, 20, 20, 0
    )
    assert np.isnan(c[0, 3]) and not np.isnan(np.delete(c[0], 3)).any()
    np.testing.assert_array_equal(np.delete(c[0], 3), 40.0)


def test_symbolic_rows_linear_calls_the_rows_path(rng):  # noqa: ANN001
    """x ("rows", 300) @ W.T (W: (500, 300)): one kernel serves 1 row (streamed) and 9
    (lm_sgemm), both equal to numpy."""
    w = rng.standard_normal((500, 300)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(("rows", 300))
    out = (x @ cx.tensor((500, 300)).set(w).T).retrieve()
    x.set(np.zeros((1, 300), np.float32))
    compiled = cx.compile(lm.CPUCompiler())
    sources = [k.source for s in compiled.segments for k in s.kernels]
    assert any("lm_sgemm_rows(111, 112, dim_rows, 500, 300" in s for s in sources)
    for rows in (1, 9):
        data = rng.standard_normal((rows, 300)).astype(np.float32)
        x.set(data)
        cx.execute()
        np.testing.assert_allclose(out.numpy(), data @ w.T, rtol=1e-4, atol=1e-4)

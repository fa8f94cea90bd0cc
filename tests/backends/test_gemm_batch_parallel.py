"""A batch of many products read in place (Winograd's 16 or 36 tile-position products)
runs its batch loop as one OpenMP region, each thread multiplying whole products; a short
batch keeps the serial loop (lm_sgemm's own threads). Values against torch at 1 and 2
threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.backends.cpu.blas import PARALLEL_BATCH
from luminal.backends.cpu.compiler import CPUCompiler
from tests.conftest import uniform


def _batched(
    rng: np.random.Generator, batch: int, m: int = 40, k: int = 24, n: int = 50
) -> tuple[str, np.ndarray, np.ndarray]:
    """The sgemm kernel's source and (luminal, torch) of a (batch, m, k) @ (batch, k, n)."""
    a_data, b_data = uniform(rng, (batch, m, k)), uniform(rng, (batch, k, n))
    cx = lm.Graph()
    a = cx.tensor((batch, m, k)).set(a_data)
    b = cx.tensor((batch, k, n)).set(b_data)
    out = a.matmul(b).retrieve()
    compiled = cx.compile(CPUCompiler())
    (source,) = [k.source for s in compiled.segments for k in s.kernels if "lm_sgemm(" in k.source]
    cx.execute()
    return source, out.numpy(), (torch.tensor(a_data) @ torch.tensor(b_data)).numpy()


@pytest.mark.parametrize("count", [1, 2])
def test_many_in_place_products_share_one_parallel_region(threads, rng, count) -> None:  # noqa: ANN001
    threads(count)
    source, got, expected = _batched(rng, 36)
    assert "#pragma omp parallel for" in source and "malloc" not in source, source
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_short_batch_keeps_the_serial_loop(threads, rng) -> None:  # noqa: ANN001
    threads(2)
    source, got, expected = _batched(rng, PARALLEL_BATCH - 1)
    assert "#pragma omp parallel for" not in source, source
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_packed_products_inside_the_region_equal_torch(threads, rng) -> None:  # noqa: ANN001
    """Products large enough for gemm.c's packed kernel (65 x 100 x 448: a last row panel
    of 1 row, K in two blocks, a narrow last column tile), run by the batch region's
    threads, where lm_gemm plans for the one thread a nested region has (lm_threads)."""
    threads(2)
    source, got, expected = _batched(rng, 36, m=65, k=448, n=100)
    assert "#pragma omp parallel for" in source, source
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)

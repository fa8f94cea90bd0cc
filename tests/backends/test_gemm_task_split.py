"""lm_gemm's tasks: column chunks as wide as LM_TASK_PANELS allows, narrowed while the
tasks would not cover the threads (with m <= n down to one panel before rows are split,
with m > n only while chunks times row panels are too few), rows split when the chunks
are few (B then packed once for all of them); one thread runs one task per chunk.
Products across those regimes (one row panel, a few, many; one column panel to more than
a chunk; partial edge panels; K over several blocks), on one and two threads, against
numpy."""

from __future__ import annotations

import numpy as np
import pytest

from luminal.backends.cpu import toolchain

from .test_gemm import NO_TRANS, TRANS, product


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(
    "m, n, k",
    [
        (8, 384, 300),  # one row panel, 8 column panels: chunks narrow to cover threads
        (20, 100, 64),  # three row panels, three column panels (the last partial)
        (203, 48, 70),  # many row panels, a single column panel
        (333, 410, 520),  # a partial chunk and partial tiles, K over three blocks
        (1000, 384, 257),  # MiniLM's shape family: all 8 panels in one chunk, rows split
        (64, 400, 600),  # a convolution's shape (m <= n): 9 one-panel chunks, rows split
        (16, 200, 100),  # m <= n, 5 column panels: one-panel chunks and 2 row panels
        (512, 392, 2304),  # rows split, K over 6 blocks: B packed once, shared by the tasks
    ],
)
def test_task_split_equals_numpy(sgemm, threads, count: int, m: int, n: int, k: int) -> None:  # noqa: ANN001, F811
    threads(count)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    out = product(sgemm, a, b, NO_TRANS, TRANS)
    expected = a.astype(np.float64) @ b.T.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
    assert toolchain.get_num_threads().openmp == count

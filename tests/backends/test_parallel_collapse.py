"""A parallel loop of few iterations shares the next loop's with the threads
(`collapse(2)`): YOLOv8's input pad copy ran over its 3 channels, 2:1 on 2 threads. The
innermost loop is never collapsed (it stays whole, vectorised), and a loop of many
iterations is left alone. Values against numpy, on one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.compiler import CPUCompiler
from tests.conftest import uniform


def _sources(cx: lm.Graph) -> list[str]:
    compiled = cx.compile(CPUCompiler())
    return [k.source for s in compiled.segments for k in s.kernels]


@pytest.fixture
def two_threads():  # noqa: ANN201
    before = toolchain.get_num_threads().openmp
    toolchain.set_num_threads(2)
    yield
    toolchain.set_num_threads(before)


def test_few_channels_share_their_rows(rng, two_threads) -> None:  # noqa: ANN001, ARG001
    x = uniform(rng, (3, 100, 120))
    cx = lm.Graph()
    out = (cx.tensor(x.shape).set(x).pad([None, (1, 1), (1, 1)], 0.0) * 2.0).retrieve()
    (source,) = _sources(cx)
    assert "#pragma omp parallel for collapse(2)" in source
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1))) * 2.0)


@pytest.mark.parametrize("shape", [(3, 20000), (96, 20, 30)])
def test_innermost_or_long_loops_are_not_collapsed(rng, two_threads, shape) -> None:  # noqa: ANN001, ARG001
    x = uniform(rng, shape)
    cx = lm.Graph()
    out = (cx.tensor(x.shape).set(x) * 3.0).retrieve()
    (source,) = _sources(cx)
    assert "#pragma omp parallel for" in source and "collapse" not in source
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), x * np.float32(3.0))

"""Measured search over GPU schedules on the OpenCL device: every schedule (tile size,
register blocking) of every matrix product is timed on the device, the fastest is kept
and verified, and the choice is cached on disk (a second compile measures nothing)."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends import gpu_search
from luminal.kernel.gpu_matmul import schedule_name
from tests.conftest import uniform


def _graph(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    a, b, c = uniform(rng, (40, 24)), uniform(rng, (24, 33)), uniform(rng, (33, 8))
    cx = lm.Graph()
    x = cx.tensor((40, 24)).set(a)
    out = ((x @ cx.tensor((24, 33)).set(b)).relu() @ cx.tensor((33, 8)).set(c)).retrieve()
    return cx, out, np.maximum(a @ b, 0) @ c


def test_every_tile_is_measured_the_fastest_kept_and_the_choice_cached(rng):
    cx, out, expected = _graph(rng)
    compiler = lm.OpenCLCompiler(mode="optimal")
    cx.compile(compiler)
    record = compiler.search_record
    assert record is not None and not compiler.cache_hit
    assert {"matmul0", "matmul1"} <= set(record.chosen)
    for site, option in record.chosen.items():
        if not site.startswith("matmul"):
            continue
        times = {t.config[site]: t.seconds for t in record.trials if site in t.config}
        assert set(times) == {schedule_name(t) for t in gpu_search.OPTIONS}
        assert times[option] == min(times.values())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    again, out, expected = _graph(rng)
    second = lm.OpenCLCompiler(mode="optimal")
    again.compile(second)
    assert second.cache_hit and second.search_record.chosen == record.chosen
    again.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_spent_budget_keeps_the_default_tiles_and_is_not_cached(rng):
    cx, out, expected = _graph(rng)
    compiler = lm.OpenCLCompiler(mode=lm.TimeBudget(1e-6), cache=False)
    cx.compile(compiler)
    record = compiler.search_record
    assert record.stopped_by == "time budget" and not record.trials
    assert set(record.chosen.values()) <= {str(gpu_search.DEFAULT_TILE), "default"}
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)

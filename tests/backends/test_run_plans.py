"""Run plans of the CPU runtime: a dim no output uses is planned at its bucket, so a
growing size (a decoder's "past") reuses one plan per doubling; results stay exact."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.runtime import bucket, grows_with_every_dim
from luminal.shape.expr import sym, var


def test_buckets_are_powers_of_two_from_sixteen():
    assert [bucket(n) for n in (0, 1, 16, 17, 32, 33, 1000)] == [16, 16, 16, 32, 32, 64, 1024]


@pytest.mark.parametrize(
    ("expr", "grows"),
    [
        (var("a") * 3 + var("b") * var("a") + 2, True),
        (sym(var("a")).min(var("b")) * 4, True),
        ((var("a") + 31) // 32, True),
        (var("a") - 1, False),
        (var("a") % 7, False),
        (var("a") // var("b"), False),
    ],
)
def test_sizes_that_grow_with_every_dim(expr, grows):
    assert grows_with_every_dim(sym(expr)) is grows


def _graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    """`n` sizes an intermediate (an (n, 8) table read twice, so it has a buffer) but no
    output: out = (8,)."""
    cx = lm.Graph()
    x = cx.tensor(("n", 8))
    w = cx.tensor((8,)).set(np.linspace(-1, 1, 8, dtype=np.float32))
    table = (x * w).exp()
    out = (table.sum(0) + table.max(0)).retrieve()
    return cx, x, out


def test_a_dim_only_intermediates_use_shares_one_plan_per_bucket():
    cx, x, out = _graph()
    x.set(np.ones((3, 8), np.float32))
    cx.compile(lm.CPUCompiler())
    compiled = cx.compiled
    rng = np.random.default_rng(0)
    plans = set()
    for n in range(17, 33):
        data = rng.standard_normal((n, 8)).astype(np.float32)
        x.set(data)
        cx.execute()
        table = np.exp(data * np.linspace(-1, 1, 8, dtype=np.float32))
        expected = table.sum(0) + table.max(0)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
        plans.add(id(compiled.run_plan(cx, {"n": n})))
    assert len(plans) == 1  # n = 17..32: the plan made for 32
    at_32 = cx.memory_report()["arena_bytes"]  # exact, at the last run's n = 32
    x.set(np.ones((17, 8), np.float32))
    assert 0 < cx.memory_report()["arena_bytes"] < at_32


def test_a_dim_an_output_uses_is_planned_exactly():
    cx = lm.Graph()
    x = cx.tensor(("n", 4))
    out = (x * 2.0).exp().retrieve()
    x.set(np.ones((20, 4), np.float32))
    cx.compile(lm.CPUCompiler())
    for n in (20, 21):
        data = np.full((n, 4), 0.5, np.float32)
        x.set(data)
        cx.execute()
        assert out.numpy().shape == (n, 4)
        np.testing.assert_allclose(out.numpy(), np.exp(data * 2), rtol=1e-6)
    assert len(cx.compiled.plans) == 2

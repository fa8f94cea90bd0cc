"""Measured search over the knobs of kernels that are not matrix products: work-group
sizes (the width of a row shared by a work-group) and unrolling, each option verified
against the reference runtime before it is timed, the choice cached with the tiles."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.backends import gpu_search
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.kernel import ir, transforms
from luminal.kernel.gpu import Choice
from luminal.kernel.transforms import Opt
from luminal.search.cache import SearchRecord


def _elementwise(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    a = rng.standard_normal((300, 40)).astype(np.float32)
    cx = lm.Graph()
    out = ((cx.tensor((300, 40)).set(a) * 2.0).exp() + 1.0).retrieve()
    return cx, out, np.exp(a * 2.0) + 1.0


def _softmax(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    a = rng.standard_normal((4, 300)).astype(np.float32)
    cx = lm.Graph()
    out = cx.tensor((4, 300)).set(a).softmax(-1).retrieve()
    e = np.exp(a - a.max(-1, keepdims=True))
    return cx, out, e / e.sum(-1, keepdims=True)


def _times(record: SearchRecord, site: str) -> dict[str, float]:
    return {t.config[site]: t.seconds for t in record.trials if t.status == "ok"}


@pytest.mark.parametrize("make", [_elementwise, _softmax], ids=["elementwise", "softmax"])
def test_the_fastest_verified_knob_is_chosen_cached_and_reused(rng, make, monkeypatch):
    cx, out, expected = make(rng)
    compiler = lm.OpenCLCompiler(mode="optimal")
    cx.compile(compiler)
    record = compiler.search_record
    assert record is not None and not compiler.cache_hit
    (site,) = record.chosen
    assert site == "kernel0" and len(record.sites[site]) >= 3
    assert "default" in record.sites[site] and "local(32)" in record.sites[site]
    if make is _elementwise:  # rows of 40: wide loads and stores of 2 and 4 elements
        assert {"vector(2)", "vector(4)"} <= set(record.sites[site])
    times = _times(record, site)
    assert set(times) == set(record.sites[site])  # every option verified and timed
    assert times[record.chosen[site]] == min(times.values())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)

    def no_measuring(*args, **kwargs):
        raise AssertionError("a cached search measured again")

    monkeypatch.setattr(gpu_search, "search_sites", no_measuring)
    again, out, expected = make(rng)
    second = lm.OpenCLCompiler(mode="optimal")
    again.compile(second)
    assert second.cache_hit and second.search_record.chosen == record.chosen
    again.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_wrong_option_is_dropped_and_staging_verified(rng, monkeypatch):
    """An int32 product is a loop kernel (no tiles) whose work-group shares its row of A:
    staging it in local memory is offered and verified; a test-only knob that empties
    the kernel (the fastest option by far, and wrong) is dropped with its reason."""
    monkeypatch.setitem(transforms.TRANSFORMS, "test_empty", lambda k, o: replace(k, body=()))
    wrong = Choice(opts=(Opt("test_empty"),))
    offered = gpu_search.knob_options
    monkeypatch.setattr(gpu_search, "knob_options", lambda ls: [*offered(ls), wrong])
    a = rng.integers(-9, 9, (64, 32)).astype(np.int32)
    b = rng.integers(-9, 9, (32, 128)).astype(np.int32)
    cx = lm.Graph()
    left, right = cx.tensor((64, 32), dtype=lm.int32), cx.tensor((32, 128), dtype=lm.int32)
    out = (left.set(a) @ right.set(b)).retrieve()
    compiler = lm.OpenCLCompiler(mode="optimal", cache=False)
    cx.compile(compiler)
    record = compiler.search_record
    space = record.sites["kernel0"]
    assert {"stage_local(i1_,1)", "unroll(r0_,4)", wrong.name} <= set(space)
    status = {t.config["kernel0"]: t.status for t in record.trials}
    assert status["stage_local(i1_,1)"] == "ok" and status["unroll(r0_,4)"] == "ok"
    assert status[wrong.name] in ("wrong", "nan") and record.chosen["kernel0"] != wrong.name
    (dropped,) = [t for t in record.trials if t.config["kernel0"] == wrong.name]
    assert dropped.seconds is None and dropped.detail
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), a @ b)


def test_a_staged_tile_is_declared_at_kernel_scope_and_filled_by_the_work_group(rng):
    cx = lm.Graph()
    x = cx.tensor((64, 32), dtype=lm.int32).set(rng.integers(0, 9, (64, 32)).astype(np.int32))
    w = cx.tensor((32, 128), dtype=lm.int32).set(rng.integers(0, 9, (32, 128)).astype(np.int32))
    (x @ w).retrieve()
    program = lm.OpenCLCompiler().lower(cx)
    (site,) = gpu_search.sites(cx, program)
    staged = site.option("stage_local(i1_,1)")
    lowered = gpu_search.lower_choices(cx, (16, 1), {site.node: staged})
    (launch,) = gpu_search.launches_by_node(lowered)[site.node]
    memory = launch.kernel.body[0]
    assert isinstance(memory, ir.LocalMemory) and memory.size.as_int() == 32
    source = OpenCLRenderer().program([launch])[1]
    assert "__local int lds1[32];" in source and "(i1_ % 64)" in source


def test_unrolling_is_offered_only_where_the_transform_accepts_it(rng):
    a = rng.standard_normal((16, 64)).astype(np.float32)
    cx = lm.Graph()
    cx.tensor((16, 64)).set(a).sum(-1).retrieve()
    program = lm.OpenCLCompiler().lower(cx)
    (site,) = gpu_search.sites(cx, program)
    # 16 rows fit one work-group at every size, so only the unrolling changes anything
    assert [name for name, _ in site.options] == ["default", "unroll(r0_,4)", "unroll(r0_,8)"]
    unrolled = [o for _, o in site.options if isinstance(o, Choice) and o.opts]
    eight = gpu_search.lower_choices(cx, (16, 1), {site.node: unrolled[1]})
    (launch,) = gpu_search.launches_by_node(eight)[site.node]
    loops = [s for s in gpu_search.statements(launch.kernel.body) if isinstance(s, ir.Loop)]
    assert [lp.extent.as_int() for lp in loops if lp.kind == "reduce"] == [8]
    odd = lm.Graph()
    odd.tensor((16, 63)).set(a[:, :63]).sum(-1).retrieve()  # 63: neither 4 nor 8 divides
    assert gpu_search.sites(odd, lm.OpenCLCompiler().lower(odd)) == []  # nothing to search

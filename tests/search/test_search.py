"""Measured search: verified, never slower than the static program, survives bad
candidates, honours a time budget, caches its result (tests run in their own cache)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import tuning
from luminal.backends.cpu.codegen import kernel_source
from luminal.cli import main as luminal_main
from luminal.kernel import ir


def build(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """relu(a @ b + c) followed by a large elementwise tail: several loop sites."""
    av = rng.uniform(-1, 1, (256, 128)).astype(np.float32)
    bv = rng.uniform(-1, 1, (128, 256)).astype(np.float32)
    cv = rng.uniform(-1, 1, (256,)).astype(np.float32)
    cx = lm.Graph()
    a, b, c = (cx.tensor(v.shape).set(v) for v in (av, bv, cv))
    h = (a @ b + c).relu()
    y = ((h * 0.5).exp() + h.sum(1, keepdim=True)).retrieve()
    h64 = np.maximum(av.astype(np.float64) @ bv + cv, 0)
    return cx, y, np.exp(h64 * 0.5) + h64.sum(1, keepdims=True)


def _calling(kernel: tuning.KernelSource, function: str, definition: str) -> tuning.KernelSource:
    """`kernel` calling `function` (C in its prelude, as a custom kernel's) before its
    loops: a candidate built through the IR, as every option is."""
    k = kernel.kernel
    body = (ir.Call(function, (0,)), *k.body)
    return kernel_source(replace(k, prelude=k.prelude + definition, body=body))


BAD_FUNCTIONS = {
    "segfault": "{ volatile float* volatile p = 0; *p = 1.0f; (void)b0; }",
    "hang": "{ for (volatile int spin = 1; spin;) {} (void)b0; }",
}


def bad_options(lowering, node_id, dims):  # noqa: ANN001, ANN201 - an option provider
    """Candidates a search must never pick: one skips the work (fast and wrong), one
    writes through a null pointer, one never returns."""
    if not tuning.has_parallel_loop(lowering.kernels.get(node_id)):
        return []

    def skip(lowering, node_id) -> None:  # noqa: ANN001
        k = lowering.kernels[node_id]
        lowering.kernels[node_id] = kernel_source(replace(k.kernel, body=()))

    def variant(tag: str) -> tuning.KernelOption:
        def apply(lowering, node_id) -> None:  # noqa: ANN001
            function = f"lm_test_{tag}"
            definition = f"static void {function}(void* b0) {BAD_FUNCTIONS[tag]}\n"
            lowering.kernels[node_id] = _calling(lowering.kernels[node_id], function, definition)

        return tuning.KernelOption(tag, apply)

    return [tuning.KernelOption("wrong", skip), variant("segfault"), variant("hang")]


@pytest.fixture
def search_cache(tmp_path: Path) -> Path:
    return tmp_path / "search"


def test_search_is_verified_and_never_slower(rng, search_cache) -> None:
    cx, y, expected = build(rng)
    compiler = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx.compile(compiler)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)
    record = compiler.search_record
    assert record is not None and not compiler.cache_hit
    assert record.best_seconds <= record.baseline_seconds
    assert record.trials[0].config == {} and record.trials[0].status == "ok"
    assert len(record.sites) >= 2  # the elementwise kernels are sites
    for site, option in record.chosen.items():
        assert option in record.sites[site]
    statuses = {t.status for t in record.trials}
    assert statuses <= {"ok", "slower", "inapplicable"}


def test_wrong_crashing_and_hanging_candidates_are_discarded(rng, search_cache, monkeypatch):
    monkeypatch.setattr(tuning, "OPTION_PROVIDERS", [bad_options])
    cx, y, expected = build(rng)
    compiler = lm.CPUCompiler(mode="optimal", cache=search_cache, candidate_timeout=2.0)
    cx.compile(compiler)
    record = compiler.search_record
    bad = {"wrong", "segfault", "hang"}
    outcome = {v: t.status for t in record.trials for v in t.config.values() if v in bad}
    assert outcome["wrong"] in ("wrong", "nan")  # whatever the skipped buffer held
    assert outcome["segfault"] == "crashed"
    assert outcome["hang"] == "timeout"
    assert not bad & set(record.chosen.values())  # only verified kernels can be chosen
    cx.execute()  # this process is unharmed and the chosen program is right
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


def slow_options(lowering, node_id, dims):  # noqa: ANN001, ANN201 - an option provider
    """Valid but slow candidates (each run sleeps), more than a small budget can try."""
    if not tuning.has_parallel_loop(lowering.kernels.get(node_id)):
        return []

    def variant(index: int) -> tuning.KernelOption:
        def apply(lowering, node_id) -> None:  # noqa: ANN001
            function = f"lm_test_sleep{index}"
            definition = (
                "#include <time.h>\n"
                f"static void {function}(void* b0) {{ (void)b0; "
                f"struct timespec t = {{0, 200000000 + {index}}}; nanosleep(&t, 0); }}\n"
            )
            lowering.kernels[node_id] = _calling(lowering.kernels[node_id], function, definition)

        return tuning.KernelOption(f"slow{index}", apply)

    return [variant(i) for i in range(8)]


def test_time_budget_is_honoured(rng, search_cache, monkeypatch) -> None:
    """The search starts nothing once the budget is spent; what is then in flight (a
    chunk of candidates compiling, a measurement's last half second) and the final
    build and check end after it, at the speed the machine has now, which a fast
    compile of the same graph measures. Without the budget this search takes > 15 s."""
    began = time.perf_counter()
    build(np.random.default_rng(0))[0].compile(lm.CPUCompiler(mode="fast"))
    static = time.perf_counter() - began
    monkeypatch.setattr(tuning, "OPTION_PROVIDERS", [slow_options])
    cx, y, expected = build(rng)
    budget = 6.0
    start = time.perf_counter()
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(budget), cache=search_cache)
    cx.compile(compiler)
    elapsed = time.perf_counter() - start
    assert elapsed < budget + 1.0 + 5 * static
    assert compiler.search_record.stopped_by == "time budget"
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_cache_is_reused_and_survives_a_corrupted_entry(rng, search_cache) -> None:
    cx, _, _ = build(rng)
    first = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx.compile(first)
    (entry,) = search_cache.glob("*.json")

    cx2, y2, expected = build(np.random.default_rng(0))
    second = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx2.compile(second)
    assert second.cache_hit
    assert second.search_record.key == first.search_record.key
    cx2.execute()
    np.testing.assert_allclose(y2.numpy(), expected, rtol=1e-4, atol=1e-4)

    entry.write_text('{"format": 1, "key": "truncated')  # a write cut short
    cx3, y3, expected3 = build(np.random.default_rng(0))
    third = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx3.compile(third)
    assert not third.cache_hit  # ignored and searched again
    assert json.loads(entry.read_text())["key"] == third.search_record.key
    cx3.execute()
    np.testing.assert_allclose(y3.numpy(), expected3, rtol=1e-4, atol=1e-4)


def test_search_report_prints_what_was_tried(rng, search_cache, capsys) -> None:
    cx, _, _ = build(rng)
    compiler = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx.compile(compiler)
    (search_cache / "broken.json").write_text("not json")
    assert luminal_main(["search-report", "--cache-dir", str(search_cache)]) == 0
    text = capsys.readouterr().out
    assert compiler.search_record.key in text
    assert "static" in text and "tried:" in text
    assert "unreadable entry" in text
    record = compiler.search_record
    configurations = int(np.prod([len(options) for options in record.sites.values()]))
    assert f"search space: {len(record.sites)} sites, {configurations} configurations" in text
    for site, options in record.sites.items():  # the space per kernel (and program region)
        assert f"    {site}: {len(options)} options" in text


def test_bad_modes_are_rejected() -> None:
    with pytest.raises(lm.CompileError, match="unknown mode"):
        lm.CPUCompiler(mode="fastest")
    with pytest.raises(lm.CompileError, match="TimeBudget"):
        lm.TimeBudget(0)


def test_symbolic_dims_share_a_bucket(search_cache) -> None:
    def build(rows: int) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(rows)
        xv = rng.uniform(-1, 1, (rows, 96)).astype(np.float32)
        wv = rng.uniform(-1, 1, (96, 48)).astype(np.float32)
        cx = lm.Graph()
        x = cx.tensor(("batch", 96)).set(xv)
        y = (x @ cx.tensor((96, 48)).set(wv)).exp().retrieve()
        return cx, y, xv, wv

    cx, _, _, _ = build(40)
    cx.compile(lm.CPUCompiler(mode="optimal", cache=search_cache))
    cx2, y2, xv, wv = build(50)  # 40 and 50 rows share the bucket of 64
    second = lm.CPUCompiler(mode="optimal", cache=search_cache)
    cx2.compile(second)
    assert second.cache_hit
    cx2.execute()
    np.testing.assert_allclose(y2.numpy(), np.exp(xv @ wv), rtol=1e-4, atol=1e-4)


def test_a_budget_too_short_to_search_keeps_the_static_program(rng, search_cache) -> None:
    cx, y, expected = build(rng)
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(0.05), cache=search_cache)
    cx.compile(compiler)  # no error: the static program is verified and used
    assert compiler.search_record.chosen == {}
    assert compiler.search_record.stopped_by == "time budget"
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)
    again, _, _ = build(np.random.default_rng(0))
    full = lm.CPUCompiler(mode="optimal", cache=search_cache)
    again.compile(full)  # the cut-short record does not stand for a full search
    assert not full.cache_hit and full.search_record.stopped_by == "space exhausted"


def test_graph_with_unpicklable_function_falls_back_to_static(search_cache, capsys) -> None:
    cx = lm.Graph()
    x = cx.tensor((64, 64)).set(np.full((64, 64), 0.5, np.float32))
    y = (x.exp().print("value") * 2).retrieve()  # print's closure cannot be pickled
    compiler = lm.CPUCompiler(mode="optimal", cache=search_cache)
    with pytest.warns(UserWarning, match="measured search skipped"):
        cx.compile(compiler)
    assert compiler.search_record is None
    cx.execute()
    np.testing.assert_allclose(y.numpy(), np.full((64, 64), 2 * np.exp(0.5)), rtol=1e-6)

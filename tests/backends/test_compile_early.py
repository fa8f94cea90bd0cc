"""Kernel units compile while lowering renders the next ones (`toolchain.compile_early`):
the library build then finds them built, and a unit that fails early is compiled again
and reported by the build."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import toolchain

SOURCE = "int lm_early_probe(int x) { return x + 1; }\n"


def _join(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(timeout=300)


def test_a_unit_compiled_early_is_not_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    toolchain.compile_early("lm_early_probe", SOURCE)
    toolchain.compile_early("lm_early_probe", SOURCE)  # once per cache and source
    assert sum(t.name == "lm_early_probe" for t in threading.enumerate()) <= 1
    _join("lm_early_probe")
    unit = toolchain._units([("lm_early_probe", SOURCE)])[0]
    assert toolchain._cached(toolchain.cache_dir() / f"{unit.key}.o", unit.key)
    toolchain.reset_stats()
    library = toolchain.load(toolchain.build_shared([("lm_early_probe", SOURCE)]))
    assert library.lm_early_probe(41) == 42
    assert toolchain.stats().objects_compiled == 0


def test_a_unit_that_fails_early_is_reported_by_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    toolchain.compile_early("lm_early_broken", "int lm_early_broken( {\n")
    _join("lm_early_broken")
    assert not raised  # the background thread does not raise: the build reports it
    with pytest.raises(lm.CompileError, match="lm_early_broken"):
        toolchain.build_shared([("lm_early_broken", "int lm_early_broken( {\n")])


def _record_early(monkeypatch) -> list[str]:  # noqa: ANN001 - pytest's fixture
    """The names of the kernels lowering starts early, in order (they still compile)."""
    started: list[str] = []
    early = toolchain.compile_early
    monkeypatch.setattr(
        toolchain, "compile_early", lambda name, source: (started.append(name), early(name, source))
    )
    return started


def test_lowering_starts_each_kernel_as_it_is_rendered(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    started = _record_early(monkeypatch)
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out = (cx.tensor((8, 16)).set(x).exp().sum(-1) * 2).retrieve()
    compiled = cx.compile(lm.CPUCompiler(cache=tmp_path))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.exp(x).sum(-1) * 2, rtol=1e-5)
    kernels = {k.name for s in compiled.segments for k in s.kernels}
    assert kernels and kernels <= set(started)
    # the compile waited for all of them, linked or not: no gcc outlives it
    assert not any(t.name in started and t.is_alive() for t in threading.enumerate())


def test_a_truncated_object_is_compiled_again_early(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    toolchain.compile_early("lm_early_probe", SOURCE)
    _join("lm_early_probe")
    unit = toolchain._units([("lm_early_probe", SOURCE)])[0]
    path = toolchain.cache_dir() / f"{unit.key}.o"
    path.write_bytes(path.read_bytes()[:100])  # what a full disk or a crash could leave
    assert not toolchain._cached(path, unit.key)
    monkeypatch.setattr(toolchain, "_early_started", set())  # as a fresh process would
    toolchain.compile_early("lm_early_probe", SOURCE)
    _join("lm_early_probe")
    assert toolchain._cached(path, unit.key)
    library = toolchain.load(toolchain.build_shared([("lm_early_probe", SOURCE)]))
    assert library.lm_early_probe(1) == 2


def test_a_product_reader_is_not_compiled_early(tmp_path, monkeypatch):
    """A kernel reading a BLAS product may be fused into the product's call (bias + ReLU
    here, `sgemm_epilogue.py`): compiled early it would be a thrown-away gcc run."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    started = _record_early(monkeypatch)
    rng = np.random.default_rng(0)
    x, w, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((3, 37, 64), (80, 64), (80,)))
    cx = lm.Graph()
    xt, wt, bt = cx.tensor(x.shape).set(x), cx.tensor(w.shape).set(w), cx.tensor(b.shape).set(b)
    out = (xt @ wt.transpose(0, 1) + bt).relu().retrieve()
    other = (xt.exp().sum(-1) * 2).retrieve()  # reads no product: started early
    compiled = cx.compile(lm.CPUCompiler(cache=tmp_path))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(other.numpy(), np.exp(x).sum(-1) * 2, rtol=1e-5)
    kernels = {k.name for s in compiled.segments for k in s.kernels}
    assert any("sgemm_col_relu" in name for name in kernels)  # the reader was fused
    assert started and set(started) <= kernels  # every unit started early is linked

"""luminal's support units (gemm.c, gemv.c) compile in the background as a compile
starts, so a cold compile overlaps gcc on them with the e-graph; the library build then
finds them in the cache instead of compiling them again."""

from __future__ import annotations

import threading

import numpy as np

import luminal as lm
from luminal.backends.cpu import toolchain


def _support_threads() -> list[threading.Thread]:
    names = {name for name, _ in toolchain._support_sources()}
    return [t for t in threading.enumerate() if t.name in names]


def test_support_units_are_built_before_the_library_needs_them(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    directory = toolchain.cache_dir()
    units = toolchain._units(toolchain._support_sources())
    assert not any(toolchain._cached(directory / f"{u.key}.o", u.key) for u in units)
    toolchain.start_support_units()
    for thread in _support_threads():
        thread.join(timeout=300)
    assert all(toolchain._cached(directory / f"{u.key}.o", u.key) for u in units)
    toolchain.start_support_units()  # once per cache and process: nothing starts again
    assert not _support_threads()

    toolchain.reset_stats()
    cx = lm.Graph()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = (cx.tensor((3, 4)).set(a) @ cx.tensor((4, 2)).set(np.ones((4, 2), np.float32))).retrieve()
    cx.compile(lm.CPUCompiler(cache=tmp_path))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), a @ np.ones((4, 2), np.float32))
    assert toolchain.stats().objects_cached >= len(units)  # gemm.c was not compiled again

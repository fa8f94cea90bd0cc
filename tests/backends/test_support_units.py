"""luminal's support units (gemm.c, gemv.c) compile in the background as a compile
starts, so a cold compile overlaps gcc on them with the e-graph; the library build then
finds them in the cache instead of compiling them again."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import gemm_bf16, toolchain


def _support_threads() -> list[threading.Thread]:
    names = {name for name, _ in toolchain._support_sources()}
    return [t for t in threading.enumerate() if t.name in names]


def test_support_units_are_built_before_the_library_needs_them(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    directory = toolchain.cache_dir()
    units = toolchain._units(toolchain._support_sources(), support=True)
    assert not any(toolchain._cached(directory / f"{u.key}.o", u.key) for u in units)
    toolchain.start_support_units()
    for thread in _support_threads():
        thread.join(timeout=300)
    assert all(toolchain._cached(directory / f"{u.key}.o", u.key) for u in units)
    toolchain.start_support_units()  # once per cache and process: nothing starts again
    assert not _support_threads()

    gemm = directory / f"{units[0].key}.o"
    before = gemm.stat()
    cx = lm.Graph()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = (cx.tensor((3, 4)).set(a) @ cx.tensor((4, 2)).set(np.ones((4, 2), np.float32))).retrieve()
    cx.compile(lm.CPUCompiler(cache=tmp_path))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), a @ np.ones((4, 2), np.float32))
    after = gemm.stat()  # not compiled again: publishing a new object replaces the file
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_float32_library_does_not_build_the_half_precision_products(tmp_path, monkeypatch):
    """gemm_bf16.c (~0.5 s of gcc on a cold cache) is linked only where a kernel calls it."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    half = toolchain._units([gemm_bf16.support_unit()], support=True)[0]
    assert toolchain._support_sources([("k", "void f(void) { lm_gemm_bf16(0); }")])[-1][0] == (
        half.name
    )
    cx = lm.Graph()
    a = np.ones((8, 16), np.float32)
    out = (
        cx.tensor((8, 16)).set(a) @ cx.tensor((16, 4)).set(np.ones((16, 4), np.float32))
    ).retrieve()
    cx.compile(lm.CPUCompiler(cache=tmp_path))
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.full((8, 4), 16.0, np.float32))
    assert not (toolchain.cache_dir() / f"{half.key}.o").exists()


def test_a_support_unit_s_own_flags_are_part_of_its_key(monkeypatch):
    """gemm.c is compiled with SUPPORT_FLAGS after CFLAGS: an object built with other
    flags (an older luminal's) is another cache entry, never reused."""
    name, source = toolchain._support_sources()[0]
    unit = toolchain._units([(name, source)], support=True)[0]
    assert unit.flags == toolchain.SUPPORT_FLAGS[name]
    assert unit.key == toolchain.object_key(source, unit.flags) != toolchain.object_key(source)
    monkeypatch.setitem(toolchain.SUPPORT_FLAGS, name, ())
    assert toolchain._units([(name, source)], support=True)[0].key == toolchain.object_key(source)


def test_a_support_unit_is_compiled_with_its_own_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(toolchain.SUPPORT_FLAGS, "lm_probe", ("-DLM_PROBE_FLAG=3",))
    source = (
        "#if LM_PROBE_FLAG != 3\n#error flag missing\n#endif\nint lm_probe(void) { return 3; }\n"
    )
    unit = toolchain._units([("lm_probe", source)], support=True)[0]
    assert toolchain._compile_unit(unit, toolchain.cache_dir()).exists()
    with pytest.raises(lm.CompileError, match="flag missing"):  # the same source, no flags
        toolchain._compile_unit(toolchain._units([("lm_probe", source)])[0], toolchain.cache_dir())

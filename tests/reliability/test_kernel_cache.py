"""The kernel cache is private and verified (issue 11, item 1) and gcc runs under a timeout
(item 4): every fault ends in a rebuild, a fallback with one warning, or a CompileError, and
the next compile and run give numpy's numbers. Loads of planted files run in a subprocess,
so a regression (a SIGBUS in dlopen) fails the test instead of killing pytest."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import cache_files, cache_location, toolchain
from luminal.backends.cpu.cache_location import CacheWarning

REPO = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(11)
A = RNG.uniform(-1, 1, (4, 8)).astype(np.float32)
B = RNG.uniform(-1, 1, 8).astype(np.float32)


@pytest.fixture(autouse=True)
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A private cache per test; where the cache is gets resolved afresh."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    cache_location.reset()
    yield root
    cache_location.reset()


def expected(offset: float) -> np.ndarray:
    return np.exp2(A * 2.0 + B + offset).sum(1)


def compile_and_run(offset: float = 0.0) -> np.ndarray:
    """exp2(2a + b + offset).sum(1), compiled; the offset makes another graph's library."""
    cx = lm.Graph()
    a = cx.tensor((4, 8)).set(A)
    b = cx.tensor((8,)).set(B)
    y = (a * 2.0 + b + offset).exp2().sum(1).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    return y.numpy()


def assert_correct(offset: float = 0.0) -> None:
    np.testing.assert_allclose(compile_and_run(offset), expected(offset), rtol=1e-5)


def libraries() -> list[Path]:
    return sorted(toolchain.cache_dir().glob("*.so"))


RUN_IN_FRESH_PROCESS = """
import json, numpy as np
from luminal.backends.cpu import toolchain
from tests.reliability.test_kernel_cache import compile_and_run, expected
got = compile_and_run()
error = float(np.abs(got - expected(0.0)).max() / np.abs(expected(0.0)).max())
print(json.dumps({"error": error, **toolchain.stats().__dict__}))
"""


def run_in_fresh_process(cache: Path) -> dict[str, float]:
    """Compile and run the graph in a new process (dlopen there, contained)."""
    environment = {**os.environ, "LUMINAL_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [sys.executable, "-c", RUN_IN_FRESH_PROCESS],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cache_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def make_foreign(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` belong to another user: chown when we can (root), else pretend to be
    another user, which makes every existing directory foreign."""
    if os.geteuid() == 0:
        os.chown(path, 12345, 12345)
    else:
        uid = os.geteuid()
        monkeypatch.setattr(cache_location.os, "geteuid", lambda: uid + 1)


# ------------------------------------------------------------------------------ permissions
def test_created_private_whatever_the_umask(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "made" / "by" / "luminal"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    previous = os.umask(0)
    try:
        assert_correct()
    finally:
        os.umask(previous)
    directories = [tmp_path / "made", tmp_path / "made" / "by", root, root / "cpu-kernels"]
    assert [mode(d) for d in directories] == [0o700] * 4
    files = list((root / "cpu-kernels").iterdir())
    assert {p.suffix for p in files} >= {".c", ".o", ".so", ".manifest", ".h"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_users_own_cache_dir_is_used_as_it_is(cache: Path) -> None:
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o755)  # the user's choice: readable by others, writable by nobody else
    assert_correct()
    assert mode(cache) == 0o755 and mode(cache / "cpu-kernels") == 0o700
    assert libraries()[0].parent == cache / "cpu-kernels"


def test_shared_cache_dir_from_environment_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    (shared / "cpu-kernels").mkdir(parents=True)
    os.chmod(shared, 0o777)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(shared))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_correct()
        assert_correct()
    [message] = cache_warnings(caught)
    assert f"ignoring LUMINAL_CACHE_DIR={shared}" in message and "0777" in message
    assert toolchain.cache_dir() == tmp_path / "xdg" / "luminal" / "cpu-kernels"
    assert list((shared / "cpu-kernels").iterdir()) == []  # nothing written into it
    assert mode(shared) == 0o777  # and left as the user made it


def test_foreign_cache_dir_from_environment_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "luminal" / "cpu-kernels").mkdir(parents=True, mode=0o700)
    make_foreign(foreign, monkeypatch)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(foreign))
    if os.geteuid() != 0:  # pretending to be another user makes the default foreign too
        with pytest.raises(lm.CompileError, match="cannot be trusted"):
            compile_and_run()
        monkeypatch.undo()
        assert_correct()
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_correct()
    [message] = cache_warnings(caught)
    assert f"ignoring LUMINAL_CACHE_DIR={foreign}" in message and "uid 12345" in message
    assert list(foreign.iterdir()) == []


def test_foreign_default_cache_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LUMINAL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "luminal"
    root.mkdir(parents=True, mode=0o700)
    make_foreign(root, monkeypatch)
    with pytest.raises(lm.CompileError) as info:
        compile_and_run()
    message = str(info.value)
    assert str(root) in message and "not by you" in message
    assert f"rm -rf '{root}'" in message and "LUMINAL_CACHE_DIR" in message
    monkeypatch.undo()  # the fix the message names: a private LUMINAL_CACHE_DIR
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "private"))
    assert_correct()


def test_group_writable_default_cache_is_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LUMINAL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "luminal"
    (root / "cpu-kernels").mkdir(parents=True)
    planted = root / "cpu-kernels" / ("0" * 64 + ".so")
    planted.write_bytes(b"\x7fELF planted by a group member")
    os.chmod(root, 0o775)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_correct()
        assert_correct()
    [message] = cache_warnings(caught)
    assert str(root) in message and "0775" in message and "discarded" in message
    assert mode(root) == 0o700 and mode(root / "cpu-kernels") == 0o700
    assert not planted.exists()
    assert [p.name for p in tmp_path.joinpath("xdg").iterdir()] == ["luminal"]


# ------------------------------------------------------------------------------ corruption
def _truncate_after_header(library: Path, other: Path) -> None:
    library.write_bytes(library.read_bytes()[:64])  # the 64-byte ELF header, nothing else


def _truncate_half(library: Path, other: Path) -> None:
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])  # program headers promise what is gone


def _garbage_after_magic(library: Path, other: Path) -> None:
    size = library.stat().st_size
    library.write_bytes(b"\x7fELF" + np.random.default_rng(0).bytes(size - 4))


def _other_graphs_library(library: Path, other: Path) -> None:
    shutil.copyfile(other, library)


def _other_graphs_library_and_manifest(library: Path, other: Path) -> None:
    shutil.copyfile(other, library)
    shutil.copyfile(cache_files.manifest_path(other), cache_files.manifest_path(library))


def _libm(library: Path, other: Path) -> None:
    maps = Path("/proc/self/maps").read_text().splitlines()
    [libm] = {line.split()[-1] for line in maps if line.endswith("/libm.so.6")}
    shutil.copyfile(libm, library)


def _missing_manifest(library: Path, other: Path) -> None:
    cache_files.manifest_path(library).unlink()


def _unlink_artefacts(directory: Path) -> None:
    """Force a rebuild from the sources on disk, as after a cache cleanup."""
    for path in directory.iterdir():
        if path.name.endswith((".o", ".so")):
            path.unlink()


def _edited_source(library: Path, other: Path) -> None:
    _unlink_artefacts(library.parent)
    for source in library.parent.glob("*.c"):
        source.write_text(source.read_text().replace("exp2f(", "expf("))


def _edited_header(library: Path, other: Path) -> None:
    _unlink_artefacts(library.parent)
    [header] = library.parent.glob("simd_math-*.h")
    header.write_text(header.read_text() + "\n#define exp2f(x) 0.0f\n")


def _truncated_object(library: Path, other: Path) -> None:
    library.unlink()
    for obj in library.parent.glob("*.o"):
        obj.write_bytes(obj.read_bytes()[:100])


CORRUPTIONS: dict[str, Callable[[Path, Path], None]] = {
    "truncated after the ELF header": _truncate_after_header,
    "truncated in the middle": _truncate_half,
    "garbage after the ELF magic": _garbage_after_magic,
    "another graph's library": _other_graphs_library,
    "another graph's library and manifest": _other_graphs_library_and_manifest,
    "libm.so.6": _libm,
    "missing manifest": _missing_manifest,
    "edited .c source": _edited_source,
    "edited shared header": _edited_header,
    "truncated objects": _truncated_object,
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A cache holding the libraries of two graphs, built once: the cache, the name of the
    library of the graph under test (offset 0) and of the other graph's (offset 1)."""
    root = tmp_path_factory.mktemp("pristine") / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LUMINAL_CACHE_DIR", str(root))
        assert_correct(offset=1.0)
        [other] = libraries()
        assert_correct()
        [library] = [p for p in libraries() if p != other]
    return root, library.name, other.name


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=list(CORRUPTIONS))
def test_corrupt_or_foreign_library_is_rebuilt_never_loaded(
    corrupt: Callable[[Path, Path], None], pristine: tuple[Path, str, str], cache: Path
) -> None:
    shutil.copytree(pristine[0], cache)
    library, other = cache / "cpu-kernels" / pristine[1], cache / "cpu-kernels" / pristine[2]
    assert_correct()  # loaded here from the pristine copy, then corrupted in place
    corrupt(library, other)
    report = run_in_fresh_process(cache)
    assert report["error"] < 1e-5
    assert report["libraries_linked"] == 1 and report["libraries_cached"] == 0
    assert cache_files.verify(library, library.stem, toolchain.build_id()) is not None
    assert_correct()  # and in this process too


def test_library_replaced_after_verification_is_not_loaded() -> None:
    source = "float lm_cache_probe(float x) { return x * 3.0f; }\n"
    other = toolchain.build_shared([("probe4", source.replace("3.0f", "4.0f"))])
    path = toolchain.build_shared([("probe", source)])  # verified, not loaded yet
    temp = path.with_name("planted")
    shutil.copyfile(other, temp)
    os.replace(temp, path)
    with pytest.raises(lm.CompileError, match="does not match its manifest"):
        toolchain.load(path)
    before = toolchain.stats()
    assert toolchain.build_shared([("probe", source)]) == path
    assert toolchain.stats().libraries_linked == before.libraries_linked + 1
    probe = toolchain.load(path).lm_cache_probe
    probe.restype, probe.argtypes = ctypes.c_float, [ctypes.c_float]
    assert probe(2.0) == 6.0


def test_verified_library_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest check costs a stat per compile after the first load, not a re-hash."""
    assert_correct()
    hashed: list[Path] = []
    original = cache_files._hash_open_file

    def counting(path: Path) -> tuple[str, int, tuple[int, ...]]:
        hashed.append(path)
        return original(path)

    monkeypatch.setattr(cache_files, "_hash_open_file", counting)
    for _ in range(3):
        assert_correct()
    assert hashed == []


# ------------------------------------------------------------------------------ fallbacks
def _assert_one_fallback(wanted: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_correct()
        assert_correct(offset=1.0)
    [message] = cache_warnings(caught)
    assert str(wanted) in message and "temporary directory" in message
    directory = toolchain.cache_dir()
    assert directory.parent.name.startswith("luminal-cache-")
    assert directory.is_relative_to(tempfile.gettempdir())
    assert mode(directory.parent) == 0o700 and mode(directory) == 0o700
    assert len(libraries()) >= 2


def test_cache_path_that_is_a_file_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "not-a-directory"
    path.write_text("a file in the way")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(path))
    _assert_one_fallback(path)
    assert path.read_text() == "a file in the way"


def test_uncreatable_home_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.delenv("LUMINAL_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "file" / "home"))
    _assert_one_fallback(tmp_path / "file" / "home" / ".cache" / "luminal")


def test_read_only_file_system_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    read_only = tmp_path / "read-only"
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        if Path(path).is_relative_to(read_only):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real_mkdir(path, mode)

    monkeypatch.setattr(cache_location.os, "mkdir", mkdir)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(read_only / "cache"))
    _assert_one_fallback(read_only / "cache")


# ------------------------------------------------------------------------------ gcc timeout
def test_gcc_timeout_raises_compile_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    toolchain.build_id()  # the real compiler's identity, before CC is replaced
    hanging = tmp_path / "hanging-cc"
    hanging.write_text("#!/bin/sh\nsleep 60\n")  # a child, like cc1 under the gcc driver
    hanging.chmod(0o700)
    monkeypatch.setattr(toolchain, "CC", str(hanging))
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", "0.5")
    start = time.perf_counter()
    with pytest.raises(lm.CompileError) as info:
        compile_and_run()
    assert time.perf_counter() - start < 10  # the whole process group was stopped
    message = str(info.value)
    assert "did not finish within 0.5 s" in message and "LUMINAL_CC_TIMEOUT" in message
    assert ".c)" in message and str(toolchain.cache_dir()) in message
    monkeypatch.setattr(toolchain, "CC", "gcc")
    monkeypatch.delenv("LUMINAL_CC_TIMEOUT")  # gemm.c alone takes ~1 s of gcc
    assert_correct()


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan", "inf"])
def test_bad_gcc_timeout_is_a_compile_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", value)
    with pytest.raises(lm.CompileError, match="LUMINAL_CC_TIMEOUT must be a positive number"):
        compile_and_run()
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", "120")
    assert_correct()


def test_a_library_whose_manifest_lands_a_moment_later_is_loaded() -> None:
    """Ranks of one job on a cold cache link the same library: one renames its file into
    place and then writes the manifest, so another process can find bytes its manifest
    does not describe yet. Loading waits for the manifest rather than failing the job."""
    source = "float lm_cache_probe(float x) { return x * 5.0f; }\n"
    other = toolchain.build_shared([("probe6", source.replace("5.0f", "6.0f"))])
    path = toolchain.build_shared([("probe5", source)])
    manifest = cache_files.manifest_path(path)
    saved = manifest.read_bytes()
    manifest.write_bytes(cache_files.manifest_path(other).read_bytes())  # a stale manifest
    writer = threading.Timer(0.05, manifest.write_bytes, args=(saved,))
    writer.start()
    try:
        probe = toolchain.load(path).lm_cache_probe
    finally:
        writer.join()
    probe.restype, probe.argtypes = ctypes.c_float, [ctypes.c_float]
    assert probe(2.0) == 10.0

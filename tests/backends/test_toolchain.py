"""The CPU toolchain: flags keep -inf/NaN semantics while vectorising math, the disk cache is
content-addressed, atomic and shared across threads and processes, errors show the source."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import toolchain

FLOAT_P = ctypes.POINTER(ctypes.c_float)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache per module, so objects compiled by one test are reused by the next and
    the user's cache is never touched."""
    root = tmp_path_factory.mktemp("luminal-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LUMINAL_CACHE_DIR", str(root))
        yield root


def ptr(array: np.ndarray) -> ctypes._Pointer:
    assert array.dtype == np.float32 and array.flags.c_contiguous
    return array.ctypes.data_as(FLOAT_P)


def function(library: ctypes.CDLL, name: str, restype: object, *argtypes: object) -> object:
    fn = getattr(library, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


def build_and_load(name: str, source: str, link_blas: bool = False) -> ctypes.CDLL:
    return toolchain.load(toolchain.build_shared([(name, source)], link_blas=link_blas))


def run_python(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "LUMINAL_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, cwd=REPO
    )


# ------------------------------------------------------------------------------ kernels
ADD_SOURCE = """
void add(const float* restrict a, const float* restrict b, float* restrict out, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}
"""

SEMANTICS_SOURCE = """
#include <math.h>

float max_plain(const float* x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
float max_select(const float* x, int n) {  /* NaN-propagating select */
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
    return m;
}
float max_simd(const float* x, int n) {  /* vectorised max plus a NaN flag */
    float m = -INFINITY;
    int nan = 0;
    #pragma omp simd reduction(max:m) reduction(|:nan)
    for (int i = 0; i < n; i++) { m = x[i] > m ? x[i] : m; nan |= x[i] != x[i]; }
    return nan ? NAN : m;
}
float sum_plain(const float* x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}
float sum_simd(const float* x, int n) {
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}
float prod_plain(const float* x, int n) {
    float p = 1.0f;
    for (int i = 0; i < n; i++) p *= x[i];
    return p;
}
int count_isnan(const float* x, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += isnan(x[i]) != 0;
    return c;
}
int count_self_unequal(const float* x, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += x[i] != x[i];
    return c;
}
int finite_math_only(void) { return __FINITE_MATH_ONLY__; }
float exp2_scalar(float x) { return exp2f(x); }
float log2_scalar(float x) { return log2f(x); }
void exp2_loop(const float* restrict x, float* restrict out, int n) {
    for (int i = 0; i < n; i++) out[i] = exp2f(x[i]);
}
void log2_loop(const float* restrict x, float* restrict out, int n) {
    for (int i = 0; i < n; i++) out[i] = log2f(x[i]);
}
void exp_loop(const float* restrict x, float* restrict out, int n) {
    for (int i = 0; i < n; i++) out[i] = expf(x[i]);
}
"""


@pytest.fixture(scope="module")
def semantics() -> ctypes.CDLL:
    return build_and_load("semantics", SEMANTICS_SOURCE)


def reduce(library: ctypes.CDLL, name: str, values: np.ndarray) -> float:
    values = np.ascontiguousarray(values, np.float32)
    restype = ctypes.c_int if name.startswith("count") else ctypes.c_float
    return function(library, name, restype, FLOAT_P, ctypes.c_int)(ptr(values), values.size)


def elementwise(library: ctypes.CDLL, name: str, values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values, np.float32)
    out = np.empty_like(values)
    function(library, name, None, FLOAT_P, FLOAT_P, ctypes.c_int)(
        ptr(values), ptr(out), values.size
    )
    return out


# ------------------------------------------------------------------------------ basics
def test_trivial_kernel_compiles_and_runs() -> None:
    library = build_and_load("add", ADD_SOURCE)
    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 0.5, np.float32)
    out = np.empty_like(a)
    add = function(library, "add", None, FLOAT_P, FLOAT_P, FLOAT_P, ctypes.c_int)
    add(ptr(a), ptr(b), ptr(out), a.size)
    np.testing.assert_array_equal(out, a + b)
    path = toolchain.build_shared([("add", ADD_SOURCE)])
    assert toolchain.load(path) is library  # one handle per process


def test_cache_dir_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert toolchain.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("LUMINAL_CACHE_DIR")
    assert toolchain.cache_root() == tmp_path / "xdg" / "luminal"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert toolchain.cache_root() == tmp_path / "home" / ".cache" / "luminal"


# ------------------------------------------------------------------------------ flags
def test_flags_keep_finite_math_off(semantics: ctypes.CDLL) -> None:
    assert "-ffast-math" not in toolchain.CFLAGS
    assert "-ffinite-math-only" not in toolchain.CFLAGS
    assert function(semantics, "finite_math_only", ctypes.c_int)() == 0


def test_max_from_negative_infinity(semantics: ctypes.CDLL) -> None:
    all_neg_inf = np.full(1000, -np.inf, np.float32)
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    for name in ("max_plain", "max_select", "max_simd"):
        assert reduce(semantics, name, all_neg_inf) == -np.inf, name
        assert reduce(semantics, name, values) == values.max(), name


def test_nan_propagation(semantics: ctypes.CDLL) -> None:
    values = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    values[617] = np.nan
    for name in ("sum_plain", "sum_simd", "prod_plain", "max_select", "max_simd"):
        assert np.isnan(reduce(semantics, name, values)), name
    # documented: `x > m ? x : m` skips a NaN element (the comparison is false), so
    # NaN-propagating maxima need the select form or a NaN flag as above
    assert reduce(semantics, "max_plain", values) == np.nanmax(values)
    assert reduce(semantics, "count_isnan", values) == 1
    assert reduce(semantics, "count_self_unequal", values) == 1


def test_exp2_and_log2_special_values(semantics: ctypes.CDLL) -> None:
    exp2 = function(semantics, "exp2_scalar", ctypes.c_float, ctypes.c_float)
    log2 = function(semantics, "log2_scalar", ctypes.c_float, ctypes.c_float)
    assert exp2(-np.inf) == 0.0 and exp2(np.inf) == np.inf and np.isnan(exp2(np.nan))
    assert log2(0.0) == -np.inf and log2(np.inf) == np.inf
    assert np.isnan(log2(-1.0)) and np.isnan(log2(np.nan))
    # the same inside vectorised loops, specials spread over vector bodies and the tail
    specials = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 128.0, -150.0, 1.0], np.float32)
    x = np.zeros(1003, np.float32)
    positions = np.arange(specials.size) * 125 + 3
    x[positions] = specials
    with np.errstate(over="ignore"):
        expected = np.exp2(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(elementwise(semantics, "exp2_loop", x), expected)
    logs = elementwise(semantics, "log2_loop", x)
    assert logs[positions[3]] == -np.inf and logs[positions[4]] == -np.inf  # log2(+-0)
    assert np.isnan(logs[positions[0]]) and np.isnan(logs[positions[2]])  # -inf, NaN
    assert logs[positions[1]] == np.inf and logs[positions[5]] == 7.0


def test_math_loops_vectorise_and_match_numpy(semantics: ctypes.CDLL) -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-100, 100, 4099).astype(np.float32)
    positive = (10.0 ** rng.uniform(-30, 30, 4099)).astype(np.float32)
    small = rng.uniform(-80, 80, 4099).astype(np.float32)
    ref = np.exp2(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(elementwise(semantics, "exp2_loop", x), ref, rtol=1e-6, atol=0)
    ref = np.log2(positive.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(
        elementwise(semantics, "log2_loop", positive), ref, rtol=1e-6, atol=1e-7
    )
    ref = np.exp(small.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(elementwise(semantics, "exp_loop", small), ref, rtol=1e-6, atol=0)
    # evidence that the loop calls a libmvec vector variant (x86-64 glibc >= 2.35 has one)
    libc, version = platform.libc_ver()
    has_vector_exp2 = (
        platform.machine() == "x86_64"
        and libc == "glibc"
        and tuple(int(p) for p in version.split(".")[:2]) >= (2, 35)
    )
    if has_vector_exp2:
        binary = toolchain.build_shared([("semantics", SEMANTICS_SOURCE)]).read_bytes()
        assert b"v_exp2f" in binary and b"v_log2f" in binary and b"v_expf" in binary


# ------------------------------------------------------------------------------ cache
def test_second_build_compiles_nothing_in_process() -> None:
    units = [("add", ADD_SOURCE), ("semantics", SEMANTICS_SOURCE)]
    toolchain.build_shared(units)
    before = toolchain.stats()
    path = toolchain.build_shared(units)
    objects = toolchain.compile_objects(units)
    after = toolchain.stats()
    assert after.objects_compiled == before.objects_compiled
    assert after.libraries_linked == before.libraries_linked
    assert after.libraries_cached == before.libraries_cached + 1
    assert after.objects_cached == before.objects_cached + 2
    assert path.suffix == ".so" and [p.suffix for p in objects] == [".o", ".o"]


def test_second_build_in_fresh_process_compiles_nothing(cache: Path) -> None:
    units = [("add", ADD_SOURCE), ("semantics", SEMANTICS_SOURCE)]
    path = toolchain.build_shared(units)
    code = f"""
import json, dataclasses
from luminal.backends.cpu import toolchain
units = {units!r}
path = toolchain.build_shared(units)
toolchain.compile_objects(units)
print(json.dumps({{"path": str(path), **dataclasses.asdict(toolchain.stats())}}))
"""
    result = run_python(code, cache)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["path"] == str(path)
    assert report["objects_compiled"] == 0 and report["libraries_linked"] == 0
    assert report["libraries_cached"] == 1 and report["objects_cached"] == 2


def test_partial_temporaries_are_ignored(cache: Path) -> None:
    source = ADD_SOURCE.replace("add(", "add_after_crash(")
    directory = toolchain.cache_dir()
    key = toolchain.object_key(source)
    library = toolchain.library_key([key], link_blas=False)
    # what a compile killed mid-write leaves behind, plus a corrupt published object
    (directory / f"{key}.o.tmp-999-1-dead").write_bytes(b"\x7fELF\x02\x01 truncated")
    (directory / f"{library}.so.tmp-999-1-dead").write_bytes(b"")
    (directory / f"{key}.o").write_bytes(b"garbage, not an object file")
    before = toolchain.stats()
    loaded = build_and_load("add_after_crash", source)
    assert toolchain.stats().objects_compiled == before.objects_compiled + 1
    a = np.ones(10, np.float32)
    out = np.zeros(10, np.float32)
    kernel = function(loaded, "add_after_crash", None, FLOAT_P, FLOAT_P, FLOAT_P, ctypes.c_int)
    kernel(ptr(a), ptr(a), ptr(out), 10)
    np.testing.assert_array_equal(out, 2.0)
    # stale temporaries are swept; young ones may belong to a running compile and stay
    old = directory / f"{key}.o.tmp-999-1-dead"
    young = directory / f"{key}.o.tmp-999-2-beef"
    young.write_bytes(b"")
    os.utime(old, (time.time() - 2 * toolchain.STALE_TEMP_SECONDS,) * 2)
    assert toolchain.clean_stale_temps(directory) >= 1
    assert not old.exists() and young.exists()


def test_concurrent_threads_build_the_same_source() -> None:
    source = ADD_SOURCE.replace("add(", "add_threads(")
    barrier = threading.Barrier(2)
    paths: list[Path] = []

    def build() -> None:
        barrier.wait()
        paths.append(toolchain.build_shared([("add_threads", source)]))

    before = toolchain.stats()
    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(paths) == 2 and paths[0] == paths[1]
    assert toolchain.stats().objects_compiled == before.objects_compiled + 1
    assert hasattr(toolchain.load(paths[0]), "add_threads")


def test_concurrent_processes_build_the_same_source(cache: Path) -> None:
    source = ADD_SOURCE.replace("add(", "add_processes(")
    code = f"""
import ctypes
from luminal.backends.cpu import toolchain
path = toolchain.build_shared([("add_processes", {source!r})])
ctypes.CDLL(str(path)).add_processes
print(path)
"""
    environment = {**os.environ, "LUMINAL_CACHE_DIR": str(cache)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate() for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr
    paths = {stdout.strip() for stdout, _ in outputs}
    assert len(paths) == 1
    assert hasattr(toolchain.load(paths.pop()), "add_processes")
    temps = [p.name for p in toolchain.cache_dir().iterdir() if toolchain.TEMP_MARKER in p.name]
    assert all("-999-" in name for name in temps)  # only the ones planted above


def test_parallel_and_sequential_builds_agree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    units = [
        (
            f"scale{k}",
            ADD_SOURCE.replace("add(", f"scale{k}(").replace("a[i] + b[i]", "a[i] * b[i]"),
        )
        for k in range(4)
    ]
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "sequential"))
    sequential = toolchain.compile_objects(units, max_workers=1)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "parallel"))
    parallel = toolchain.compile_objects(units, max_workers=4)
    assert [p.name for p in sequential] == [p.name for p in parallel]
    assert [p.name for p in sequential] == [f"{toolchain.object_key(s)}.o" for _, s in units]
    assert [p.read_bytes() for p in sequential] == [p.read_bytes() for p in parallel]
    assert toolchain.object_key(units[0][1]) != toolchain.object_key(units[1][1])


# ------------------------------------------------------------------------------ errors
def test_compile_error_shows_diagnostics_and_numbered_source() -> None:
    lines = [f"int filler{i}(void) {{ return {i}; }}" for i in range(60)]
    lines[44] = "int broken(void) { return undeclared_name; }"
    source = "\n".join(lines) + "\n"
    with pytest.raises(lm.CompileError) as info:
        toolchain.build_shared([("broken_kernel", source)])
    message = str(info.value)
    assert isinstance(info.value, lm.LuminalError)
    assert "broken_kernel.c:45:" in message and "undeclared_name" in message
    assert "    1 | int filler0(void)" in message  # the first lines...
    assert "   45 | int broken(void)" in message  # ...and those around the error
    key = toolchain.object_key(source)
    leftovers = [p for p in toolchain.cache_dir().iterdir() if p.name.startswith(f"{key}.o")]
    assert leftovers == []


def test_link_error_names_the_missing_symbol() -> None:
    source = "void missing_caller(void); void not_defined_anywhere(void);\n"
    source += "void missing_caller(void) { not_defined_anywhere(); }\n"
    with pytest.raises(lm.CompileError, match="not_defined_anywhere"):
        toolchain.build_shared([("missing", source)])


# ------------------------------------------------------------------------------ BLAS, threads
SGEMM_SOURCE = """
void SGEMM(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
           float*, int);
void matmul(const float* a, const float* b, float* c, int m, int n, int k) {
    SGEMM(101, 111, 111, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);  /* row-major, no trans */
}
"""


def test_blas_sgemm_matches_numpy() -> None:
    flags = toolchain.blas_flags()
    assert flags.sgemm in ("cblas_sgemm", "scipy_cblas_sgemm")
    assert any(flags.lib_dir in f for f in flags.ldflags)
    library = build_and_load("sgemm", SGEMM_SOURCE.replace("SGEMM", flags.sgemm), link_blas=True)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    c = np.empty((256, 256), np.float32)
    matmul = function(library, "matmul", None, *[FLOAT_P] * 3, *[ctypes.c_int] * 3)
    matmul(ptr(a), ptr(b), ptr(c), 256, 256, 256)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


TEAM_SOURCE = """
#include <omp.h>
int team_size(void) {
    int size = 0;
    #pragma omp parallel
    {
        #pragma omp single
        size = omp_get_num_threads();
    }
    return size;
}
"""


def test_set_num_threads_controls_openmp_and_openblas() -> None:
    team_size = function(build_and_load("team", TEAM_SOURCE), "team_size", ctypes.c_int)
    original = toolchain.get_num_threads()
    try:
        toolchain.set_num_threads(1)
        assert toolchain.get_num_threads() == (1, 1)
        assert team_size() == 1
        toolchain.set_num_threads(2)
        assert toolchain.get_num_threads() == (2, 2)
        assert team_size() == 2
    finally:
        toolchain.set_num_threads(original.openmp)
        if original.blas is not None:
            blas = toolchain.load(toolchain.blas_flags().library_file)
            getattr(blas, toolchain.blas_flags().set_num_threads)(original.blas)
    with pytest.raises(ValueError):
        toolchain.set_num_threads(0)


def test_verification_pins_only_numpys_blas() -> None:
    """The reference check runs numpy's BLAS on one thread; the compiled program's BLAS
    keeps its count inside, and set_num_threads still controls it afterwards (threadpoolctl
    ORs selection criteria: selecting by API too pinned MKL and left a thread-local count)."""
    from threadpoolctl import ThreadpoolController

    from luminal.backends.cpu.compiler import numpy_blas_on_one_thread

    original = toolchain.get_num_threads()
    try:
        toolchain.set_num_threads(2)
        with numpy_blas_on_one_thread():
            assert toolchain.get_num_threads() == (2, 2)
            numpy_blas = [
                info["num_threads"]
                for info in ThreadpoolController().info()
                if info["user_api"] == "blas" and "numpy" in info["filepath"]
            ]
            assert numpy_blas and set(numpy_blas) == {1}
        toolchain.set_num_threads(1)
        assert toolchain.get_num_threads() == (1, 1)
    finally:
        toolchain.set_num_threads(original.openmp)

"""C source to loaded shared objects: gcc flags, a content-addressed disk cache, parallel builds.

Flags (measured with gcc 12.2 / glibc 2.36 on an AVX-512 Xeon, `-fopt-info-vec` and timing):

- gcc vectorises `out[i] = exp2f(x[i])` only by calling glibc's libmvec (`_ZGVeN16v_exp2f`),
  and <math.h> declares those vector variants only when `__FAST_MATH__` is defined, which gcc
  does only under full `-ffast-math`, i.e. with `-ffinite-math-only`, which is what we must not
  have (max reductions start from -inf, masks use -inf, NaN must stay NaN). No flag set
  without finite-math-only vectorised it. So every translation unit is compiled with
  `-include` of `SIMD_MATH_HEADER`, which declares the libmvec variants that this glibc
  exports (`__attribute__((simd("notinbranch")))`, exactly what glibc does under fast-math).
- With that header, `-fno-math-errno` is the one flag still needed (a math call that may set
  errno is not a pure function and is not vectorised). Result: exp2f 4.2 -> 0.43 ns/element,
  expf 2.5 -> 0.5, log2f 2.6 -> 0.42. libmvec keeps IEEE special values (exp2f(-inf) = 0,
  log2f(0) = -inf, NaN in -> NaN out; all checked) at <= 1 ulp (exp2f), 2 ulp (log2f),
  2.5 ulp (expf) against float64 numpy.
- `-fno-trapping-math`: we never read FP exception flags, so let gcc speculate and if-convert
  FP operations. `-ffp-contract=fast`: fused multiply-add (gcc's GNU-mode default, spelled
  out). `-fno-finite-math-only`: the default, spelled out because the semantics depend on it.
- Not used: `-fassociative-math` / `-fno-signed-zeros` / `-freciprocal-math`. They would let
  a plain `s += x[i]` loop vectorise (1.5 -> 12 Gelem/s), but `#pragma omp simd reduction(+:s)`
  does the same under the flags above (12.7 Gelem/s), for exactly the loops that ask, and
  keeps -0.0 and the order of every other sum. Max reductions: without finite-math-only
  `m = x > m ? x : m` is neither vectorised (0.75 Gelem/s) nor NaN-propagating (a NaN element
  is skipped). `#pragma omp simd reduction(max:m)` plus `reduction(|:nan)` with
  `nan |= x != x` vectorises (10 Gelem/s) and propagates NaN; so does a 16-lane accumulator
  array updated with `(x > a || x != x) ? x : a` under `#pragma omp simd` (8 Gelem/s).
- `-mprefer-vector-width=512`: AVX-512 where the CPU has it (gcc otherwise tunes many Intel
  targets to 256-bit vectors); ignored on CPUs without AVX-512.

Cache: each translation unit becomes `<sha256>.o` (key: source, flags, header, compiler
identity including what `-march=native` means here, glibc, luminal version); a library is
`<sha256>.so` (key: its object keys and link flags), both under `cache_dir()`, a private
directory (`cache_location`). gcc runs in the cache directory on relative file names, so
objects are byte-identical whatever the directory. Writes go to a unique temporary name in
the same directory and are published with `os.replace`, then described by a manifest
(`cache_files`): a killed compile leaves a temporary that is never read and is removed after
an hour; two processes building the same thing both succeed (the second replace swaps in an
identical file). An artefact is reused, and a library loaded, only when its manifest matches
its bytes; the `.c` and header files are rewritten from memory before gcc reads them. gcc
runs under `LUMINAL_CC_TIMEOUT` seconds (default 300).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from luminal.backends.cpu import cache_files, gcc_runner
from luminal.backends.cpu.cache_files import STALE_TEMP_SECONDS, temp_name
from luminal.backends.cpu.cache_files import TEMP_MARKER as TEMP_MARKER  # re-exported
from luminal.backends.cpu.cache_location import cache_dir, is_private
from luminal.backends.cpu.cache_location import cache_root as cache_root  # re-exported
from luminal.backends.cpu.gcc_runner import TIMEOUT_VARIABLE, cc_timeout, compile_error, run
from luminal.errors import CompileError

# OpenMP threads that finish a kernel spin before sleeping. With the default spin count
# (300k) a second busy process on a 2-core machine made each decode step ~100x slower; a
# shorter spin keeps the fast hand-off between kernels (measured: no loss on bench/cpu.py).
# When other processes already keep the cores busy, any spin loses: ResNet-18 b8 at 2
# threads on 2 cores, load 4-4.7, wall medians 207-315 ms spinning 20000, 220-298 at 3000,
# 115-175 sleeping at once (onnxruntime in the same processes: 160-310). On an idle
# machine sleeping at once costs a futex wake per parallel region (~70 vs ~80-115 ms), so
# the count is chosen from the load when this module is imported (`spin_count`; `import
# luminal` alone does not import it, `lm.CPUCompiler`'s first use does). Set before libgomp
# loads (a library that loaded it earlier, torch, keeps its own settings); a user's own
# GOMP_SPINCOUNT or OMP_WAIT_POLICY wins.
SPIN_COUNT = "20000"
BUSY_LOAD_MARGIN = 0.5  # load above the cores plus this: other processes want them


def spin_count(load: float, cores: int) -> str:
    """GOMP_SPINCOUNT for a 1-minute load average `load` on `cores` cores: threads sleep at
    once when the load exceeds the cores by `BUSY_LOAD_MARGIN` (a benchmark running
    luminal's threads back to back raises the load to about the cores, not above)."""
    return "0" if load > cores + BUSY_LOAD_MARGIN else SPIN_COUNT


def _initial_spin_count() -> str:
    """`spin_count` for the load now; the default count where there is no load average
    (os.getloadavg is Unix-only, and raises OSError where the system has none)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return SPIN_COUNT
    return spin_count(load, os.cpu_count() or 1)


if "OMP_WAIT_POLICY" not in os.environ:  # libgomp lets GOMP_SPINCOUNT override the policy
    os.environ.setdefault("GOMP_SPINCOUNT", _initial_spin_count())

CC = "gcc"
CFLAGS: tuple[str, ...] = (
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fopenmp",
    "-fPIC",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fno-finite-math-only",
)
LDFLAGS: tuple[str, ...] = ("-shared", "-fopenmp", "-Wl,--no-undefined")
LIBS: tuple[str, ...] = ("-lm",)  # after the objects; libm's linker script pulls in libmvec

# Flags added after CFLAGS for one of luminal's own units (by unit name; the last -O
# wins). gemm.c is the longest unit of every cold compile, and most of its -O3 time
# bought nothing: gcc CPU on it (gcc 12, AVX-512) -O3 0.85 s, -O3 -fno-split-loops 0.64,
# -O2 -fpeel-loops -fvect-cost-model=dynamic 0.51, and lm_sgemm / lm_sgemm_ep (column
# bias + relu) ran as fast from each of these (1 and 2 threads, 8 shapes from 8x4096x1024
# to 512x1536x384, interleaved minima within 3%). What matters is -fpeel-loops (complete
# unrolling of the register tile's loops): plain -O2 (0.3 s) ran the products 3x slower;
# the dynamic cost model: without it 64x512x784 was 3-5% slower.
TILE_FLAGS: tuple[str, ...] = ("-O2", "-fpeel-loops", "-fvect-cost-model=dynamic")
# winograd.c multiplies in the same register tile (gemm_tile.c), so it gets the same flags
SUPPORT_FLAGS: dict[str, tuple[str, ...]] = {"lm_gemm": TILE_FLAGS, "lm_winograd": TILE_FLAGS}

SIMD_MATH_HEADER = """\
/* luminal: vector variants of float math (glibc libmvec), declared the way <math.h> does
   under -ffast-math, so loops over expf/exp2f/... vectorise without -ffinite-math-only. */
#include <math.h>
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#define LUMINAL_SIMD __attribute__((__simd__("notinbranch")))
LUMINAL_SIMD float expf(float);
LUMINAL_SIMD float logf(float);
LUMINAL_SIMD float sinf(float);
LUMINAL_SIMD float cosf(float);
#if __GLIBC_PREREQ(2, 35)
LUMINAL_SIMD float exp2f(float);
LUMINAL_SIMD float log2f(float);
LUMINAL_SIMD float tanhf(float);
LUMINAL_SIMD float erff(float);
#endif
#undef LUMINAL_SIMD
#endif
"""

CACHE_FORMAT = "1"  # bump when file layout or key contents change
ELF_MAGIC = b"\x7fELF"
CACHED_LIBRARY = re.compile(r"[0-9a-f]{64}\.so")


# ------------------------------------------------------------------------------ statistics
@dataclass(frozen=True)
class CompileStats:
    """What this process built: objects compiled vs found in the cache, libraries likewise.
    A library found in the cache means its objects were not even looked up."""

    objects_compiled: int = 0
    objects_cached: int = 0
    libraries_linked: int = 0
    libraries_cached: int = 0
    compile_seconds: float = 0.0  # gcc wall time summed over units (parallel units overlap)


_lock = threading.Lock()
_stats: dict[str, float] = {}
_path_locks: dict[str, threading.Lock] = {}
_prepared: set[str] = set()
_support_started: set[str] = set()  # cache folders whose support units were started
_early_started: set[tuple[str, str]] = set()  # (cache folder, object key) of compile_early
_early_threads: list[threading.Thread] = []  # compile_early's, until wait_early
_loaded: dict[str, ctypes.CDLL] = {}


def stats() -> CompileStats:
    """Counters since process start (or the last `reset_stats`)."""
    with _lock:
        values = dict(_stats)
    return CompileStats(
        objects_compiled=int(values.get("objects_compiled", 0)),
        objects_cached=int(values.get("objects_cached", 0)),
        libraries_linked=int(values.get("libraries_linked", 0)),
        libraries_cached=int(values.get("libraries_cached", 0)),
        compile_seconds=values.get("compile_seconds", 0.0),
    )


def reset_stats() -> None:
    with _lock:
        _stats.clear()


def _bump(counter: str, amount: float = 1) -> None:
    with _lock:
        _stats[counter] = _stats.get(counter, 0) + amount


# ------------------------------------------------------------------------------ keys
def _digest(*parts: str) -> str:
    """SHA-256 of length-prefixed parts, so ("ab", "c") and ("a", "bc") differ."""
    sha = hashlib.sha256()
    for part in parts:
        data = part.encode()
        sha.update(len(data).to_bytes(8, "little"))
        sha.update(data)
    return sha.hexdigest()


@functools.cache
def compiler_identity() -> str:
    """gcc's version, configuration and what `-march=native` expands to on this CPU, plus
    the C library: everything outside the source that changes the machine code."""
    try:
        probe = subprocess.run(
            [CC, "-###", "-march=native", "-E", "-x", "c", os.devnull],
            capture_output=True,
            text=True,
            check=False,
            timeout=cc_timeout(),
        )
    except FileNotFoundError as error:
        raise CompileError(
            f"the CPU backend needs the C compiler {CC!r}, which was not found on PATH"
        ) from error
    except subprocess.TimeoutExpired as error:
        raise CompileError(
            f"asking {CC!r} for its version did not finish within {error.timeout:g} s "
            f"({TIMEOUT_VARIABLE})"
        ) from None
    libc = "-".join(platform.libc_ver())
    return "\n".join([probe.stderr.strip(), f"libc {libc}", f"machine {platform.machine()}"])


def _luminal_version() -> str:
    import luminal

    return str(getattr(luminal, "__version__", "unknown"))


@functools.cache
def build_id() -> str:
    """What every manifest must name: cache format, luminal version, compiler identity."""
    return _digest("luminal-build", CACHE_FORMAT, _luminal_version(), compiler_identity())


def _compile_flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return CFLAGS + extra + _blas_include_flags()


def object_key(source: str, extra_flags: tuple[str, ...] = ()) -> str:
    """The cache key (and file stem) of the object compiled from `source` (with
    `extra_flags` after CFLAGS)."""
    return _digest(
        "luminal-object",
        CACHE_FORMAT,
        _luminal_version(),
        compiler_identity(),
        "\0".join(_compile_flags(extra_flags)),
        SIMD_MATH_HEADER,
        source,
    )


@functools.cache
def _linker() -> tuple[str, ...]:
    """gold where it is installed: it links a graph's library (the BLAS and luminal's
    support objects included) in about a third of GNU ld's CPU time (0.07 vs 0.19 s for
    the MLP's), and the link is the last step of every cold compile."""
    return ("-fuse-ld=gold",) if shutil.which("ld.gold") else ()


def _link_flags(link_blas: bool) -> tuple[str, ...]:
    return LDFLAGS + _linker() + (blas_flags().ldflags if link_blas else ()) + LIBS


def library_key(object_keys: Sequence[str], link_blas: bool) -> str:
    """The cache key of the shared object linked from objects with these keys."""
    return _digest(
        "luminal-library",
        CACHE_FORMAT,
        compiler_identity(),
        "\0".join(_link_flags(link_blas)),
        *object_keys,
    )


# ------------------------------------------------------------------------------ files
def _is_elf(path: Path) -> bool:
    """gcc's output starts like an ELF file (a cheap check before it is published)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == ELF_MAGIC
    except OSError:
        return False


def _cached(artefact: Path, key: str) -> bool:
    """The artefact exists and matches its manifest (hashed once per process)."""
    return cache_files.verify(artefact, key, build_id()) is not None


def clean_stale_temps(directory: Path | None = None, max_age: float = STALE_TEMP_SECONDS) -> int:
    """Remove temporaries older than `max_age` seconds (left by killed compiles)."""
    return cache_files.clean_stale_temps(cache_dir() if directory is None else directory, max_age)


def _prepare(directory: Path) -> None:
    """Sweep stale temporaries once per directory and process."""
    key = os.fspath(directory)
    with _lock:
        first = key not in _prepared
        _prepared.add(key)
    if first:
        clean_stale_temps(directory)


def _header_name() -> str:
    return f"simd_math-{_digest(SIMD_MATH_HEADER)[:16]}.h"


def _path_lock(path: Path) -> threading.Lock:
    with _lock:
        return _path_locks.setdefault(os.fspath(path), threading.Lock())


def _debug_level() -> int:
    try:
        return int(os.environ.get("LUMINAL_DEBUG", "0") or 0)
    except ValueError:
        return 0


# ------------------------------------------------------------------------------ compiling
@dataclass(frozen=True)
class _Unit:
    name: str
    source: str
    key: str
    flags: tuple[str, ...] = ()  # after CFLAGS


def _units(sources: Iterable[tuple[str, str]], support: bool = False) -> list[_Unit]:
    """One unit per distinct source, in first-seen order (identical units would collide);
    `support`: luminal's own units, compiled with their SUPPORT_FLAGS."""
    seen: dict[str, _Unit] = {}
    for name, source in sources:
        flags = SUPPORT_FLAGS.get(name, ()) if support else ()
        key = object_key(source, flags)
        seen.setdefault(key, _Unit(name, source, key, flags))
    return list(seen.values())


def compile_object(source: str, name: str = "kernel") -> Path:
    """Compile one translation unit to an object file (or find it in the cache)."""
    directory = cache_dir()
    _prepare(directory)
    return _compile_unit(_Unit(name, source, object_key(source)), directory)


def compile_objects(
    sources: Sequence[tuple[str, str]], max_workers: int | None = None
) -> list[Path]:
    """Compile `(name, source)` units in parallel (gcc subprocesses, one per core by
    default); returns one object path per distinct source, in order."""
    directory = cache_dir()
    _prepare(directory)
    return _compile_all(_units(sources), directory, max_workers)


def _compile_all(units: list[_Unit], directory: Path, max_workers: int | None) -> list[Path]:
    workers = min(max_workers or _cpu_count(), len(units))
    if workers <= 1:
        return [_compile_unit(unit, directory) for unit in units]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="luminal-gcc") as pool:
        futures = [pool.submit(_compile_unit, unit, directory) for unit in units]
        try:
            errors = [f.exception() for f in futures if f.exception() is not None]
        except BaseException:  # KeyboardInterrupt: gcc runs in its own session, stop it
            gcc_runner.stop_running()
            raise
        if errors:
            first = errors[0]
            if len(errors) > 1:
                raise CompileError(f"{first}\n({len(errors) - 1} more unit(s) failed)") from first
            raise first
        return [f.result() for f in futures]


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _compile_unit(unit: _Unit, directory: Path) -> Path:
    final = directory / f"{unit.key}.o"
    if _cached(final, unit.key):
        _bump("objects_cached")
        return final
    with _path_lock(final):
        if _cached(final, unit.key):  # another thread of this process just built it
            _bump("objects_cached")
            return final
        source_file = directory / f"{unit.key}.c"
        cache_files.ensure_content(source_file, unit.source.encode())
        cache_files.ensure_content(directory / _header_name(), SIMD_MATH_HEADER.encode())
        temp = directory / temp_name(final)
        command = [CC, *_compile_flags(unit.flags), "-include", _header_name()]
        command += ["-c", source_file.name, "-o", temp.name]
        result, seconds = run(command, directory, f"compiling {unit.name!r} ({source_file})")
        if result.returncode != 0 or not _is_elf(temp):
            cache_files.unlink(temp)
            raise CompileError(compile_error(unit.name, unit.source, result, source_file))
        cache_files.publish(temp, final, durable=False)
        inputs = (
            (source_file.name, cache_files.sha256_text(unit.source)),
            (_header_name(), cache_files.sha256_text(SIMD_MATH_HEADER)),
        )
        cache_files.record(final, unit.key, build_id(), inputs, durable=False)
    _bump("objects_compiled")
    _bump("compile_seconds", seconds)
    if _debug_level() >= 2:
        print(f"[luminal] compiled {unit.name} in {seconds * 1e3:.0f} ms", file=sys.stderr)
    return final


# ------------------------------------------------------------------------------ linking
def link_shared(objects: Sequence[Path], link_blas: bool = False, name: str = "library") -> Path:
    """Link object files made by `compile_object(s)` into a cached shared object."""
    directory = cache_dir()
    _prepare(directory)
    final = directory / f"{library_key([Path(p).stem for p in objects], link_blas)}.so"
    if _cached(final, final.stem):
        _bump("libraries_cached")
        return final
    return _link([Path(p) for p in objects], final, link_blas, name)


def build_shared(sources: Sequence[tuple[str, str]], link_blas: bool = False) -> Path:
    """Compile `(name, source)` units (in parallel, cached) and link them into one shared
    object; with everything cached this costs hashing and one `stat`. A library linking
    the BLAS also gets luminal's `lm_sgemm` (`gemm.c`), which the sgemm kernels call, and
    the other support units its kernels call (`_support_sources`)."""
    units = _units(sources)
    if link_blas:
        units += _units(_support_sources(sources), support=True)
    if not units:
        raise CompileError("build_shared needs at least one (name, source) unit")
    directory = cache_dir()
    final = directory / f"{library_key([u.key for u in units], link_blas)}.so"
    if _cached(final, final.stem):
        _bump("libraries_cached")
        return final
    _prepare(directory)  # the sweep lists the whole cache: only when something is built
    objects = _compile_all(units, directory, None)
    return _link(objects, final, link_blas, ", ".join(u.name for u in units[:4]))


def _support_sources(kernels: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """luminal's own units: `lm_sgemm` (`gemm.c`) and `lm_sgemm_rows` (`gemv.c`) for
    every library linking the BLAS; the half-precision products (`gemm_bf16.c`, ~0.5 s of
    gcc on a cold cache, which every float32 graph paid while it was always linked) and
    the fused Winograd convolution (`winograd.c`) only where one of `kernels` names them.
    None: the units every such library gets (what a compile may start building before
    its kernels exist)."""
    from luminal.backends.cpu import gemm_bf16, gemv, winograd
    from luminal.backends.cpu.gemm import support_unit

    units = [support_unit(blas_flags().sgemm), gemv.support_unit()]
    half = ("lm_gemm_bf16", "lm_gemm_f16")  # gemm_bf16.c's entry points
    if kernels is not None and any(name in source for _, source in kernels for name in half):
        units.append(gemm_bf16.support_unit())
    # winograd.c (~2.5 s of gcc) likewise, where a kernel calls lm_winograd(_ep)
    if kernels is not None and any(winograd.NAME in source for _, source in kernels):
        units.append(winograd.support_unit())
    return units


def start_support_units() -> None:
    """Compile the support units (`_support_sources`) on background threads, once per
    cache and process, when the cache lacks them: they do not depend on the graph, so on
    a cold cache gcc spends the ~1 s gemm.c takes while the e-graph and lowering work,
    and `build_shared` finds them built (or waits on their lock). A failure here is left
    to `build_shared`, which compiles the unit again and reports it."""
    directory = cache_dir()
    with _lock:
        if os.fspath(directory) in _support_started:
            return
        _support_started.add(os.fspath(directory))
    _prepare(directory)
    for unit in _units(_support_sources(), support=True):
        if not _cached(directory / f"{unit.key}.o", unit.key):
            thread = threading.Thread(
                target=_try_compile, args=(unit, directory), name=unit.name, daemon=True
            )
            thread.start()


def compile_early(name: str, source: str) -> None:
    """Start compiling one unit on a background thread when the cache lacks it (at most
    one such gcc per core at a time). Lowering calls this as it renders each kernel, so
    gcc works on the first kernels while Python lowers the next ones (MiniLM: 0.67 s of
    lowering, then ~1 s of gcc on its kernels); `build_shared` then finds them built, or
    waits on their lock. A unit nobody links is only a cache entry; a failure is left to
    `build_shared`, which compiles the unit again and reports it."""
    directory = cache_dir()
    unit = _units([(name, source)])[0]
    with _lock:
        if (os.fspath(directory), unit.key) in _early_started:
            return
        _early_started.add((os.fspath(directory), unit.key))
    if _cached(directory / f"{unit.key}.o", unit.key):
        return
    _prepare(directory)  # the sweep lists the whole cache: only when something is built
    thread = threading.Thread(
        target=_compile_early, args=(unit, directory), name=unit.name, daemon=True
    )
    with _lock:
        _early_threads.append(thread)
    thread.start()


def wait_early() -> None:
    """Wait for the units `compile_early` started, linked or not (a kernel lowering
    rendered that a later step absorbed): a compile then leaves no gcc running behind
    it, and this process's statistics stop changing."""
    with _lock:
        threads = list(_early_threads)
        _early_threads.clear()
    for thread in threads:
        thread.join()


_early_slots = threading.BoundedSemaphore(_cpu_count())


def _compile_early(unit: _Unit, directory: Path) -> None:
    with _early_slots:
        _try_compile(unit, directory)


def _try_compile(unit: _Unit, directory: Path) -> None:
    # a failure is build_shared's to report: it compiles the unit again
    with contextlib.suppress(CompileError, OSError):
        _compile_unit(unit, directory)


def _link(objects: list[Path], final: Path, link_blas: bool, name: str) -> Path:
    directory = final.parent
    with _path_lock(final):
        if _cached(final, final.stem):
            _bump("libraries_cached")
            return final
        temp = directory / temp_name(final)
        inputs = [p.name if p.parent == directory else os.fspath(p.absolute()) for p in objects]
        command = [CC, *LDFLAGS, *_linker(), *inputs, "-o", temp.name]
        command += [*(blas_flags().ldflags if link_blas else ()), *LIBS]
        result, seconds = run(command, directory, f"linking {name} ({final})")
        if result.returncode != 0 or not _is_elf(temp):
            cache_files.unlink(temp)
            raise CompileError(
                f"linking {name} failed (exit status {result.returncode}):\n"
                f"{(result.stderr or result.stdout).strip()}\ncommand: {' '.join(command)}"
            )
        cache_files.publish(temp, final, durable=True)
        cache_files.record(final, final.stem, build_id(), _link_inputs(objects), durable=True)
    _bump("libraries_linked")
    _bump("compile_seconds", seconds)
    return final


def _link_inputs(objects: list[Path]) -> tuple[tuple[str, str], ...]:
    """(name, sha256) of each object and of the source it was compiled from, read from the
    objects' manifests (verified moments ago, so no hashing) or hashed when they have none."""
    inputs: list[tuple[str, str]] = []
    for path in objects:
        manifest = cache_files.verify(path, path.stem, build_id())
        if manifest is None:
            inputs.append((path.name, hashlib.sha256(path.read_bytes()).hexdigest()))
        else:
            inputs.append((path.name, manifest.sha256))
            inputs.extend(manifest.inputs[:1])  # the source; the header is the same for all
    return tuple(inputs)


def load(path: str | os.PathLike[str]) -> ctypes.CDLL:
    """dlopen a shared object once per process (later calls return the same handle). A
    library of the kernel cache is loaded only from a private directory, as a private copy
    whose bytes match its manifest (`cache_files.verified_copy`)."""
    key = os.fspath(Path(path).resolve())
    with _lock:
        library = _loaded.get(key)
    if library is None:
        library = _open_library(Path(os.path.abspath(path)))
        with _lock:
            library = _loaded.setdefault(key, library)
    return library


def _open_library(path: Path) -> ctypes.CDLL:
    if not CACHED_LIBRARY.fullmatch(path.name):
        return _dlopen(path, path)  # not one of ours (OpenBLAS, a user's library)
    if not is_private(path.parent):
        raise CompileError(
            f"not loading {path}: its directory is not private to you (owned by you, mode 0700), "
            f"so anyone could have written it; compile with the default cache or a private "
            f"LUMINAL_CACHE_DIR"
        )
    copy = _verified_copy_settled(path)
    if copy is None:
        raise CompileError(
            f"not loading {path}: it does not match its manifest (missing, truncated, edited or "
            f"another library); compiling again rebuilds it"
        )
    try:
        return _dlopen(copy, path)
    finally:
        cache_files.unlink(copy)


# Another process linking the same library (ranks of one job on a cold cache) renames
# its file into place, then writes its manifest: a reader between the two sees bytes that
# match no manifest yet. Retrying for a moment lets that writer finish; a file that still
# does not match is refused.
SETTLE_DELAYS = (0.02, 0.05, 0.1, 0.2, 0.4)


def _verified_copy_settled(path: Path) -> Path | None:
    copy = cache_files.verified_copy(path, path.stem, build_id())
    for delay in SETTLE_DELAYS:
        if copy is not None:
            break
        time.sleep(delay)
        copy = cache_files.verified_copy(path, path.stem, build_id())
    return copy


def _dlopen(path: Path, shown: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(os.fspath(path))
    except OSError as error:
        raise CompileError(f"could not load compiled library {shown}: {error}") from error


# ------------------------------------------------------------------------------ BLAS
@dataclass(frozen=True)
class BlasFlags:
    """How generated C reaches OpenBLAS from the `scipy-openblas32` wheel (32-bit ints;
    every symbol carries the `scipy_` prefix, e.g. `scipy_cblas_sgemm`)."""

    include_dir: str
    lib_dir: str
    library_file: str  # absolute path, for ctypes
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    sgemm: str = "scipy_cblas_sgemm"
    set_num_threads: str = "scipy_openblas_set_num_threads"
    get_num_threads: str = "scipy_openblas_get_num_threads"


MKL_RUNTIME = "libmkl_rt.so.3"


def _mkl_dir() -> str | None:
    """Where the `mkl` wheel put its runtime library (its data files go to sys.prefix)."""
    for directory in (os.path.join(sys.prefix, "lib"), os.path.join(sys.base_prefix, "lib")):
        if os.path.exists(os.path.join(directory, MKL_RUNTIME)):
            return directory
    return None


@functools.cache
def blas_flags() -> BlasFlags:
    """MKL when the `mkl` wheel is installed (faster sgemm at the small shapes of
    inference here: 64x784x512 in 0.17 ms against OpenBLAS's 0.24 ms), else OpenBLAS from
    `scipy-openblas32`; `LUMINAL_BLAS=openblas` forces OpenBLAS. MKL runs on the GNU
    OpenMP threading layer, the one the kernels use."""
    mkl_dir = _mkl_dir() if os.environ.get("LUMINAL_BLAS", "mkl") != "openblas" else None
    if mkl_dir is not None:
        os.environ.setdefault("MKL_THREADING_LAYER", "GNU")
        return BlasFlags(
            include_dir="",
            lib_dir=mkl_dir,
            library_file=os.path.join(mkl_dir, MKL_RUNTIME),
            cflags=(),
            ldflags=(f"-L{mkl_dir}", f"-l:{MKL_RUNTIME}", f"-Wl,-rpath,{mkl_dir}"),
            sgemm="cblas_sgemm",
            set_num_threads="MKL_Set_Num_Threads",
            get_num_threads="MKL_Get_Max_Threads",
        )
    try:
        import scipy_openblas32
    except ImportError as error:
        raise CompileError(
            "linking BLAS needs the 'scipy-openblas32' package (pip install scipy-openblas32)"
        ) from error
    include_dir = scipy_openblas32.get_include_dir()
    lib_dir = scipy_openblas32.get_lib_dir()
    library = scipy_openblas32.get_library()  # "scipy_openblas"
    return BlasFlags(
        include_dir=include_dir,
        lib_dir=lib_dir,
        library_file=os.path.join(lib_dir, scipy_openblas32.get_library(fullname=True)),
        cflags=(f"-I{include_dir}",),
        ldflags=(f"-L{lib_dir}", f"-l{library}", f"-Wl,-rpath,{lib_dir}"),
    )


def _blas_include_flags() -> tuple[str, ...]:
    """`-I` for <cblas.h> on every unit when the wheel is installed (it is a dependency)."""
    try:
        return blas_flags().cflags
    except CompileError:
        return ()


# ------------------------------------------------------------------------------ threads
class ThreadCounts(NamedTuple):
    openmp: int
    blas: int | None  # None when scipy-openblas32 is not installed


@functools.cache
def _libgomp() -> ctypes.CDLL:
    # the kernels' NEEDED entry is "libgomp.so.1"; dlopen by that name finds the same copy
    return ctypes.CDLL("libgomp.so.1")


def _openblas() -> ctypes.CDLL | None:
    try:
        return load(blas_flags().library_file)
    except CompileError:
        return None


def set_num_threads(count: int) -> None:
    """Threads for OpenMP kernels launched from the calling thread (`omp_set_num_threads`
    sets the calling thread's ICV; other threads keep `OMP_NUM_THREADS` or the core count)
    and for OpenBLAS calls (process-wide). numpy's and PyTorch's own BLAS and OpenMP
    copies are separate libraries and are not affected."""
    if count < 1:
        raise ValueError(f"set_num_threads needs a positive count, got {count}")
    _libgomp().omp_set_num_threads(ctypes.c_int(count))
    blas = _openblas()
    if blas is not None:
        getattr(blas, blas_flags().set_num_threads)(ctypes.c_int(count))


def get_num_threads() -> ThreadCounts:
    """OpenMP's `omp_get_max_threads()` in the calling thread and OpenBLAS's thread count."""
    blas = _openblas()
    blas_threads = getattr(blas, blas_flags().get_num_threads)() if blas is not None else None
    return ThreadCounts(openmp=_libgomp().omp_get_max_threads(), blas=blas_threads)

"""CUDA toolchain: one CUDA C module (every kernel of a graph) to PTX and a cubin per
architecture, checked by ptxas, cached on disk.

For each architecture NVRTC writes PTX for the virtual target (`compute_90`, which the
driver can also JIT for newer GPUs) and `ptxas` assembles it for the real one (`sm_90`):
that assembly is both the cubin and the check that a GPU would load it. Without ptxas the
cubin comes from NVRTC itself (which runs the same assembler inside).

The cache (`<luminal cache>/cuda-kernels/`) follows the CPU kernel cache's trust rules
(`backends/cpu/cache_location.py`, `cache_files.py`): a private directory of the user's,
artefacts written atomically with a manifest, and bytes used only when they hash to what
the manifest records; the key holds the source and the architecture, the build id NVRTC's
and ptxas's versions, so a new toolchain rebuilds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import luminal
from luminal.backends.cpu import cache_files, cache_location
from luminal.backends.cuda import nvrtc, ptxas
from luminal.errors import CompileError

CACHE_FORMAT = "1"  # bump when file layout or key contents change
KERNELS = "cuda-kernels"
DEFAULT_ARCHES = ("sm_80", "sm_90")
OPTIONS = ("--std=c++17",)

_stats: Counter[str] = Counter()
_stats_lock = threading.Lock()


@dataclass(frozen=True)
class ArchBinary:
    """One architecture's PTX (`.target` the virtual arch) and cubin."""

    arch: str
    ptx: bytes
    cubin: bytes


@dataclass(frozen=True)
class CudaModule:
    """A built module: its source, its kernels' names and a binary per architecture."""

    source: str
    kernels: tuple[str, ...]
    binaries: dict[str, ArchBinary]

    def image_for(self, capability: tuple[int, int]) -> tuple[str, bytes]:
        """What to load on a device of compute capability `capability`: the cubin built for
        exactly it, else the PTX of the newest architecture not above it (JIT by the
        driver); CompileError when every architecture is newer than the device."""
        exact = f"sm_{capability[0]}{capability[1]}"
        if exact in self.binaries:
            return "cubin", self.binaries[exact].cubin
        own = capability[0] * 10 + capability[1]
        usable = [a for a in self.binaries if nvrtc.arch_number(a) <= own]
        if not usable:
            raise CompileError(
                f"CUDA: the module was built for {sorted(self.binaries)}, all newer than the "
                f"device ({exact}); add {exact!r} to CUDACompiler(arch=...)"
            )
        return "ptx", self.binaries[max(usable, key=nvrtc.arch_number)].ptx


def stats() -> dict[str, int]:
    """Counts since the last reset: NVRTC compiles, ptxas runs, cache hits (per arch)."""
    with _stats_lock:
        return dict(_stats)


def reset_stats() -> None:
    with _stats_lock:
        _stats.clear()


def _bump(counter: str) -> None:
    with _stats_lock:
        _stats[counter] += 1


def _digest(*parts: str) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode())
        sha.update(b"\0")
    return sha.hexdigest()[:32]


def build_id() -> str:
    """What the artefacts were made with: NVRTC's and ptxas's versions, luminal's."""
    major, minor = nvrtc.version()
    assembler = ptxas.version() or "nvrtc"
    return _digest("cuda-build", CACHE_FORMAT, luminal.__version__, f"{major}.{minor}", assembler)


def cache_dir() -> Path:
    """`cuda-kernels` beside the CPU kernels, under the same trusted private root."""
    folder = cache_location.cache_root() / KERNELS
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, cache_location.PRIVATE_DIRECTORY)
    if not cache_location.is_private(folder):
        raise CompileError(
            f"the CUDA kernel cache {folder} is not a private directory of yours (others could "
            f"write code into it); remove it (rm -rf '{folder}') or set "
            f"{cache_location.ENVIRONMENT_VARIABLE} to a directory you own with mode 0700"
        )
    return folder


def build(
    source: str, kernels: Sequence[str], arches: Sequence[str] = DEFAULT_ARCHES, name: str = "graph"
) -> CudaModule:
    """PTX and cubin of `source` for every architecture in `arches`, from the cache when
    there. CompileError names the kernel and architecture NVRTC or ptxas rejected."""
    names = tuple(kernels)
    binaries = {arch: _build_arch(source, names, nvrtc.check_arch(arch), name) for arch in arches}
    return CudaModule(source, names, binaries)


def _build_arch(source: str, kernels: tuple[str, ...], arch: str, name: str) -> ArchBinary:
    key = _digest("cuda-module", source, arch, *OPTIONS)
    build = build_id()
    folder = cache_dir()
    ptx_path, cubin_path = folder / f"{key}.ptx", folder / f"{key}.cubin"
    ptx, cubin = _cached(ptx_path, key, build), _cached(cubin_path, key, build)
    if ptx is not None and cubin is not None:
        _bump("hits")
        return ArchBinary(arch, ptx, cubin)
    ptx = nvrtc.compile_source(source, name, nvrtc.virtual_arch(arch), OPTIONS).ptx
    _bump("nvrtc")
    _check_entries(ptx, kernels, arch)
    if ptxas.find() is not None:
        cubin = ptxas.assemble(ptx, arch, kernels)
        _bump("ptxas")
    else:
        cubin = nvrtc.compile_source(source, name, arch, OPTIONS).cubin
        _bump("nvrtc")
    inputs = (("source", cache_files.sha256_text(source)),)
    for path, data in ((ptx_path, ptx), (cubin_path, cubin)):
        cache_files.write_private(path, data)
        cache_files.record(path, key, build, inputs, durable=False)
    return ArchBinary(arch, ptx, cubin)


def _check_entries(ptx: bytes, kernels: tuple[str, ...], arch: str) -> None:
    """CompileError for a kernel the module does not export under its own name (a custom
    kernel without `extern "C"` gets a C++-mangled name the runtime cannot look up)."""
    absent = [k for k in kernels if f".entry {k}(".encode() not in ptx]
    if absent:
        raise CompileError(
            f"CUDA: kernel(s) {absent} are not exported under their names for {arch}; a "
            'kernel must be declared extern "C" __global__ void name(...)'
        )


def _cached(path: Path, key: str, build: str) -> bytes | None:
    """The bytes of a cached artefact when they are what its manifest records."""
    manifest = cache_files.verify(path, key, build)
    if manifest is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == manifest.sha256 else None

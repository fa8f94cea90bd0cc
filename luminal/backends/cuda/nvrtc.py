"""NVRTC: CUDA C to PTX and cubin in-process, no GPU and no nvcc needed.

The library comes from the PyPI wheel `nvidia-cuda-nvrtc-cu12` (loaded by `cuda-python`'s
bindings); `cuda_fp16.h`, `cuda_bf16.h` and `mma.h` come from `nvidia-cuda-runtime-cu12`
and `nvidia-cuda-nvcc-cu12` (`crt/mma.h`), found next to it, so a kernel can include them
without a CUDA toolkit on the machine.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luminal.errors import CompileError

ARCH = re.compile(r"sm_(\d+)a?")
INSTALL_HINT = "pip install 'luminal[cuda]'"
# packages whose include/ folders hold headers a kernel may include
HEADER_PACKAGES = ("nvidia.cuda_runtime", "nvidia.cuda_nvcc")


@dataclass(frozen=True)
class Compiled:
    """What NVRTC made of one source for one architecture (`cubin` empty when asked for a
    virtual architecture only)."""

    ptx: bytes
    cubin: bytes
    log: str


def check_arch(arch: str) -> str:
    """`arch` when it names a real architecture (`sm_80`, `sm_90a`); CompileError otherwise."""
    if not ARCH.fullmatch(arch):
        raise CompileError(f"CUDA: unknown architecture {arch!r}; expected a name like 'sm_80'")
    return arch


def arch_number(arch: str) -> int:
    """10 * major + minor of an architecture name: sm_90a -> 90."""
    return int(ARCH.fullmatch(check_arch(arch)).group(1))


def virtual_arch(arch: str) -> str:
    """The PTX target of a real architecture: sm_90a -> compute_90a."""
    return "compute_" + check_arch(arch)[3:]


@functools.cache
def _bindings() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise CompileError(
            f"CUDA: NVRTC needs cuda-python and nvidia-cuda-nvrtc-cu12 ({INSTALL_HINT}): {error}"
        ) from None
    return nvrtc


def missing() -> str | None:
    """Why NVRTC cannot be used here (None when it can)."""
    try:
        version()
    except CompileError as error:
        return str(error)
    return None


@functools.cache
def version() -> tuple[int, int]:
    """NVRTC's (major, minor); CompileError naming what is missing when it cannot load."""
    nvrtc = _bindings()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as error:  # the library itself could not be loaded
        raise CompileError(
            f"CUDA: libnvrtc could not be loaded ({INSTALL_HINT}): {error}"
        ) from None
    _check(nvrtc, result, "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """Header folders of the NVIDIA wheels that are installed."""
    found = []
    for package in HEADER_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            continue
        locations = spec.submodule_search_locations if spec is not None else None
        for location in locations or ():
            include = Path(location) / "include"
            if include.is_dir():
                found.append(str(include))
    return tuple(found)


def compile_source(source: str, name: str, target: str, options: tuple[str, ...]) -> Compiled:
    """Compile `source` for `target` (`sm_XX`: PTX and cubin; `compute_XX`: PTX only).
    CompileError carries NVRTC's log, which names the kernel and the line."""
    nvrtc = _bindings()
    version()
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(nvrtc, result, "nvrtcCreateProgram")
    try:
        flags = [f"--gpu-architecture={target}", *options]
        flags += [f"--include-path={folder}" for folder in include_dirs()]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
        log = _log(nvrtc, program)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"CUDA: NVRTC could not compile {name} for {target}:\n{log}")
        ptx = _read(nvrtc, program, "PTX")
        cubin = _read(nvrtc, program, "CUBIN") if target.startswith("sm_") else b""
        return Compiled(ptx, cubin, log)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _read(nvrtc: Any, program: Any, what: str) -> bytes:
    result, size = getattr(nvrtc, f"nvrtcGet{what}Size")(program)
    _check(nvrtc, result, f"nvrtcGet{what}Size")
    buffer = b"\0" * size
    (result,) = getattr(nvrtc, f"nvrtcGet{what}")(program, buffer)
    _check(nvrtc, result, f"nvrtcGet{what}")
    return buffer.rstrip(b"\0") if what == "PTX" else buffer


def _log(nvrtc: Any, program: Any) -> str:
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buffer = b"\0" * size
    nvrtc.nvrtcGetProgramLog(program, buffer)
    return buffer.rstrip(b"\0").decode(errors="replace").strip()


def _check(nvrtc: Any, result: Any, call: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(result)
        raise CompileError(f"CUDA: {call} failed: {text.decode(errors='replace')}")

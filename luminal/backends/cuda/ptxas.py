"""`ptxas`: assemble PTX for one architecture, the check that PTX a GPU would accept.

NVRTC accepts kernels that no GPU can load (64 KB of static shared memory where the limit
is 48 KB, too many registers for the block size); `ptxas` rejects them. It is looked for
in the `nvidia-cuda-nvcc-cu12` wheel first (the same release as NVRTC, so it reads its
PTX version), then on PATH, then under `$CUDA_HOME`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from luminal.errors import CompileError

ENTRY = re.compile(r"[Ee]ntry function '([^']+)'")
TIMEOUT_SECONDS = 120.0


@functools.cache
def find() -> str | None:
    """Path of the ptxas to use, or None."""
    for candidate in (_wheel_ptxas(), shutil.which("ptxas"), _cuda_home_ptxas()):
        if candidate is not None and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _wheel_ptxas() -> Path | None:
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except ModuleNotFoundError:
        return None
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(location) / "bin" / "ptxas"
        if path.is_file():
            return path
    return None


def _cuda_home_ptxas() -> Path | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    path = Path(home) / "bin" / "ptxas" if home else None
    return path if path is not None and path.is_file() else None


@functools.cache
def version() -> str:
    """The release line of the ptxas found ('release 12.9, V12.9.86'), or '' without one."""
    path = find()
    if path is None:
        return ""
    text = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"release [^\n]*", text.stdout)
    return found.group(0) if found else text.stdout.strip()


def assemble(ptx: bytes, arch: str, kernels: tuple[str, ...]) -> bytes:
    """The cubin of `ptx` for `arch`. A rejection raises CompileError naming the kernel
    (from ptxas's message, else every kernel of the module), the architecture and why."""
    path = find()
    if path is None:
        raise CompileError(
            "CUDA: ptxas not found (install nvidia-cuda-nvcc-cu12, put a CUDA toolkit's bin on "
            "PATH, or set CUDA_HOME)"
        )
    with tempfile.TemporaryDirectory(prefix="luminal-ptxas-") as folder:
        source, target = Path(folder) / "module.ptx", Path(folder) / "module.cubin"
        source.write_bytes(ptx)
        command = [path, f"-arch={arch}", str(source), "-o", str(target)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise CompileError(
                f"CUDA: ptxas took over {TIMEOUT_SECONDS:.0f} s for kernels {list(kernels)} "
                f"on {arch}"
            ) from None
        if done.returncode != 0:
            raise CompileError(_rejection(done.stderr or done.stdout, arch, kernels))
        return target.read_bytes()


def _rejection(message: str, arch: str, kernels: tuple[str, ...]) -> str:
    named = list(dict.fromkeys(ENTRY.findall(message)))
    who = f"kernel {named[0]!r}" if len(named) == 1 else f"kernels {named or list(kernels)}"
    return f"CUDA: ptxas rejected {who} for {arch}: {message.strip()}"

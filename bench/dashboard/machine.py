"""What a result depends on besides the code: the machine, the commit, the peers' versions."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# peer name in the rows -> the distribution whose version it runs
PEER_PACKAGES = {
    "PyTorch eager": "torch",
    "PyTorch eager (transformers)": "transformers",
    "onnxruntime": "onnxruntime",
    "numpy": "numpy",
}


def cpu_model() -> str:
    """The processor's model name from /proc/cpuinfo (else what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The machine a run measured, and a short name for file names."""
    model, cores = cpu_model(), os.cpu_count() or 0
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:40] or "cpu"
    return {
        "cpu": model,
        "cores": cores,
        "arch": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "memory_gib": _memory_gib(),
        "slug": f"{slug}-{cores}c",
    }


def describe(info: dict) -> str:
    """One line: `AMD EPYC, 2 cores, x86_64, 23 GiB`."""
    return f"{info['cpu']}, {info['cores']} cores, {info['arch']}, {info['memory_gib']} GiB"


def _memory_gib() -> int | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages / 2**30)


def commit() -> dict:
    """luminal's commit, and whether luminal/ had uncommitted changes when measured."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)

    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    dirty = git("diff", "--quiet", "HEAD", "--", "luminal").returncode != 0
    return {"commit": head.stdout.strip(), "dirty": dirty}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def peers() -> dict[str, str]:
    """Every peer the dashboard knows, with its version, or why it has no figures."""
    found = {
        name: (
            f"{package} {version}" if (version := _version(package)) else "absent: not installed"
        )
        for name, package in PEER_PACKAGES.items()
    }
    found["torch.compile"] = "absent: no bench in bench/ runs torch.compile"
    llama_cpp = importlib.util.find_spec("llama_cpp") or shutil.which("llama-bench")
    found["llama.cpp"] = (
        "installed: bench/quantized.py runs the same GGUF file through it"
        if llama_cpp
        else "absent: not installed (no llama_cpp module, no llama-bench); not measured"
    )
    return found

"""A user's Metal kernel inside a graph (`lm.custom_kernel(..., backend="metal")`) off
Apple hardware: the library holds it once, as written, beside the generated kernels, and
the whole library type-checks against the stand-in `metal_stdlib`; a CUDA-only kernel is
refused by name."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from tests.backends.cuda.test_custom import CUDA, METAL, ScaledAdd, graph

SHIM = Path(__file__).parent / "shim"


def test_a_metal_kernel_is_in_the_library_and_type_checks(tmp_path: Path) -> None:
    cx, *_ = graph(np.random.default_rng(0), METAL, reference=ScaledAdd(), backend="metal")
    source = lm.MetalCompiler().render(cx)
    assert source.count("kernel void scaled_add(") == 1 and METAL in source
    path = tmp_path / "custom.metal"
    path.write_text(source)
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", f"-I{SHIM}", "-x", "c++"]
    done = subprocess.run([*command, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:2000]


def test_a_cuda_only_kernel_is_refused_by_name() -> None:
    cx, *_ = graph(np.random.default_rng(0), CUDA, reference=ScaledAdd(), backend="cuda")
    with pytest.raises(lm.CompileError, match="'scaled_add' has no metal source.*it has cuda"):
        lm.MetalCompiler().render(cx)

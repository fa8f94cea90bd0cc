"""float16 on OpenCL: arithmetic in `half` where the device reports `cl_khr_fp16` (kernels
without reductions; sums and products accumulate in float), else values read as float
(`vload_half`) and rounded to half after every op. PoCL on a CPU reports no
`cl_khr_fp16`, so here the fallback runs and the half path is checked as source (and by
clang's OpenCL front end where clang is installed: Debian's PoCL depends on it)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import luminal as lm
from luminal.backends import gpu_search
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import FP16_PRAGMA, OpenCLRenderer
from luminal.errors import CompileError
from luminal.kernel.gpu import Choice

F16_RTOL = 2e-3  # a few half ulps: exp in float vs in half, sums in float


def _graph(rng: np.random.Generator) -> tuple[lm.Graph, list[lm.GraphTensor], list[np.ndarray]]:
    """An elementwise float16 chain (exp, sqrt, add) and a float16 row sum of products,
    with numpy float16 references."""
    a = rng.standard_normal((16, 64)).astype(np.float16)
    b = (rng.standard_normal((16, 64)) * 0.5).astype(np.float16)
    cx = lm.Graph()
    x = cx.tensor((16, 64), dtype=lm.float16).set(a)
    y = cx.tensor((16, 64), dtype=lm.float16).set(b)
    chain = ((x * y).exp() + 1.0).sqrt().retrieve()
    total = (x * y).sum(-1).retrieve()
    product = a * b
    expected = [np.sqrt(np.exp(product) + np.float16(1.0)), product.astype(np.float32).sum(-1)]
    return cx, [chain, total], expected


def _check(outputs: list[lm.GraphTensor], expected: list[np.ndarray]) -> None:
    for out, want in zip(outputs, expected, strict=True):
        got = out.numpy()
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=F16_RTOL, atol=F16_RTOL)


def test_float16_computes_in_float_without_the_extension_and_matches_numpy(rng):
    has_fp16 = toolchain.choose()[1].has_fp16
    sources = {}
    for half in (False, None):  # forced fallback, then what the device has
        cx, outputs, expected = _graph(rng)
        compiler = lm.OpenCLCompiler(half=half)
        cx.compile(compiler)
        cx.execute()
        _check(outputs, expected)
        sources[half] = cx.compiled.device.source
    assert FP16_PRAGMA not in sources[False] and "vload_half(" in sources[False]
    assert (FP16_PRAGMA in sources[None]) == has_fp16
    if not has_fp16:  # the automatic choice is the fallback, to the byte
        assert sources[None] == sources[False]


def test_half_true_requires_the_extension(rng):
    cx, outputs, expected = _graph(rng)
    device = toolchain.choose()[1]
    if not device.has_fp16:
        with pytest.raises(CompileError, match=f"cl_khr_fp16; {device.label} does not"):
            cx.compile(lm.OpenCLCompiler(half=True))
        return
    cx.compile(lm.OpenCLCompiler(half=True))  # a device with half arithmetic runs it
    cx.execute()
    _check(outputs, expected)
    assert FP16_PRAGMA in cx.compiled.device.source


def _every_op(cx: lm.Graph, rng: np.random.Generator) -> None:
    """float16 elementwise ops of every ALU spelling (for the source checks only)."""
    a = cx.tensor((8, 32), dtype=lm.float16).set(rng.standard_normal((8, 32)).astype(np.float16))
    b = cx.tensor((8, 32), dtype=lm.float16).set(rng.standard_normal((8, 32)).astype(np.float16))
    mixed = (a.maximum(b) % 1.5 + a.lt(b) * a.reciprocal()).sin() + b.abs().log2()
    steps = a.cast(lm.int32).cast(lm.float16) + a.cast(lm.float32).cast(lm.float16) / 3.0
    (mixed + steps.relu()).retrieve()


def test_half_arithmetic_source_keeps_sums_in_float(rng):
    cx, _, _ = _graph(rng)
    _every_op(cx, rng)
    program = lm.OpenCLCompiler().lower(cx)
    chain = next(s.node for s in gpu_search.sites(cx, program) if s.option("vector(4)"))
    wide = gpu_search.lower_choices(cx, (16, 1), {chain: Choice(vector=4)})
    launches = [*program.launches, *gpu_search.launches_by_node(wide)[chain]]
    source = OpenCLRenderer(half_arithmetic=True).program(launches)[1]
    kernels = source.split("__kernel void ")[1:]
    elementwise = [k for k in kernels if "acc" not in k]
    (reduction,) = [k for k in kernels if "acc" in k]
    assert source.startswith(FP16_PRAGMA)
    assert len(elementwise) >= 3 and all("vload_half" not in k for k in elementwise)
    assert all("(half)" in k for k in elementwise)
    assert "const half4 vl1_ = vload4(0, b1 + " in source  # wide half loads stay half
    assert "float acc = 0.0f;" in reduction and "vload_half(" in reduction
    clang = shutil.which("clang-15") or shutil.which("clang")
    if clang is not None:  # OpenCL C type rules for half (spir64 has cl_khr_fp16)
        check = subprocess.run(
            [clang, "-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header"]
            + ["-target", "spir64", "-fsyntax-only", "-"],
            input=source,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stderr

"""A user's CUDA kernel inside a graph (`lm.custom_kernel(..., backend="cuda")`) without
a GPU: it is rendered into the graph's module as written, NVRTC and ptxas build it for
sm_80 and sm_90 with its name exported, its launch passes the element counts; a kernel
with sources for several backends gives each compiler its own, and a compiler with no
source of its language names the kernel and the backends it has. (Running it on a GPU:
test_gpu.py.)"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda.compiler import CUDACompiler
from luminal.kernel.gpu import custom_kernel_source
from tests.conftest import uniform

CUDA = r"""
extern "C" __global__ void scaled_add(float* out, const float* a, const float* b,
                                      long long n_out, long long n_a, long long n_b) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_out) out[i] = 2.0f * a[i] + b[i % n_b];
}
"""
OPENCL = """
__kernel void scaled_add(__global float* out, __global const float* a,
                         __global const float* b, const long n_out, const long n_a,
                         const long n_b) {
    const long i = get_global_id(0);
    if (i < n_out) out[i] = 2.0f * a[i] + b[i % n_b];
}
"""
METAL = """
kernel void scaled_add(device float* out [[buffer(0)]], device const float* a [[buffer(1)]],
                       device const float* b [[buffer(2)]], constant long& n_out [[buffer(3)]],
                       constant long& n_a [[buffer(4)]], constant long& n_b [[buffer(5)]],
                       uint3 gid [[thread_position_in_grid]]) {
    const long i = (long)gid.x;
    if (i < n_out) out[i] = 2.0f * a[i] + b[i % n_b];
}
"""
C = """
void scaled_add(float* out, const float* a, const float* b, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++) out[i] = 2.0f * a[i] + b[i % numel[2]];
}
"""


@dataclass(frozen=True)
class ScaledAdd:
    """The kernel's numpy equivalent (the reference runtime's oracle)."""

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return 2 * a + b


def graph(rng: np.random.Generator, source: object, rows: int = 70, **options: object):
    cx = lm.Graph()
    a = cx.tensor(("n", 5)).set(uniform(rng, (rows, 5)))
    b = cx.tensor((5,)).set(uniform(rng, (5,)))
    out = lm.custom_kernel([a.exp(), b], source, ("n", 5), **options)
    return cx, a, b, (out + 1).sum(-1).retrieve()


def test_a_cuda_kernel_builds_into_the_module_for_sm80_and_sm90(rng) -> None:
    cx, *_ = graph(rng, CUDA, reference=ScaledAdd(), backend="cuda")
    module = lm.CUDACompiler(arch=("sm_80", "sm_90")).build(cx)
    assert module.source.count('extern "C" __global__ void scaled_add(') == 1
    assert "scaled_add" in module.kernels
    for binary in module.binaries.values():
        assert b".entry scaled_add(" in binary.ptx and binary.cubin[:4] == b"\x7fELF"
    program = CUDACompiler().lower(cx.structure_copy())
    (launch,) = [x for x in program.launches if custom_kernel_source(x.kernel) is not None]
    dims = {"n": 70}
    assert [e.evaluate(dims) for e in launch.scalars] == [350, 350, 5]  # out, a, b
    assert launch.global_size[0].evaluate(dims) == 350 and launch.local_size == (64,)


def test_a_cuda_kernel_without_extern_c_is_refused_by_name(rng) -> None:
    mangled = CUDA.replace('extern "C" ', "")
    cx, *_ = graph(rng, mangled, reference=ScaledAdd(), backend="cuda")
    with pytest.raises(lm.CompileError, match=r"\['scaled_add'\] are not exported.*extern"):
        lm.CUDACompiler(arch=("sm_80",)).build(cx)


def test_each_backend_takes_its_own_source(rng) -> None:
    sources = {"opencl": OPENCL, "cuda": CUDA, "metal": METAL}
    cx, a, b, out = graph(rng, sources, reference=ScaledAdd())
    cuda = lm.CUDACompiler().render(cx)
    metal = lm.MetalCompiler().render(cx)
    assert CUDA in cuda and OPENCL not in cuda and METAL not in cuda
    assert METAL in metal and CUDA not in metal
    cx.compile(lm.OpenCLCompiler())  # runs the OpenCL source, checked against the reference
    cx.execute()
    expected = (2 * np.exp(a.numpy()) + b.numpy() + 1).sum(-1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_c_with_a_cuda_source_runs_on_the_cpu_and_renders_for_cuda(rng) -> None:
    cx, a, b, out = graph(rng, {"c": C, "cuda": CUDA})  # C is the oracle: no reference=
    assert CUDA in lm.CUDACompiler().render(cx)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    expected = (2 * np.exp(a.numpy()) + b.numpy() + 1).sum(-1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_backend_without_a_source_names_the_kernel_and_its_backends(rng) -> None:
    cx, *_ = graph(rng, {"opencl": OPENCL, "cuda": CUDA}, reference=ScaledAdd())
    with pytest.raises(lm.CompileError, match="'scaled_add' has no metal source.*opencl, cuda"):
        lm.MetalCompiler().render(cx)
    only_cuda, *_ = graph(rng, CUDA, reference=ScaledAdd(), backend="cuda")
    with pytest.raises(lm.CompileError, match="'scaled_add' has no opencl source.*it has cuda"):
        lm.OpenCLCompiler().render(only_cuda)
    with pytest.raises(lm.GraphError, match="backend 'vulkan' is not one of"):
        graph(rng, {"cuda": CUDA, "vulkan": CUDA}, reference=ScaledAdd())
    with pytest.raises(lm.GraphError, match="opencl/cuda kernel needs reference="):
        graph(rng, {"opencl": OPENCL, "cuda": CUDA})
    with pytest.raises(lm.GraphError, match="cannot find the function 'scaled_add' in the metal"):
        graph(rng, {"cuda": CUDA, "metal": "kernel void other() {}"}, reference=ScaledAdd())

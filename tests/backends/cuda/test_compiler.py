"""`lm.CUDACompiler` without a GPU: every golden graph renders to CUDA C that NVRTC and
ptxas accept for sm_80 and sm_90; half-precision matrix products take the tensor-core
kernel, whose problem description (sizes, offsets, strides per operand) is checked by
evaluating it on the host; compiling for a device that is not there names what is
missing."""

from __future__ import annotations

import re

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import runtime, toolchain, wmma
from luminal.backends.cuda.compiler import CUDACompiler
from luminal.backends.cuda.render import CUDARenderer
from luminal.backends.metal import runtime as metal_runtime
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.kernel.indexing import loop_index
from luminal.shape.expr import sym
from tests.backends.golden_cases import CASES

ARCHES = ("sm_80", "sm_90")
KERNEL = re.compile(r'extern "C" __global__ void (\w+)\(')


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_graph_builds_for_sm80_and_sm90(name: str) -> None:
    graph, _ = CASES[name]()
    module = lm.CUDACompiler(arch=ARCHES).build(graph)
    kernels = KERNEL.findall(module.source)
    assert kernels and len(kernels) == len(set(kernels))
    assert sorted(module.binaries) == list(ARCHES)
    assert sorted(module.kernels) == sorted(kernels)
    for arch, binary in module.binaries.items():
        assert f".target {arch}".encode() in binary.ptx
        assert binary.cubin[:4] == b"\x7fELF"  # ptxas assembled it: a GPU would load it
        for kernel in kernels:
            assert f".entry {kernel}(".encode() in binary.ptx


def _matmul(dtype: lm.DType, a_shape: tuple, b_shape: tuple, transpose_b: bool = False):
    cx = lm.Graph()
    a, b = cx.tensor(a_shape, dtype=dtype), cx.tensor(b_shape, dtype=dtype)
    out = (a @ (b.transpose(-1, -2) if transpose_b else b)).retrieve()
    return cx, a, b, out


@pytest.mark.parametrize("dtype", [lm.float16, lm.bfloat16])
def test_half_matmul_runs_on_tensor_cores(dtype: lm.DType) -> None:
    cx, *_ = _matmul(dtype, (40, 24), (24, 50))
    source = lm.CUDACompiler().render(cx)
    assert f"lm_wmma_{dtype.value}(b0, b1, b2, numel);" in source
    assert "wmma::mma_sync" in source
    module = lm.CUDACompiler().build(cx)
    assert module.source == source  # render shows exactly what build compiles
    for binary in module.binaries.values():
        assert b"wmma.mma.sync" in binary.ptx


def test_tensor_cores_only_where_they_apply() -> None:
    assert "wmma" not in lm.CUDACompiler().render(_matmul(lm.float32, (8, 8), (8, 8))[0])
    half = _matmul(lm.float16, (32, 16), (16, 32))[0]
    assert "wmma" not in lm.CUDACompiler(tensor_cores=False).render(half)
    bf16 = _matmul(lm.bfloat16, (32, 16), (16, 32))[0]
    assert "wmma" not in lm.CUDACompiler(arch=("sm_75", "sm_90")).render(bf16)  # sm_80+
    assert "lm_wmma_float16" in lm.CUDACompiler(arch=("sm_75",)).render(half)  # sm_70+


def _evaluate_problem(cx: lm.Graph, inputs: dict, dims: dict) -> np.ndarray:
    """What the WMMA kernel computes, from the numbers its launch passes it: C[c0 + m*c_m
    + n*c_n] = sum_k A[a0 + m*a_m + k*a_k] * B[b0 + k*b_k + n*b_n], per batch index."""
    program = CUDACompiler().lower(cx)
    (launch,) = [s for s in program.launches if s.kernel.label.startswith("wmma")]
    (call,) = launch.kernel.body
    p = dict(zip(wmma.PROBLEM, (c.evaluate(dims) for c in call.counts), strict=True))
    out_node, a_node, b_node = launch.buffers
    a = inputs[a_node].astype(np.float32).reshape(-1)
    b = inputs[b_node].astype(np.float32).reshape(-1)
    out = np.zeros(int(np.prod([d.evaluate(dims) for d in cx.nodes[out_node].shape])))
    m, n, k = np.arange(p["M"]), np.arange(p["N"]), np.arange(p["K"])
    for z in range(p["batch"]):
        a_rows = a[p["a_offset"] + z * p["a_batch"] + m[:, None] * p["a_m"] + k * p["a_k"]]
        b_cols = b[p["b_offset"] + z * p["b_batch"] + k[:, None] * p["b_k"] + n * p["b_n"]]
        out[z * p["c_batch"] + m[:, None] * p["c_m"] + n * p["c_n"]] = a_rows @ b_cols
    assert launch.global_size[2].evaluate(dims) == p["batch"]
    return out


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "transpose_b"),
    [
        ((40, 24), (24, 50), False),  # plain
        ((33, 20), (45, 20), True),  # B read transposed (x @ w.T)
        ((3, 17, 24), (3, 24, 9), False),  # batched: both operands vary with the batch
        ((3, 17, 24), (24, 9), False),  # B broadcast: the batch folds into M
    ],
)
def test_tensor_core_problem_reads_the_right_elements(
    a_shape: tuple, b_shape: tuple, transpose_b: bool, rng: np.random.Generator
) -> None:
    cx, a, b, out = _matmul(lm.float16, a_shape, b_shape, transpose_b)
    data = {
        a.node_id: rng.uniform(-1, 1, a_shape).astype(np.float16),
        b.node_id: rng.uniform(-1, 1, b_shape).astype(np.float16),
    }
    expected = data[a.node_id].astype(np.float32) @ (
        np.swapaxes(data[b.node_id], -1, -2) if transpose_b else data[b.node_id]
    ).astype(np.float32)
    got = _evaluate_problem(cx, data, {})
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


def test_tensor_core_problem_with_a_symbolic_dim(rng: np.random.Generator) -> None:
    cx, a, b, out = _matmul(lm.float16, ("rows", 24), (24, 16))
    data = {
        a.node_id: rng.uniform(-1, 1, (7, 24)).astype(np.float16),
        b.node_id: rng.uniform(-1, 1, (24, 16)).astype(np.float16),
    }
    expected = data[a.node_id].astype(np.float32) @ data[b.node_id].astype(np.float32)
    got = _evaluate_problem(cx, data, {"rows": 7})
    np.testing.assert_allclose(got.reshape(7, 16), expected, rtol=1e-5, atol=1e-5)
    source = lm.CUDACompiler().render(cx)
    assert "const long long dim_rows" in source  # the dim reaches the kernel as an argument


def test_compile_without_a_gpu_names_what_is_missing() -> None:
    """Here (no NVIDIA driver) compiling is a CompileError naming the driver, and the
    graph still runs on the reference runtime; with a GPU it compiles."""
    cx, a, b, out = _matmul(lm.float32, (4, 3), (3, 5))
    a.set(np.ones((4, 3), np.float32))
    b.set(np.ones((3, 5), np.float32))
    if runtime.missing(0) is None:
        cx.compile(lm.CUDACompiler())
    else:
        with pytest.raises(lm.CompileError, match="CUDA: no NVIDIA driver|no GPU|cuInit"):
            cx.compile(lm.CUDACompiler())
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), np.full((4, 5), 3, np.float32))


def test_unknown_architecture_and_mode_are_named() -> None:
    with pytest.raises(lm.CompileError, match="unknown architecture 'hopper'"):
        lm.CUDACompiler(arch=("sm_80", "hopper"))
    with pytest.raises(lm.CompileError, match="unknown mode 'fastest'"):
        lm.CUDACompiler(mode="fastest")


def test_shared_memory_and_barriers_compile() -> None:
    """A work-group sum staged in local memory: `__shared__`, `__syncthreads()` and the
    block-local id, accepted by NVRTC and ptxas."""
    f32 = DType.float32
    lane, r = loop_index("l0_", sym(64)), loop_index("r0_", sym(64))
    total = ir.Loop(
        "r0_",
        sym(64),
        "reduce",
        (ir.Accumulate("acc", "add", ir.Load("stage", r, f32)),),
        reductions=(ir.Reduction("acc", "add", f32),),
    )
    body = (
        ir.Loop(
            "l0_",
            sym(64),
            "gpu_local",
            (
                ir.LocalMemory("stage", f32, sym(64)),
                ir.Store("stage", lane, ir.Load(1, lane, f32), f32),
                ir.Barrier(),
                total,
                ir.Store(0, lane, ir.Var("acc", f32), f32),
            ),
        ),
    )
    kernel = ir.Kernel("staged", (ir.Param(2, f32, output=True), ir.Param(1, f32)), (), body, (2,))
    names, source = CUDARenderer().program([Launch(kernel, (sym(64),), (64,))])
    assert "__shared__ float stage[64];" in source and "__syncthreads();" in source
    assert "const long long l0_ = (long long)threadIdx.x;" in source
    module = toolchain.build(source, names, ARCHES)
    for binary in module.binaries.values():
        assert b".shared" in binary.ptx and b"bar.sync" in binary.ptx


def test_registry_knows_cuda_and_metal() -> None:
    for name, reason in (("cuda", runtime.missing(0)), ("metal", metal_runtime.missing())):
        backend = lm.backends.get(name)
        assert backend.is_available() == (reason is None)
        assert (name in lm.backends.available()) == (reason is None)
        assert backend.rulesets == ("algebra", "structure", "cpu")
        assert not backend.capabilities().blas
    compiler = lm.backends.compiler("cuda", arch=("sm_90",), tensor_cores=False)
    assert isinstance(compiler, lm.CUDACompiler) and compiler.arch == ("sm_90",)
    assert isinstance(lm.backends.compiler("metal"), lm.MetalCompiler)


def test_tensor_core_problem_of_a_summed_batch(rng: np.random.Generator) -> None:
    """A weight gradient (a ContractSum: the batch merged into K) reads the right
    elements too."""
    cx = lm.Graph()
    a, b = cx.tensor((3, 20, 16), dtype=lm.float16), cx.tensor((3, 20, 24), dtype=lm.float16)
    (a.transpose(1, 2) @ b).sum(0).retrieve()
    data = {
        a.node_id: rng.uniform(-1, 1, (3, 20, 16)).astype(np.float16),
        b.node_id: rng.uniform(-1, 1, (3, 20, 24)).astype(np.float16),
    }
    x, y = (data[t.node_id].astype(np.float32) for t in (a, b))
    expected = np.einsum("btm,btn->mn", x, y)
    got = _evaluate_problem(cx, data, {})
    np.testing.assert_allclose(got.reshape(16, 24), expected, rtol=1e-5, atol=1e-5)

"""The C-style renderer on hand-built kernel IR: loop kinds, reductions, dialect hooks,
and the separate namespaces of loop indices and dims."""

from __future__ import annotations

import pytest

import luminal as lm
from luminal.backends.cpu.codegen import CpuRenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.indexing import loop_index
from luminal.render.c import CRenderer
from luminal.shape.expr import sym, var

F = DType.float32


def _row_sum(n: object = 64) -> ir.Kernel:
    """y[i] = sum_j x[i, j] over rows of `n` (ir-api.md's second example)."""
    i, r = loop_index("i0_", sym(8)), loop_index("r0_", sym(n) if isinstance(n, int) else n)
    extent = sym(n) if isinstance(n, int) else n
    step = (
        ir.Declare("v", F, ir.Load(1, extent * i + r, F), const=True),
        ir.Accumulate("acc", "add", ir.Var("v", F)),
    )
    reduce = ir.Loop("r0_", extent, "reduce", step, reductions=(ir.Reduction("acc", "add", F),))
    store = ir.Store(0, i, ir.Var("acc", F), F)
    body = (ir.Loop("i0_", sym(8), "parallel", (reduce, store), work=sym(8) * extent),)
    dims = tuple(sorted(extent.variables()))
    return ir.Kernel("sumreduce", (ir.Param(2, F, True), ir.Param(1, F)), dims, body, (2,))


def test_cpu_renderer_writes_openmp_and_plain_c_does_not() -> None:
    pragmas = (
        "    #pragma omp parallel for if((512) > 16384)\n",
        "        #pragma omp simd reduction(+:acc)\n",
    )
    cpu_name, cpu = CpuRenderer().render(_row_sum())
    assert all(p in cpu for p in pragmas) and "            acc += v;\n" in cpu
    name, plain = CRenderer().render(_row_sum())
    assert name.startswith("lm_sumreduce_") and f"void {name}(float* restrict b0, " in plain
    for pragma in pragmas:
        cpu = cpu.replace(pragma, "")
    assert plain.replace(name, "K") == cpu.replace(cpu_name, "K")


def test_a_dim_named_like_a_loop_index_stays_a_dim() -> None:
    """A dim called `r0_` and the loop index `r0_` meet in one expression without
    clashing: the dim is read as `dim_r0_`."""
    _, source = CpuRenderer().render(_row_sum(var("r0_")))
    assert "const long long dim_r0_ = d[0];" in source
    assert "for (long long r0_ = 0; r0_ < dim_r0_; r0_++)" in source
    assert "b1[(dim_r0_*i0_ + r0_)]" in source or "b1[(i0_*dim_r0_ + r0_)]" in source


def test_gpu_statements_need_a_dialect() -> None:
    kernel = ir.Kernel("k", (ir.Param(0, F, True),), (), (ir.Barrier(),), (0,))
    with pytest.raises(lm.CompileError, match="no barriers"):
        CpuRenderer().render(kernel)
    local = ir.Kernel("k", (ir.Param(0, F, True),), (), (ir.LocalMemory("t", F, sym(4)),), (0,))
    with pytest.raises(lm.CompileError, match="no local memory"):
        CRenderer().render(local)

    class Dialect(CRenderer):
        barrier_text = "barrier(CLK_LOCAL_MEM_FENCE);"
        local_qualifier = "__local"

        def gpu_index(self, loop: ir.Loop) -> str:
            return "get_global_id(0)"

    i = loop_index("i0_", sym(100))
    body = (
        ir.LocalMemory("t", F, sym(4)),
        ir.Loop("i0_", sym(100), "gpu_global", (ir.Barrier(), ir.Store(0, i, ir.Const(1.0, F), F))),
    )
    kernel = ir.Kernel("k", (ir.Param(0, F, True),), (), body, (0,))
    _, source = Dialect().render(kernel)
    assert "__local float t[4];" in source
    assert "const long long i0_ = get_global_id(0);\n    if (i0_ < 100) {" in source
    assert "barrier(CLK_LOCAL_MEM_FENCE);\n        b0[i0_] = 1.0f;" in source


def test_values_render_with_numpy_semantics() -> None:
    """int32 arithmetic wraps, float max propagates NaN, casts round and truncate."""
    a, b = ir.Load(1, sym(0), DType.int32), ir.Const(3, DType.int32)
    r = CRenderer()
    assert r.value(ir.Alu("add", (a, b), DType.int32)) == "lm_iadd(b1[0], (3))"
    assert r.value(ir.Alu("mod", (a, b), DType.int32)) == "lm_imod_floor(b1[0], (3))"
    x = ir.Load(2, sym(1), DType.bfloat16)
    assert r.value(ir.Alu("max", (x, ir.Const(0.0, F)), F)) == (
        "lm_max_nan(lm_bf16_load(b2[1]), 0.0f)"
    )
    assert (
        r.value(ir.Cast(x, DType.bfloat16, DType.int32)) == "lm_float_to_int(lm_bf16_load(b2[1]))"
    )
    assert r.value(ir.Cast(ir.Const(1.5, F), F, DType.float16)) == "((float)(_Float16)(1.5f))"
    assert r.value(ir.Const(-(2**31), DType.int32)) == "(-2147483647 - 1)"


def test_scratch_library_calls_and_named_buffers() -> None:
    """Alloc/Free with the checked malloc, a library call over pointers, index
    expressions and values, and loads/stores of memory named by a string."""
    n = loop_index("i0_", sym(4))
    body = (
        ir.Alloc("pa", F, sym(5)),
        ir.Alloc("pb", F, sym(5), release=("pa",)),
        ir.Loop("i0_", sym(4), "serial", (ir.Store("pa", n, ir.Load(1, n, F), F),)),
        ir.LibraryCall(
            "f", (ir.Pointer("pa", sym(0)), ir.Pointer(0, n + 1), sym(3), ir.Const(1.0, F))
        ),
        ir.LibraryCall("g", (), reports_alloc=True),
        ir.Free("pb"),
        ir.Free("pa"),
    )
    params = (ir.Param(0, F, True), ir.Param(1, F))
    _, source = CRenderer().render(ir.Kernel("k", params, (), body, (0,), reports_faults=True))
    assert source.startswith("#include <stdlib.h>\n")  # malloc declared
    assert "    float* pa = (float*)malloc((size_t)(20));\n" in source
    assert "    if (!pa) {  lm_fault_alloc(lm_fault, 20); return; }\n" in source
    assert "    if (!pb) { free(pa); lm_fault_alloc(lm_fault, 20); return; }\n" in source
    assert "        pa[i0_] = b1[i0_];\n" in source
    assert "    f(pa + 0, b0 + (i0_ + 1), 3, 1.0f);\n" in source
    assert (
        "    const long long failed_ = g();\n    if (failed_) lm_fault_alloc(lm_fault, failed_);"
        in source
    )
    assert source.endswith("    free(pb);\n    free(pa);\n}\n")
    assert "long long* restrict lm_fault" in source
    assert CRenderer().value(ir.IndexValue(n * 2, ir.INDEX)) == "((long long)(2*i0_))"


def test_aligned_scratch() -> None:
    """An Alloc with `align` mallocs align - 1 bytes more into `<name>_base` and rounds
    the name up to the alignment; Free and later failure paths release the base."""
    body = (
        ir.Alloc("pa", F, sym(5), align=64),
        ir.Alloc("pb", F, sym(5), release=("pa",)),
        ir.Free("pb"),
        ir.Free("pa"),
    )
    params = (ir.Param(0, F, True),)
    _, source = CRenderer().render(ir.Kernel("k", params, (), body, (0,), reports_faults=True))
    assert "    float* pa_base = (float*)malloc((size_t)(20) + 63);\n" in source
    assert "    if (!pa_base) {  lm_fault_alloc(lm_fault, 20); return; }\n" in source
    assert (
        "    float* pa = (float*)(((uintptr_t)pa_base + (uintptr_t)63) & ~(uintptr_t)63);" in source
    )
    assert "    if (!pb) { free(pa_base); lm_fault_alloc(lm_fault, 20); return; }\n" in source
    assert source.endswith("    free(pb);\n    free(pa_base);\n}\n")


@pytest.mark.parametrize("align", [0, 3, 48, -64])
def test_aligned_scratch_refuses_an_alignment_that_is_not_a_power_of_two(align: int) -> None:
    """The rounding mask align - 1 only aligns for a power of two: another Alloc is
    refused when built, naming the scratch."""
    with pytest.raises(lm.LuminalError, match="'pa'.*power of two"):
        ir.Alloc("pa", F, sym(5), align=align)

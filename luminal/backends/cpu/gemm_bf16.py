"""Half-precision contractions as calls to `lm_gemm_bf16` / `lm_gemm_f16` (`gemm_bf16.c`,
linked into every graph's library beside `gemm.c`): products summed in float32 and rounded
to the output's dtype once per element; bfloat16 with AVX512-BF16's vdpbf16ps where the
CPU has it, float16 widened into `lm_sgemm`.

The kernel is the sgemm kernel's (`blas.sgemm_kernel`) for a half dtype: axes classified
the same way, operands read in place when their buffer is a matrix of that dtype, else
packed into scratch of that dtype (exact for a materialised operand; an inlined producer
is rounded as its store would). No gather or few-rows path: those are float32 only.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from luminal.backends.cpu.blas import (
    FLIP,
    Packing,
    output_matrix,
)
from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, index_loop_name
from luminal.kernel.values import ValueLowering
from luminal.shape.expr import ZERO, sym

BF16, F16 = DType.bfloat16, DType.float16
NAME = "lm_gemm_bf16"
NAMES = {BF16: NAME, F16: "lm_gemm_f16"}
_TYPES = {BF16: "unsigned short", F16: "_Float16"}  # the C renderer's storage types
PROTOTYPES = {
    dtype: f"void {NAMES[dtype]}(int, int, long long, long long, long long, const {t}*, "
    f"long long, const {t}*, long long, {t}*, long long, long long, long long);\n"
    for dtype, t in _TYPES.items()
}


@cache
def _source() -> str:
    return (Path(__file__).parent / "gemm_bf16.c").read_text()


def support_unit() -> tuple[str, str]:
    """The (name, C source) unit defining `lm_gemm_bf16` and `lm_gemm_f16`."""
    return "lm_gemm_bf16", _source()


def half_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel | None:
    """The IR of a bfloat16 or float16 contraction as `lm_gemm_bf16` / `lm_gemm_f16`
    calls, or None (an operand of another dtype, no M or N axis, output axes that do not
    form a row-major matrix)."""
    dtype = node.dtype
    a_edge, b_edge = node.inputs
    if dtype not in NAMES or any(graph.nodes[e.source].dtype != dtype for e in node.inputs):
        return None
    layout = output_matrix(node)
    if layout is None:
        return None
    shape, axes, out_strides, swap = layout.shape, layout.axes, layout.out_strides, layout.swap
    width, block_stride = layout.width, layout.block_stride
    m, n, k, ldc = layout.m, layout.n, layout.k, layout.ldc
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    index = [w.loop_var(f"i{j}_", shape[d]) for j, d in enumerate(axes.batch)]
    batch_flat = flat_index(index, [shape[d] for d in axes.batch])
    packing = Packing(graph, w, axes.batch, index, batch_flat, materialised, dtype)
    sides = (("pa", a_edge, axes.m, axes.k, (m, k)), ("pb", b_edge, axes.k, axes.n, (k, n)))
    operands = [packing.operand(*side) for side in sides]
    a, b = operands
    c_off = sum((i * out_strides[d] for i, d in zip(index, axes.batch, strict=True)), ZERO)
    first, second, rows_c, cols_c = (b, a, n, m) if swap else (a, b, m, n)
    t1, t2 = (FLIP[b.trans], FLIP[a.trans]) if swap else (a.trans, b.trans)
    call = ir.LibraryCall(
        NAMES[dtype],
        (
            sym(t1), sym(t2), rows_c, cols_c, k,
            ir.Pointer(first.param, first.offset), first.ld,
            ir.Pointer(second.param, second.offset), second.ld,
            ir.Pointer(0, c_off), ldc, cols_c if width is None else width, block_stride,
        ),
    )  # fmt: skip
    body: tuple[ir.Stmt, ...] = (call,)
    for i, d in reversed(list(zip(index, axes.batch, strict=True))):
        body = (ir.Loop(index_loop_name(i), shape[d], "serial", body),)
    return ir.Kernel(
        "gemm_half",
        w.kernel_params(),
        tuple(dims),
        (*packing.prologue, *body, *packing.frees),
        tuple(sorted({*w.nodes, node.id})),
        scratch=tuple(packing.scratch),
        prelude=PROTOTYPES[dtype],
        reports_faults=bool(packing.scratch),
    )

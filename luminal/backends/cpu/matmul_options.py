"""Search options for matrix products: generated, register-blocked C (`matmul_codegen`)
in place of the BLAS call, with the consumer's bias / residual / ReLU fused into the
kernel when the product has exactly one reader that is such an epilogue.

Only plain two-operand products qualify: concrete sizes, float32, no batch axis, no
padding, operands BLAS could read in place (row axes may merge, as for BLAS).

The kernel is IR: an `ir.LibraryCall` of the function `render_matmul` writes into the
kernel's prelude. Choosing the schedule renders that library for the `MatmulSchedule`
(data), so no option edits generated text; its micro-kernel (vector-extension C with
register tiles and in-register transposes) stays a rendered library function.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import ops
from luminal.backends.cpu.codegen import KernelSource, kernel_source
from luminal.backends.cpu.lowering import Lowering
from luminal.backends.cpu.matmul_codegen import render_matmul
from luminal.backends.cpu.matmul_schedule import MatmulSchedule
from luminal.backends.cpu.tuning import KernelOption
from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.graph import Node
from luminal.kernel import ir
from luminal.schedule.contraction import classify, matrix_layout, merged_axes
from luminal.schedule.epilogue import Epilogue, FusedEpilogue, match_epilogue
from luminal.shape.expr import sym
from luminal.shape.tracker import contiguous_strides

# the schedules offered per product, from timing the whole space (matmul_measure) at
# 512^3, 1024^3 and 64x512x784, plain and with B transposed, at 1 and 2 threads: each was
# the best somewhere; one 256-bit tile stays for contrast (half the peak here)
SEARCHED_SCHEDULES = (
    MatmulSchedule(8, 32, 128, 512, 256, parallel="n", pack_a=False),
    MatmulSchedule(8, 32, 64, 512, 256, parallel="m", pack_a=False),
    MatmulSchedule(4, 64, 64, 512, 256, parallel="m", pack_a=False),
    MatmulSchedule(8, 32, 32, 512, 256, parallel="m", pack_a=False, pack_b=False),
    MatmulSchedule(12, 32, 120, 512, 256, parallel="n", pack_a=False),
    MatmulSchedule(8, 32, 64, 256, 512, parallel="m", pack_a=False),
    MatmulSchedule(8, 32, 64, 512, 256, parallel="none", pack_a=False),
    MatmulSchedule(6, 32, 48, 512, 256, 256, parallel="n", pack_a=False),
)


@dataclass(frozen=True)
class MatmulProblem:
    """A product as `render_matmul` takes it, with element offsets into the operands."""

    m: int
    n: int
    k: int
    a_trans: bool
    b_trans: bool
    lda: int
    ldb: int
    a_offset: int
    b_offset: int


def _int(expr) -> int | None:  # noqa: ANN001 - an Expr
    return expr.as_int()


def matmul_problem(node: Node) -> MatmulProblem | None:
    """The product's sizes and layouts, or None unless it is a plain matrix product BLAS
    would read in place (the same axis classes and matrix tests as `blas.py`), with
    concrete sizes and the output laid out as (M rows, N columns)."""
    if type(node.op) is not ops.Contract or node.dtype != DType.float32:
        return None
    a_edge, b_edge = node.inputs
    views = (a_edge.view, b_edge.view)
    if any(v.mask is not None for v in views):
        return None
    shape = tuple(a_edge.view.shape)
    if any(_int(d) is None for d in shape):
        return None
    axes = classify(shape, node.op.summed, views)
    if axes is None or axes.batch or len(axes.k) != 1:
        return None
    (k_axis,) = axes.k
    out_axes = [d for d in range(len(shape)) if d != k_axis]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    groups = [merged_axes(axes.m, shape, out_strides), merged_axes(axes.n, shape, out_strides)]
    a_rows, b_cols = (
        merged_axes(axes.m, shape, views[0].strides),
        merged_axes(axes.n, shape, views[1].strides),
    )
    if any(g is None for g in (*groups, a_rows, b_cols)):
        return None
    (m, sc_m), (n, sc_n) = groups
    if (axes.m and sc_m != n) or (axes.n and sc_n != 1):
        return None  # the output is not (M rows, N columns) row-major
    k = shape[k_axis]
    a = matrix_layout(m, k, a_rows[1], views[0].strides[k_axis])
    b = matrix_layout(k, n, views[1].strides[k_axis], b_cols[1])
    if a is None or b is None:
        return None
    values = [_int(x) for x in (m, n, k, a[1], b[1], views[0].offset, views[1].offset)]
    if any(v is None for v in values):
        return None
    m_, n_, k_, lda, ldb, a_offset, b_offset = values
    return MatmulProblem(m_, n_, k_, a[0], b[0], lda, ldb, a_offset, b_offset)


def _epilogue(lowering: Lowering, product: int) -> FusedEpilogue | None:
    return match_epilogue(lowering.graph, lowering.kernel_nodes, lowering.materialised, product)


def generated_kernel(
    lowering: Lowering,
    product: int,
    problem: MatmulProblem,
    schedule: MatmulSchedule,
    fused: FusedEpilogue | None,
) -> KernelSource:
    return kernel_source(matmul_kernel(lowering, product, problem, schedule, fused))


NULL = sym(0)  # a null pointer argument: no bias, no residual


def matmul_kernel(
    lowering: Lowering,
    product: int,
    problem: MatmulProblem,
    schedule: MatmulSchedule,
    fused: FusedEpilogue | None,
) -> ir.Kernel:
    """The IR of a generated product: one call of the register-blocked library function
    `render_matmul` writes for this problem and `schedule` (the kernel's prelude: its
    micro-kernel is GCC vector-extension C, rendered once), which returns the bytes of
    packing scratch it could not allocate, recorded as an allocation fault."""
    graph = lowering.graph
    node = graph.nodes[product]
    a_edge, b_edge = node.inputs
    output = fused.consumer if fused else product
    buffers = [output, a_edge.source, b_edge.source]
    bias = residual = NULL
    ldr = None
    if fused and fused.bias:
        buffers.append(fused.bias[0])
        bias = ir.Pointer(len(buffers) - 1, sym(fused.bias[1]))
    if fused and fused.residual:
        buffers.append(fused.residual[0])
        residual = ir.Pointer(len(buffers) - 1, sym(fused.residual[1]))
        ldr = fused.residual[2]
    epilogue = fused.epilogue if fused else Epilogue()
    p = problem
    library = render_matmul(
        "KERNEL_NAME_mm", p.m, p.n, p.k, p.a_trans, p.b_trans, p.lda, p.ldb, p.n,
        schedule, epilogue, ldr,
    )  # fmt: skip
    args = (
        ir.Pointer(0, sym(0)),
        ir.Pointer(1, sym(p.a_offset)),
        ir.Pointer(2, sym(p.b_offset)),
        bias,
        residual,
    )
    call = ir.LibraryCall("KERNEL_NAME_mm", args, reports_alloc=True)
    params = tuple(ir.Param(n, DType.float32, output=i == 0) for i, n in enumerate(buffers))
    computed = [product] + (list(lowering.kernels[fused.consumer].nodes) if fused else [])
    return ir.Kernel(
        "matmul_epilogue" if fused else "matmul",
        params,
        tuple(lowering.dims),
        (call,),
        tuple(sorted(set(computed))),
        prelude=library,
        reports_faults=True,
    )


def matmul_options(lowering: Lowering, node_id: int, dims: dict[str, int]) -> list[KernelOption]:
    """`gen:<schedule>` (generated product) and, when the product's reader is a bias /
    residual / ReLU epilogue, `gen+epilogue:<schedule>` (that reader fused in)."""
    problem = matmul_problem(lowering.graph.nodes[node_id])
    if problem is None or node_id not in lowering.kernels:
        return []
    fusable = _epilogue(lowering, node_id) is not None
    options = []
    for schedule in SEARCHED_SCHEDULES:
        options.append(KernelOption(f"gen:{schedule.key()}", _apply(problem, schedule, False)))
        if fusable:
            options.append(
                KernelOption(f"gen+epilogue:{schedule.key()}", _apply(problem, schedule, True))
            )
    return options


def _apply(problem: MatmulProblem, schedule: MatmulSchedule, fuse: bool):  # noqa: ANN202
    def apply(lowering: Lowering, node_id: int) -> None:
        fused = _epilogue(lowering, node_id) if fuse else None
        if fuse and fused is None:
            raise CompileError(f"search: the reader of node {node_id} is no longer fusable")
        kernel = generated_kernel(lowering, node_id, problem, schedule, fused)
        if fused is None:
            lowering.kernels[node_id] = kernel
            return
        lowering.kernels[fused.consumer] = kernel
        del lowering.kernels[node_id]
        lowering.materialised.discard(node_id)

    return apply

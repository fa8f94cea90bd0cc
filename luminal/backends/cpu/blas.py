"""Contractions as BLAS sgemm calls, batched over the axes both operands vary along.

Each axis of the contraction's logical shape is classified by which operand varies
along it: M (only a), N (only b), batch (both) or K (summed: the contraction axis, plus
the batch axis a `ContractSum` folds in). Each class of axes acts as one matrix
dimension when its axes are row-major in memory. An operand whose M/N and K axes form
a matrix BLAS can read in place (unpadded float32 buffer, unit stride along one of the
two, a leading dimension provably at least the row length) is passed as is; any other
operand (a strided read such as relu's gradient, overlapping pooling windows, several
M axes that do not merge, an inlined producer) is first packed into a row-major scratch
matrix inside the same kernel, one loop per logical axis (no divisions in the index
arithmetic). The output must take the M and N axes as two row-major groups; otherwise
the contraction is left to a generated loop (`None`). The sgemm is MKL's or OpenBLAS's
(see `toolchain.blas_flags`), one call per batch index.

The kernel is IR (`luminal.kernel.ir`): packing loops are IR loops storing into `Alloc`'d
scratch, sgemm is an `ir.LibraryCall`; an unbatched product calls `lm_sgemm_split_k`, a
library function in the kernel's prelude (`SPLIT_K`) that splits K over threads when the
output is small and K long, so loop knobs (`kernel/transforms.py`) apply to the packing
loops and the renderer writes the C.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import KernelSource, kernel_source
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, loop_name
from luminal.kernel.values import ValueLowering
from luminal.schedule.contraction import classify, matrix_layout, merged_axes
from luminal.shape.expr import ONE, ZERO, Expr, sym
from luminal.shape.tracker import contiguous_strides

F32 = DType.float32


def _sgemm() -> str:
    return toolchain.blas_flags().sgemm


def _prelude(split_k: bool) -> str:
    """The sgemm prototype, and the split-K library function for an unbatched product."""
    sgemm = _sgemm()
    prototype = (
        f"void {sgemm}(int, int, int, int, int, int, float, const float*, int, "
        "const float*, int, float, float*, int);"
    )
    library = "\n" + SPLIT_K.replace("SGEMM(", f"{sgemm}(") if split_k else ""
    return "#include <stdlib.h>\n#include <omp.h>\n" + prototype + library


ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
FLIP = {NO_TRANS: TRANS, TRANS: NO_TRANS}


@dataclass
class Operand:
    """One sgemm operand: the buffer parameter (or scratch name), the element offset per
    batch index, and how BLAS reads it (transpose flag, leading dimension)."""

    param: int | str
    offset: Expr
    trans: int
    ld: Expr


def blas_contract_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource | None:
    """The rendered sgemm kernel of a contraction, or None (see `sgemm_kernel`)."""
    kernel = sgemm_kernel(graph, node, materialised, dims)
    return None if kernel is None else kernel_source(kernel)


def sgemm_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel | None:
    """The IR of a contraction as sgemm calls, or None when BLAS cannot compute it (not
    float32, no M or N axis, output axes that do not form a row-major matrix)."""
    if node.dtype != F32:
        return None
    a_edge, b_edge = node.inputs
    shape = tuple(a_edge.view.shape)
    summed = node.op.summed
    axes = classify(shape, summed, (a_edge.view, b_edge.view))
    if axes is None or not (axes.m or axes.n):
        return None  # a dot product per output element: a fused loop does better
    out_axes = [d for d in range(len(shape)) if d not in summed]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    m_group = merged_axes(axes.m, shape, out_strides)
    n_group = merged_axes(axes.n, shape, out_strides)
    if m_group is None or n_group is None:
        return None
    (m, sc_m), (n, sc_n) = m_group, n_group
    k = ONE
    for d in axes.k:
        k = k * shape[d]
    if axes.n and sc_n != 1:  # the output holds (n, m): compute C^T = B^T A^T
        if axes.m and sc_m != 1:
            return None
        swap, ldc = True, sc_n
    else:
        swap, ldc = False, (sc_m if axes.m else n)
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    index = [w.loop_var(f"i{j}_", shape[d]) for j, d in enumerate(axes.batch)]
    batch_flat = flat_index(index, [shape[d] for d in axes.batch])
    prologue: list[ir.Stmt] = []
    frees: list[ir.Stmt] = []
    operands = []
    scratch: list[Expr] = []
    for name, edge, rows, cols, size in (
        ("pa", a_edge, axes.m, axes.k, (m, k)),
        ("pb", b_edge, axes.k, axes.n, (k, n)),
    ):
        operand = _in_place(graph, w, edge, axes.batch, index, rows, cols, materialised)
        if operand is None:
            fill, matrix, transposed, elements = _pack(w, edge, axes.batch, rows, cols, name)
            released = tuple(f.name for f in frees)  # type: ignore[attr-defined]
            prologue += [ir.Alloc(name, F32, elements, released), *fill]
            frees.append(ir.Free(name))
            scratch.append(elements * 4)
            ld = size[0] if transposed else size[1]
            operand = Operand(name, batch_flat * matrix, TRANS if transposed else NO_TRANS, ld)
        operands.append(operand)
    a, b = operands
    c_off = sum((i * out_strides[d] for i, d in zip(index, axes.batch, strict=True)), ZERO)
    first, second, rows_c, cols_c = (b, a, n, m) if swap else (a, b, m, n)
    t1, t2 = (FLIP[b.trans], FLIP[a.trans]) if swap else (a.trans, b.trans)
    if axes.batch:
        call: ir.Stmt = ir.LibraryCall(
            _sgemm(),
            (
                sym(ROW_MAJOR), sym(t1), sym(t2), rows_c, cols_c, k, ir.Const(1.0, F32),
                ir.Pointer(first.param, first.offset), _leading(first.ld),
                ir.Pointer(second.param, second.offset), _leading(second.ld),
                ir.Const(0.0, F32), ir.Pointer(0, c_off), _leading(ldc),
            ),
        )  # fmt: skip
    else:
        call = ir.LibraryCall(
            "lm_sgemm_split_k",
            (
                sym(t1), sym(t2), rows_c, cols_c, k,
                ir.Pointer(first.param, first.offset), first.ld,
                ir.Pointer(second.param, second.offset), second.ld,
                ir.Pointer(0, c_off), ldc,
            ),
        )  # fmt: skip
    body: tuple[ir.Stmt, ...] = (call,)
    for i, d in reversed(list(zip(index, axes.batch, strict=True))):
        body = (ir.Loop(_name(i), shape[d], "serial", body),)
    computed = tuple(sorted({*w.nodes, node.id}))
    return ir.Kernel(
        "sgemm",
        w.kernel_params(),
        tuple(dims),
        (*prologue, *body, *frees),
        computed,
        scratch=tuple(scratch),
        prelude=_prelude(split_k=not axes.batch),
        reports_faults=bool(scratch),
    )


def _name(index: Expr) -> str:
    return loop_name(index.terms[0][0][0].args[0])


# a product with a small output and a long K (a convolution's weight gradient: 6 x 25
# outputs summed over batch * 784 positions) gives BLAS too little to share between
# threads; each thread then takes a slice of K and the slices' partial sums are added
SPLIT_K_MAX_OUTPUT = 4096
SPLIT_K_MIN_K = 4096


def _leading(ld: Expr) -> Expr:
    """A leading dimension as BLAS requires it, at least 1 (a symbolic size of 0 would
    make sgemm reject the call and leave the output unwritten)."""
    return ld.max(1)


# C: sgemm of an unbatched product, or (several threads, a small output, a long K) one
# sgemm per thread over a slice of K into a private matrix, then the sum of those
# matrices; `SGEMM` is replaced by the BLAS symbol. Where the slice starting at k0 begins:
# along a row of a stored op(X) = X (no transpose) the K index is the column; for a
# transposed one it is the row.
SPLIT_K = f"""/* C (m x n, row-major, ldc) = op(A) op(B) */
static void lm_sgemm_split_k(int ta, int tb, long long m, long long n, long long k,
        const float* a, long long lda, const float* b, long long ldb, float* c, long long ldc)
{{
    const int nt = omp_get_max_threads();
    const int split = nt > 1 && m * n <= {SPLIT_K_MAX_OUTPUT} && k >= {SPLIT_K_MIN_K};
    /* the partial sums' memory; without it (calloc failed) one plain call does the work */
    float* part = split ? (float*)calloc((size_t)(nt * m * n), sizeof(float)) : 0;
    if (!part) {{
        SGEMM({ROW_MAJOR}, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)(lda > 1 ? lda : 1),
            b, (int)(ldb > 1 ? ldb : 1), 0.0f, c, (int)(ldc > 1 ? ldc : 1));
        return;
    }}
    #pragma omp parallel num_threads(nt)
    {{
        const int t = omp_get_thread_num(), count = omp_get_num_threads();
        const long long k0 = k * t / count, k1 = k * (t + 1) / count;
        const float* a0 = a + (ta == {NO_TRANS} ? k0 : k0 * lda);
        const float* b0 = b + (tb == {NO_TRANS} ? k0 * ldb : k0);
        SGEMM({ROW_MAJOR}, ta, tb, (int)m, (int)n, (int)(k1 - k0), 1.0f, a0, (int)lda, b0,
            (int)ldb, 0.0f, part + (long long)t * m * n, (int)n);
    }}
    for (long long r = 0; r < m; r++) {{
        for (long long j = 0; j < n; j++) {{
            float total = 0.0f;
            for (int t = 0; t < nt; t++) total += part[(t * m + r) * n + j];
            c[r * ldc + j] = total;
        }}
    }}
    free(part);
}}
"""


def _in_place(
    graph: Graph,
    w: ValueLowering,
    edge: Edge,
    batch: list[int],
    index: list[Expr],
    rows: list[int],
    cols: list[int],
    materialised: set[int],
) -> Operand | None:
    """The operand read where it lies, when its buffer is a float32 matrix BLAS can read."""
    source = graph.nodes[edge.source]
    view = edge.view
    if source.dtype != DType.float32 or view.mask is not None:
        return None
    if source.id not in materialised and not isinstance(source.op, ops.Input):
        return None
    shape = view.shape
    row_group = merged_axes(rows, shape, view.strides)
    col_group = merged_axes(cols, shape, view.strides)
    if row_group is None or col_group is None:
        return None
    matrix = matrix_layout(row_group[0], col_group[0], row_group[1], col_group[1])
    if matrix is None:
        return None
    offset = view.offset + sum(
        (i * view.strides[d] for i, d in zip(index, batch, strict=True)), ZERO
    )
    transposed, ld = matrix
    return Operand(w.param(source.id), offset, TRANS if transposed else NO_TRANS, ld)


def _pack(
    w: ValueLowering,
    edge: Edge,
    batch: list[int],
    rows: list[int],
    cols: list[int],
    name: str,
) -> tuple[tuple[ir.Stmt, ...], Expr, bool, Expr]:
    """Loops that fill scratch `name` with a row-major (batch..., rows, cols) matrix, or
    (batch..., cols, rows) when the operand's memory runs along the column axes (then
    `transposed` is True and BLAS reads it transposed), one loop per logical axis, the
    outermost parallel. Returns the loops, the size of one batch's matrix, `transposed`
    and the floats to allocate (one spare: a matrix may be empty)."""
    view = edge.view
    shape = view.shape
    transposed = bool(rows) and bool(cols) and _tightest(view, rows) < _tightest(view, cols)
    outer, inner = (cols, rows) if transposed else (rows, cols)
    order = [*batch, *outer, *inner]
    loop_vars = {d: w.loop_var(f"r{j}_", shape[d]) for j, d in enumerate(order)}
    indices = [loop_vars.get(d, ZERO) for d in range(len(shape))]
    matrix = ONE
    for d in [*outer, *inner]:
        matrix = matrix * shape[d]
    total = matrix
    for d in batch:
        total = total * shape[d]
    target = flat_index([loop_vars[d] for d in order], [shape[d] for d in order])
    nest: tuple[ir.Stmt, ...] = (ir.Store(name, target, w.edge(edge, indices), F32),)  # type: ignore[arg-type]
    for position, d in reversed(list(enumerate(order))):
        kind = "parallel" if position == 0 else "serial"
        work = total if position == 0 else None
        nest = (ir.Loop(_name(loop_vars[d]), shape[d], kind, nest, work),)
    return nest, matrix, transposed, total + 1


def _tightest(view: object, axes: list[int]) -> float:
    """The smallest absolute stride of `axes` in `view` (a guess at which axes run along
    memory; unknown symbolic strides count as large)."""
    best = float("inf")
    for d in axes:
        value = view.strides[d].as_int()
        if value is not None and value != 0:
            best = min(best, abs(value))
    return best

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import (
    C_STORAGE,
    PARALLEL_THRESHOLD,
    KernelSource,
    KernelWriter,
    _finish_source,
    c_expr,
)
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel.indexing import flat_index
from luminal.schedule.contraction import classify, matrix_layout, merged_axes
from luminal.shape.expr import ONE, ZERO, Expr
from luminal.shape.tracker import contiguous_strides


def _sgemm() -> str:
    return toolchain.blas_flags().sgemm


def _prototype() -> str:
    return (
        f"void {_sgemm()}(int, int, int, int, int, int, float, const float*, int, "
        "const float*, int, float, float*, int);"
    )


ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
FLIP = {NO_TRANS: TRANS, TRANS: NO_TRANS}


@dataclass
class Operand:
    """One sgemm operand: the C pointer expression per batch index, and how BLAS reads
    it (transpose flag, leading dimension)."""

    pointer: str
    offset: Expr
    trans: int
    ld: Expr


def blas_contract_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource | None:
    if node.dtype != DType.float32:
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
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    index = [writer.loop_var(f"i{j}_", shape[d]) for j, d in enumerate(axes.batch)]
    batch_flat = flat_index(index, [shape[d] for d in axes.batch])
    prologue: list[str] = []
    epilogue: list[str] = []
    operands = []
    scratch: list[Expr] = []
    for name, edge, rows, cols, size in (
        ("pa", a_edge, axes.m, axes.k, (m, k)),
        ("pb", b_edge, axes.k, axes.n, (k, n)),
    ):
        operand = _in_place(graph, writer, edge, axes.batch, index, rows, cols, materialised)
        if operand is None:
            fill, matrix, transposed, nbytes = _pack(writer, edge, axes.batch, rows, cols, name)
            prologue.append(_checked_malloc(name, nbytes, epilogue))
            prologue.append(fill)
            epilogue.append(f"free({name});")
            scratch.append(nbytes)
            ld = size[0] if transposed else size[1]
            operand = Operand(name, batch_flat * matrix, TRANS if transposed else NO_TRANS, ld)
        operands.append(operand)
    a, b = operands
    c_off = sum((i * out_strides[d] for i, d in zip(index, axes.batch, strict=True)), ZERO)
    first, second, rows_c, cols_c = (b, a, n, m) if swap else (a, b, m, n)
    t1, t2 = (FLIP[b.trans], FLIP[a.trans]) if swap else (a.trans, b.trans)
    call = (
        f"{_sgemm()}({ROW_MAJOR}, {t1}, {t2}, (int)({c_expr(rows_c)}), (int)({c_expr(cols_c)}), "
        f"(int)({c_expr(k)}), 1.0f, {first.pointer} + {c_expr(first.offset)}, "
        f"{_leading(first.ld)}, {second.pointer} + {c_expr(second.offset)}, "
        f"{_leading(second.ld)}, 0.0f, b0 + {c_expr(c_off)}, {_leading(ldc)});"
    )
    body = call
    if not axes.batch:
        body = _split_k(call, (first, t1), (second, t2), rows_c, cols_c, k, c_off, ldc)
    for i, d in reversed(list(zip(index, axes.batch, strict=True))):
        loop = c_expr(i)
        body = f"for (long long {loop} = 0; {loop} < {c_expr(shape[d])}; {loop}++) {{\n{body}\n}}"
    body = "\n".join([*prologue, body, *epilogue])
    body = "\n".join("    " + line for line in body.splitlines())
    types = ["float* restrict b0"] + [
        f"const {C_STORAGE[graph.nodes[n].dtype]}* restrict b{i}"
        for i, n in enumerate(writer.buffers[1:], start=1)
    ]
    prelude = "#include <stdlib.h>\n#include <omp.h>\n" + _prototype()
    computed = sorted({*writer.nodes, node.id})
    return _finish_source(
        "sgemm",
        writer.buffers,
        types,
        dims,
        body,
        computed,
        prelude=prelude,
        faults=bool(scratch),
        scratch=scratch,
    )


def _checked_malloc(name: str, nbytes: Expr, frees: list[str]) -> str:
    """C allocating `nbytes` for `name`; on failure the run's fault record names the bytes
    and the kernel returns, freeing the scratch allocated before (`frees`)."""
    size = c_expr(nbytes)
    return (
        f"float* {name} = (float*)malloc((size_t)({size}));\n"
        f"if (!{name}) {{ {' '.join(frees)} lm_fault_alloc(lm_fault, {size}); return; }}"
    )


# a product with a small output and a long K (a convolution's weight gradient: 6 x 25
# outputs summed over batch * 784 positions) gives BLAS too little to share between
# threads; each thread then takes a slice of K and the slices' partial sums are added
SPLIT_K_MAX_OUTPUT = 4096
SPLIT_K_MIN_K = 4096


def _leading(ld: Expr) -> str:
    """A leading dimension as BLAS requires it, at least 1 (a symbolic size of 0 would
    make sgemm reject the call and leave the output unwritten)."""
    text = c_expr(ld)
    return f"(int)(({text}) > 1 ? ({text}) : 1)"


def _split_k(
    call: str,
    first: tuple[Operand, int],
    second: tuple[Operand, int],
    rows: Expr,
    cols: Expr,
    k: Expr,
    c_off: Expr,
    ldc: Expr,
) -> str:
    """`call`, or at run time (several threads, a small output, a long K) one sgemm per
    thread over a slice of K into a private matrix, then the sum of those matrices."""
    (a, ta), (b, tb) = first, second
    # where the slice starting at k0_ begins: along a row of a stored op(X) = X (no
    # transpose) the K index is the column; for a transposed one it is the row
    a_at = "k0_" if ta == NO_TRANS else f"k0_ * (long long)({c_expr(a.ld)})"
    b_at = f"k0_ * (long long)({c_expr(b.ld)})" if tb == NO_TRANS else "k0_"
    sliced = (
        f"{_sgemm()}({ROW_MAJOR}, {ta}, {tb}, (int)m_, (int)n_, (int)(k1_ - k0_), 1.0f, "
        f"{a.pointer} + {c_expr(a.offset)} + {a_at}, (int)({c_expr(a.ld)}), "
        f"{b.pointer} + {c_expr(b.offset)} + {b_at}, (int)({c_expr(b.ld)}), 0.0f, "
        "part_ + (long long)t_ * m_ * n_, (int)n_);"
    )
    return f"""{{
const long long m_ = {c_expr(rows)}, n_ = {c_expr(cols)}, k_ = {c_expr(k)};
const int nt_ = omp_get_max_threads();
const int split_ = nt_ > 1 && m_ * n_ <= {SPLIT_K_MAX_OUTPUT} && k_ >= {SPLIT_K_MIN_K};
/* the partial sums' memory; without it (calloc failed) one plain call does the work */
float* part_ = split_ ? (float*)calloc((size_t)(nt_ * m_ * n_), sizeof(float)) : 0;
if (part_) {{
    #pragma omp parallel num_threads(nt_)
    {{
        const int t_ = omp_get_thread_num(), count_ = omp_get_num_threads();
        const long long k0_ = k_ * t_ / count_, k1_ = k_ * (t_ + 1) / count_;
        {sliced}
    }}
    for (long long r_ = 0; r_ < m_; r_++) {{
        for (long long c_ = 0; c_ < n_; c_++) {{
            float total_ = 0.0f;
            for (int t_ = 0; t_ < nt_; t_++) total_ += part_[(t_ * m_ + r_) * n_ + c_];
            b0[{c_expr(c_off)} + r_ * (long long)({c_expr(ldc)}) + c_] = total_;
        }}
    }}
    free(part_);
}} else {{
{call}
}}
}}"""


def _in_place(
    graph: Graph,
    writer: KernelWriter,
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
    return Operand(writer.buffer(source.id), offset, TRANS if transposed else NO_TRANS, ld)


def _pack(
    writer: KernelWriter,
    edge: Edge,
    batch: list[int],
    rows: list[int],
    cols: list[int],
    name: str,
) -> tuple[str, Expr, bool, Expr]:
    """C that fills `name`, a malloc'd row-major (batch..., rows, cols) matrix, or
    (batch..., cols, rows) when the operand's memory runs along the column axes (then
    `transposed` is True and BLAS reads it transposed), with one loop per logical axis.
    Returns the code, the size of one batch's matrix, `transposed` and the bytes to
    allocate (one spare float: a matrix may be empty)."""
    view = edge.view
    shape = view.shape
    transposed = bool(rows) and bool(cols) and _tightest(view, rows) < _tightest(view, cols)
    outer, inner = (cols, rows) if transposed else (rows, cols)
    order = [*batch, *outer, *inner]
    loop_vars = {d: writer.loop_var(f"r{j}_", shape[d]) for j, d in enumerate(order)}
    indices = [loop_vars.get(d, ZERO) for d in range(len(shape))]
    value = writer.edge(edge, indices)
    matrix = ONE
    for d in [*outer, *inner]:
        matrix = matrix * shape[d]
    total = matrix
    for d in batch:
        total = total * shape[d]
    target = flat_index([loop_vars[d] for d in order], [shape[d] for d in order])
    loops = f"{name}[{c_expr(target)}] = {value};"
    for position, d in reversed(list(enumerate(order))):
        loop = c_expr(loop_vars[d])
        loops = f"for (long long {loop} = 0; {loop} < {c_expr(shape[d])}; {loop}++) {{\n{loops}\n}}"
        if position == 0:
            loops = (
                f"#pragma omp parallel for if(({c_expr(total)}) > {PARALLEL_THRESHOLD})\n" + loops
            )
    return loops, matrix, transposed, (total + 1) * 4


def _tightest(view: object, axes: list[int]) -> float:
    """The smallest absolute stride of `axes` in `view` (a guess at which axes run along
    memory; unknown symbolic strides count as large)."""
    best = float("inf")
    for d in axes:
        value = view.strides[d].as_int()
        if value is not None and value != 0:
            best = min(best, abs(value))
    return best

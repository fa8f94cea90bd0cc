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
the contraction is left to a generated loop (`None`). Each product (one per batch index)
is a call to `lm_sgemm` (`gemm.c`, linked into every graph's library): luminal's packed,
register-blocked kernel for products large enough to fill its tiles, MKL's or OpenBLAS's
sgemm (see `toolchain.blas_flags`) for small ones, K split over threads when the output
is small and K long.

The kernel is IR (`luminal.kernel.ir`): packing loops are IR loops storing into `Alloc`'d
scratch, the product an `ir.LibraryCall`, so loop knobs (`kernel/transforms.py`) apply to
the packing loops and the renderer writes the C.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from luminal import ops
from luminal.backends.cpu import gemv
from luminal.backends.cpu.codegen import KernelSource, kernel_source
from luminal.backends.cpu.gemm import PROTOTYPE
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, index_loop_name
from luminal.kernel.values import ValueLowering
from luminal.schedule.contraction import (
    Axes,
    Gathered,
    classify,
    gathered_operand,
    matrix_layout,
    merged_axes,
)
from luminal.shape.expr import ONE, ZERO, Expr, sym
from luminal.shape.tracker import contiguous_strides

F32 = DType.float32


def _prelude(rows_path: bool = False) -> str:
    """The declaration of `lm_sgemm` (`gemm.c`, linked into every graph's library), and
    of `lm_sgemm_rows` (`gemv.c`) for a kernel calling it."""
    return PROTOTYPE + ("\n" + gemv.PROTOTYPE if rows_path else "")


ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
FLIP = {NO_TRANS: TRANS, TRANS: NO_TRANS}
# a batch of at least this many in-place products runs them one per thread in one OpenMP
# region (see `_batch_kind`)
PARALLEL_BATCH = 8


@dataclass
class Operand:
    """One sgemm operand: the buffer parameter (or scratch name), the element offset per
    batch index, and how BLAS reads it (transpose flag, leading dimension)."""

    param: int | str
    offset: Expr
    trans: int
    ld: Expr


@dataclass(frozen=True)
class OutputMatrix:
    """How a contraction's output is one row-major matrix C per batch index: its axes
    classified, C's rows and columns (M and N, or N and M when `swap`: the output holds
    (n, m) and C^T = B^T A^T is computed), the columns in one unit-stride run or in blocks
    of `width` elements `block_stride` apart, and the sizes and C's leading dimension."""

    shape: tuple[Expr, ...]
    axes: Axes
    out_strides: dict[int, Expr]
    swap: bool
    col_axes: tuple[int, ...]
    width: Expr | None
    block_stride: Expr
    m: Expr
    n: Expr
    k: Expr
    ldc: Expr


def output_matrix(node: Node) -> OutputMatrix | None:
    """The contraction's `OutputMatrix`, or None: no M or N axis (a dot product per output
    element), or output axes that do not form a row-major matrix."""
    a_edge, b_edge = node.inputs
    shape = tuple(a_edge.view.shape)
    summed = node.op.summed
    axes = classify(shape, summed, (a_edge.view, b_edge.view))
    if axes is None or not (axes.m or axes.n):
        return None
    out_axes = [d for d in range(len(shape)) if d not in summed]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    swap = bool(axes.n) and out_strides[axes.n[-1]] != 1
    row_axes, col_axes = (axes.n, axes.m) if swap else (axes.m, axes.n)
    row_group = merged_axes(row_axes, shape, out_strides)
    col_group = merged_axes(col_axes, shape, out_strides)
    width, block_stride = None, ZERO
    if col_group is None:
        col_group, width, block_stride = _column_blocks(col_axes, shape, out_strides)
    if row_group is None or col_group is None or (col_axes and col_group[1] != 1):
        return None
    m, n, k = _size(shape, axes.m), _size(shape, axes.n), _size(shape, axes.k)
    ldc = row_group[1] if row_axes else col_group[0]
    return OutputMatrix(
        shape, axes, out_strides, swap, tuple(col_axes), width, block_stride, m, n, k, ldc
    )


@dataclass
class Packing:
    """A product kernel's operands as matrices: each read in place where its buffer is
    one (`_in_place`), else packed into a scratch matrix of `dtype`, whose allocation and
    fill go to `prologue`, its free to `frees` and its bytes to `scratch`."""

    graph: Graph
    w: ValueLowering
    batch: Sequence[int]
    index: list[Expr]
    batch_flat: Expr
    materialised: set[int]
    dtype: DType = F32
    prologue: list[ir.Stmt] = field(default_factory=list)
    frees: list[ir.Free] = field(default_factory=list)
    scratch: list[Expr] = field(default_factory=list)

    def operand(
        self,
        name: str,
        edge: Edge,
        rows: Sequence[int],
        cols: Sequence[int],
        size: tuple[Expr, Expr],
    ) -> Operand:
        w, batch, dtype = self.w, self.batch, self.dtype
        operand = _in_place(
            self.graph, w, edge, batch, self.index, rows, cols, self.materialised, dtype
        )
        if operand is not None:
            return operand
        fill, matrix, transposed, elements = _pack(w, edge, batch, rows, cols, name, dtype)
        released = tuple(f.name for f in self.frees)
        self.prologue += [ir.Alloc(name, dtype, elements, released), *fill]
        self.frees.append(ir.Free(name))
        self.scratch.append(elements * dtype.itemsize)
        ld = size[0] if transposed else size[1]
        return Operand(name, self.batch_flat * matrix, TRANS if transposed else NO_TRANS, ld)


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
    if node.dtype in (DType.bfloat16, DType.float16):  # gemm_bf16.py imports this module
        from luminal.backends.cpu.gemm_bf16 import half_kernel

        return half_kernel(graph, node, materialised, dims)
    if node.dtype != F32:
        return None
    a_edge, b_edge = node.inputs
    layout = output_matrix(node)
    if layout is None:
        return None  # no M or N axis (a fused loop does better), or C is not a matrix
    shape, axes, out_strides, swap = layout.shape, layout.axes, layout.out_strides, layout.swap
    col_axes, width, block_stride = layout.col_axes, layout.width, layout.block_stride
    m, n, k, ldc = layout.m, layout.n, layout.k, layout.ldc
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    index = [w.loop_var(f"i{j}_", shape[d]) for j, d in enumerate(axes.batch)]
    batch_flat = flat_index(index, [shape[d] for d in axes.batch])
    packing = Packing(graph, w, axes.batch, index, batch_flat, materialised)
    operands = []
    gather = _gather(graph, node, 0 if swap else 1, axes, col_axes, index)
    for side, (name, edge, rows, cols, size) in enumerate(
        (
            ("pa", a_edge, axes.m, axes.k, (m, k)),
            ("pb", b_edge, axes.k, axes.n, (k, n)),
        )
    ):
        if gather is not None and side == (0 if swap else 1):
            operands.append(Operand(w.param(gather[0].source), gather[1], NO_TRANS, ZERO))
        else:
            operands.append(packing.operand(name, edge, rows, cols, size))
    a, b = operands
    c_off = sum((i * out_strides[d] for i, d in zip(index, axes.batch, strict=True)), ZERO)
    first, second, rows_c, cols_c = (b, a, n, m) if swap else (a, b, m, n)
    t1, t2 = (FLIP[b.trans], FLIP[a.trans]) if swap else (a.trans, b.trans)
    blocks = (ir.Pointer(0, c_off), ldc, cols_c if width is None else width, block_stride)
    rows_path = gather is None and gemv.takes_rows_path(
        t1, t2, rows_c, cols_c, k, width is not None
    )
    if gather is None:
        call = ir.LibraryCall(
            gemv.NAME if rows_path else "lm_sgemm",
            (
                sym(t1), sym(t2), rows_c, cols_c, k,
                ir.Pointer(first.param, first.offset), first.ld,
                ir.Pointer(second.param, second.offset), second.ld, *blocks,
            ),
        )  # fmt: skip
    else:  # the second operand read from the buffer under its copy (`gathered_operand`)
        call = ir.LibraryCall(
            "lm_sgemm_gather",
            (
                sym(t1), rows_c, cols_c, k, ir.Pointer(first.param, first.offset), first.ld,
                ir.Pointer(second.param, second.offset), ir.Var("lm_gather", ir.INDEX), *blocks,
            ),
            reports_alloc=True,
        )  # fmt: skip
    body: tuple[ir.Stmt, ...] = (call,)
    kind = _batch_kind(shape, axes.batch, bool(packing.scratch) or gather is not None)
    for i, d in reversed(list(zip(index, axes.batch, strict=True))):
        work = shape[d] * m * n * k if kind == "parallel" else None  # multiply-adds
        body = (ir.Loop(index_loop_name(i), shape[d], kind, body, work),)
    computed = tuple(sorted({*w.nodes, node.id, *([gather[0].copy] if gather else [])}))
    return ir.Kernel(
        "sgemm",
        w.kernel_params(),
        tuple(dims),
        (*packing.prologue, *body, *packing.frees),
        computed,
        scratch=tuple(packing.scratch),
        prelude=_prelude(rows_path) + (gather[2] if gather else ""),
        reports_faults=bool(packing.scratch) or gather is not None,
    )


def _gather(
    graph: Graph, node: Node, side: int, axes: Axes, col_axes: Sequence[int], index: list[Expr]
) -> tuple[Gathered, Expr, str] | None:
    """The operand `side` (the call's second) read from the buffer under its copy: the
    `Gathered`, its offset per batch index, and the C declaring its axes (`lm_gather`:
    K's, then the columns'), or None."""
    gathered = gathered_operand(graph, node, side, graph.readers())
    if gathered is None:
        return None
    offset: Expr = sym(gathered.offset)
    for i, d in zip(index, axes.batch, strict=True):
        parts = gathered.axes.get(d, ())
        if len(parts) > 1:
            return None  # a batch index would need dividing into the copy's axes
        offset = offset + sum((i * stride for _, stride in parts), ZERO)
    k_parts = [p for d in axes.k for p in gathered.axes.get(d, ())]
    n_parts = [p for d in col_axes for p in gathered.axes.get(d, ())]
    if not (0 < len(k_parts) <= GATHER_AXES and 0 < len(n_parts) <= GATHER_AXES):
        return None
    values = [len(k_parts), *(v for p in k_parts for v in p)]
    values += [len(n_parts), *(v for p in n_parts for v in p)]
    table = f"\nstatic const long long lm_gather[] = {{{', '.join(map(str, values))}}};"
    return gathered, offset, table


GATHER_AXES = 8  # LM_GATHER_AXES of gemm.c


def _size(shape: Sequence[Expr], axes: list[int]) -> Expr:
    total = ONE
    for d in axes:
        total = total * shape[d]
    return total


def _column_blocks(
    axes: list[int], shape: Sequence[Expr], out_strides: dict
) -> tuple[tuple[Expr, Expr] | None, Expr | None, Expr]:
    """The N axes as C's columns in blocks: ((size, 1), block width, block stride) when
    the inner axes merge into rows of unit stride and the outer ones into a block index
    (the output of a convolution of several images: (image, channel, position) with the
    images and positions as N), else (None, None, 0)."""
    for split in range(1, len(axes)):
        outer = merged_axes(axes[:split], shape, out_strides)
        inner = merged_axes(axes[split:], shape, out_strides)
        if outer is not None and inner is not None and inner[1] == 1:
            return (outer[0] * inner[0], ONE), inner[0], outer[1]
    return None, None, ZERO


def _batch_kind(shape: Sequence[Expr], batch: Sequence[int], shared: bool) -> ir.LoopKind:
    """The batch loop's kind: parallel for one batch axis of at least PARALLEL_BATCH
    products read in place (no scratch or gather buffer the products would share), else
    serial. Each thread then runs whole products (lm_sgemm's own region is inactive
    inside), so Winograd's 16 or 36 products fork and join once instead of once each (at
    2 threads under load a descheduled thread stalls every join: docs/layers.md)."""
    if shared or len(batch) != 1:
        return "serial"
    extent = shape[batch[0]].as_int()
    return "parallel" if extent is not None and extent >= PARALLEL_BATCH else "serial"


def _in_place(
    graph: Graph,
    w: ValueLowering,
    edge: Edge,
    batch: list[int],
    index: list[Expr],
    rows: list[int],
    cols: list[int],
    materialised: set[int],
    dtype: DType = F32,
) -> Operand | None:
    """The operand read where it lies, when its buffer is a `dtype` matrix BLAS can read."""
    source = graph.nodes[edge.source]
    view = edge.view
    if source.dtype != dtype or view.mask is not None:
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
    dtype: DType = F32,
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
    nest: tuple[ir.Stmt, ...] = (ir.Store(name, target, w.edge(edge, indices), dtype),)  # type: ignore[arg-type]
    for position, d in reversed(list(enumerate(order))):
        kind = "parallel" if position == 0 else "serial"
        work = total if position == 0 else None
        nest = (ir.Loop(index_loop_name(loop_vars[d]), shape[d], kind, nest, work),)
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

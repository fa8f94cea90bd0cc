"""Contractions as BLAS sgemm calls, batched over leading axes, without copies.

Each axis of the contraction's logical shape is classified by which operand varies
along it: M (only a), N (only b), batch (both), K (the summed axis). When there is at
most one M and one N axis, the operands are unpadded float32 buffers with a unit stride
along one of their two matrix axes, and the output's batch axes come first, the
product is one sgemm (MKL or OpenBLAS, see `toolchain.blas_flags`) per batch index;
otherwise `None` (a generated loop).
"""

from __future__ import annotations

from collections.abc import Sequence

from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import KernelSource, _finish_source, c_expr, flat_index
from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.shape.expr import ONE, ZERO, Expr, var
from luminal.shape.tracker import contiguous_strides


def _sgemm() -> str:
    return toolchain.blas_flags().sgemm


def _prototype() -> str:
    return (
        f"void {_sgemm()}(int, int, int, int, int, int, float, const float*, int, "
        "const float*, int, float, float*, int);"
    )


ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _at_least(a: Expr, b: Expr) -> bool:
    return (a - b).bounds()[0] >= 0


def _matrix(
    rows: Expr | None, cols: Expr | None, s_rows: Expr, s_cols: Expr
) -> tuple[int, Expr] | None:
    """(transpose flag, leading dimension) for a row-major BLAS operand, or None. The
    leading dimension must be provably at least the row length: overlapping windows
    (pooling views) have a smaller one and go to the loop kernel instead."""
    r, c = rows or ONE, cols or ONE
    if c == 1 or s_cols == 1:
        ld = s_rows if r != 1 else c
        return (NO_TRANS, ld) if _at_least(ld, c) else None
    if r == 1 or s_rows == 1:
        ld = s_cols if c != 1 else r
        return (TRANS, ld) if _at_least(ld, r) else None
    return None


def _merge_axes(
    axes: list[int], shape: Sequence[Expr], strides: tuple
) -> tuple[Expr | None, int | None] | None:
    """(merged size, innermost axis) of axes that are consecutive and row-major in every
    stride table given; (None, None) for no axes; None when they cannot merge."""
    if not axes:
        return None, None
    if axes != list(range(axes[0], axes[-1] + 1)):
        return None
    size = ONE
    for d in axes:
        size = size * shape[d]
    for table in strides:
        for outer, inner in zip(axes, axes[1:], strict=False):
            if table[outer] != table[inner] * shape[inner]:
                return None
    return size, axes[-1]


def blas_contract_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource | None:
    a_edge, b_edge = node.inputs
    if node.dtype != DType.float32:
        return None
    sources = [graph.nodes[e.source] for e in (a_edge, b_edge)]
    if any(s.id not in materialised and type(s.op).__name__ != "Input" for s in sources):
        return None
    if a_edge.view.mask is not None or b_edge.view.mask is not None:
        return None
    shape = a_edge.view.shape
    axis = node.op.axis
    sa, sb = a_edge.view.strides, b_edge.view.strides
    m_axes, n_axes, batch = [], [], []
    for d in range(len(shape)):
        if d == axis:
            continue
        a_var = sa[d] != 0 and shape[d] != 1
        b_var = sb[d] != 0 and shape[d] != 1
        if shape[d] == 1:
            continue
        if a_var and b_var:
            batch.append(d)
        elif a_var:
            m_axes.append(d)
        elif b_var:
            n_axes.append(d)
        else:
            return None
    if sa[axis] == 0 or sb[axis] == 0:
        return None
    out_axes = [d for d in range(len(shape)) if d != axis]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    # several M (or N) axes act as one when they are adjacent and row-major both in the
    # operand and in the output: (batch, seq, hidden) @ W is one (batch*seq, hidden) product
    m_group = _merge_axes(m_axes, shape, (sa, out_strides))
    n_group = _merge_axes(n_axes, shape, (sb, out_strides))
    if m_group is None or n_group is None:
        return None
    m, m_inner = m_group
    n, n_inner = n_group
    k = shape[axis]
    a_op = _matrix(m, k, sa[m_inner] if m_inner is not None else ZERO, sa[axis])
    b_op = _matrix(k, n, sb[axis], sb[n_inner] if n_inner is not None else ZERO)
    sc_m = out_strides[m_inner] if m_inner is not None else ZERO
    sc_n = out_strides[n_inner] if n_inner is not None else ONE
    packing: list[str] = []
    freeing: list[str] = []
    pointer = {"a": "b1", "b": "b2"}
    a_off_override = b_off_override = None
    # an operand BLAS cannot read in place (a strided read such as relu's gradient, whose
    # values sit every other float) is packed into a row-major scratch matrix first
    if a_op is None and len(m_axes) <= 1:
        fill, size = _pack(graph, node, materialised, a_edge, batch, m_axes, axis, "pa", m, k)
        packing.append(fill)
        freeing.append("free(pa);")
        a_op, pointer["a"] = (NO_TRANS, k), "pa"
        a_off_override = size
    if b_op is None and len(n_axes) <= 1:
        n_axis = n_axes[0] if n_axes else None
        fill, size = _pack(graph, node, materialised, b_edge, batch, [axis], n_axis, "pb", k, n)
        packing.append(fill)
        freeing.append("free(pb);")
        b_op, pointer["b"] = (NO_TRANS, n or ONE), "pb"
        b_off_override = size
    if a_op is None or b_op is None:
        return None
    swap = not (n is None or n == 1 or sc_n == 1)
    if swap and not (m is None or m == 1 or sc_m == 1):
        return None
    index = [var(f"i{j}_") for j in range(len(batch))]
    a_off = a_edge.view.offset + sum((i * sa[d] for i, d in zip(index, batch, strict=True)), ZERO)
    b_off = b_edge.view.offset + sum((i * sb[d] for i, d in zip(index, batch, strict=True)), ZERO)
    batch_flat = flat_index(index, [shape[d] for d in batch])
    if a_off_override is not None:
        a_off = batch_flat * a_off_override
    if b_off_override is not None:
        b_off = batch_flat * b_off_override
    c_off = sum((i * out_strides[d] for i, d in zip(index, batch, strict=True)), ZERO)
    mm, nn = c_expr(m or ONE), c_expr(n or ONE)
    if not swap:
        ldc = sc_m if (m is not None and m != 1) else (n or ONE)
        call = (
            f"{_sgemm()}({ROW_MAJOR}, {a_op[0]}, {b_op[0]}, (int)({mm}), (int)({nn}), "
            f"(int)({c_expr(k)}), 1.0f, {pointer['a']} + {c_expr(a_off)}, "
            f"(int)({c_expr(a_op[1])}), {pointer['b']} + {c_expr(b_off)}, "
            f"(int)({c_expr(b_op[1])}), 0.0f, b0 + {c_expr(c_off)}, "
            f"(int)({c_expr(ldc)}));"
        )
    else:  # output holds (n, m): compute C^T = B^T A^T
        ldc = sc_n
        flip = {NO_TRANS: TRANS, TRANS: NO_TRANS}
        call = (
            f"{_sgemm()}({ROW_MAJOR}, {flip[b_op[0]]}, {flip[a_op[0]]}, (int)({nn}), "
            f"(int)({mm}), (int)({c_expr(k)}), 1.0f, {pointer['b']} + {c_expr(b_off)}, "
            f"(int)({c_expr(b_op[1])}), {pointer['a']} + {c_expr(a_off)}, "
            f"(int)({c_expr(a_op[1])}), 0.0f, "
            f"b0 + {c_expr(c_off)}, (int)({c_expr(ldc)}));"
        )
    body = call
    for i, d in reversed(list(zip(index, batch, strict=True))):
        name = c_expr(i)
        body = f"for (long long {name} = 0; {name} < {c_expr(shape[d])}; {name}++) {{\n{body}\n}}"
    body = "\n".join([*packing, body, *freeing])
    body = "\n".join("    " + line for line in body.splitlines())
    buffers = [node.id, a_edge.source, b_edge.source]
    signature_types = ["float* restrict b0", "const float* b1", "const float* b2"]
    prelude = "#include <stdlib.h>\n" + _prototype() if packing else _prototype()
    return _finish_source("sgemm", buffers, signature_types, dims, body, [node.id], prelude=prelude)


def _pack(
    graph: Graph,
    node: Node,
    materialised: set[int],
    edge: object,
    batch: list[int],
    row_axes: list[int],
    col_axis: int | None,
    name: str,
    rows: Expr | None,
    cols: Expr | None,
) -> tuple[str, Expr]:
    """C that copies one operand into `name`, a malloc'd (batch..., rows, cols) row-major
    matrix; returns the code and the size of one batch's matrix. `row_axes` holds at most
    one logical axis (none: a single row); `col_axis` None means a single column."""
    from luminal.backends.cpu.codegen import KernelWriter

    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    writer.buffer(node.inputs[0].source)
    writer.buffer(node.inputs[1].source)
    shape = edge.view.shape
    r, c = rows or ONE, cols or ONE
    batch_vars = [writer.loop_var(f"i{j}_", shape[d]) for j, d in enumerate(batch)]
    row_var = writer.loop_var("r0_", r)
    col_var = writer.loop_var("r1_", c)
    indices = []
    for d in range(len(shape)):
        if d in batch:
            indices.append(batch_vars[batch.index(d)])
        elif row_axes and d == row_axes[0]:
            indices.append(row_var)
        elif col_axis is not None and d == col_axis:
            indices.append(col_var)
        else:
            indices.append(ZERO)  # broadcast in this operand (or size 1)
    value = writer.edge(edge, indices)
    batch_shape = [shape[d] for d in batch]
    size = r * c
    target = flat_index(batch_vars, batch_shape) * size + row_var * c + col_var
    total = size
    for d in batch_shape:
        total = total * d
    loops = f"{name}[{c_expr(target)}] = {value};"
    for v, extent in reversed(
        [*zip(batch_vars, batch_shape, strict=True), (row_var, r), (col_var, c)]
    ):
        loop_name = c_expr(v)
        loops = (
            f"for (long long {loop_name} = 0; {loop_name} < {c_expr(extent)}; {loop_name}++) "
            f"{{\n{loops}\n}}"
        )
    allocate = f"float* {name} = (float*)malloc(sizeof(float) * (size_t)({c_expr(total)}));"
    return allocate + "\n" + loops, size

"""A tiled matrix product for GPUs: a contraction staged through local memory.

`Contract` nodes (sum over one axis of a product of two operands, each broadcast along an
axis the other varies on) are matrix products. Each work-group computes a `tile x tile`
block of the output: for every `tile`-wide slice of K, its work-items load one element of
the A block and one of the B block into local memory, wait at a barrier, and accumulate
`tile` products from local memory; a second barrier guards the next loads. Global memory
is then read `tile` times less than by one work-item per element that reads its whole
row and column. The operands are IR values (`ValueLowering.edge`), so producers fused
into a contraction (a transpose, a scale, a padding mask) are computed while loading.

Work-items past the edge of the output still load (zeros) and meet every barrier, so the
work sizes are whole tiles and only the final store is guarded. Axes other than the
tiled M and N (batch axes, further M or N axes) are the launch's third axis, one index
per work-group row of the grid.
"""

from __future__ import annotations

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.kernel.indexing import flat_index, loop_index
from luminal.kernel.lower import kernel_label
from luminal.kernel.values import ValueLowering
from luminal.schedule.contraction import classify, is_blas_contract
from luminal.shape.expr import ONE, Expr, ceildiv, less_than, logical_and, product

TILES = (4, 8, 16, 32)
DEFAULT_TILE = 16
A_TILE, B_TILE = "lm_tile_a", "lm_tile_b"
_F32 = DType.float32


def tileable(node: Node) -> tuple[int, int] | None:
    """(M axis, N axis) of the output to tile, or None: a float matrix product (a plain
    `Contract`, some output axis only A varies along and one only B does)."""
    if type(node.op) is not ops.Contract or not node.dtype.is_float:
        return None
    if not is_blas_contract(node):
        return None
    views = [e.view for e in node.inputs]
    axes = classify(views[0].shape, node.op.summed, views)
    if axes is None or not axes.m or not axes.n:
        return None
    k = node.op.axis
    out = lambda d: d - (d > k)  # noqa: E731 - logical axis -> output axis
    return out(axes.m[-1]), out(axes.n[-1])


def tiled_matmul(
    graph: Graph, node: Node, materialised: set[int], dims: list[str], tile: int = DEFAULT_TILE
) -> Launch | None:
    """The tiled launch computing `node`, or None when it is not a tileable product."""
    found = tileable(node)
    if found is None:
        return None
    m_axis, n_axis = found
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    shape = list(node.shape)
    k_axis = node.op.axis
    k_extent = node.inputs[0].view.shape[k_axis]
    rows, cols = ceildiv(shape[m_axis], tile) * tile, ceildiv(shape[n_axis], tile) * tile
    others = [d for d in range(len(shape)) if d not in (m_axis, n_axis)]
    batch_extent = product(shape[d] for d in others)
    i = w.loop_var("i0_", rows)
    j = w.loop_var("i1_", cols)
    b = w.loop_var("gz_", batch_extent)
    li, lj = loop_index("li_", ONE * tile), loop_index("lj_", ONE * tile)
    kt = w.loop_var("kt_", ceildiv(k_extent, tile))
    kk = loop_index("kk_", ONE * tile)
    # the output's logical indices: M and N from the grid, the others decoded from gz_
    indices: list[Expr] = [ONE] * len(shape)
    indices[m_axis], indices[n_axis] = i, j
    decode: list[ir.Stmt] = []
    stride: Expr = ONE
    for d in reversed(others):
        name = f"o{d}_"
        value = ir.IndexValue((b // stride) % shape[d], ir.INDEX)
        decode.insert(0, ir.Declare(name, ir.INDEX, value, True))
        indices[d] = w.loop_var(name, shape[d])
        stride = stride * shape[d]

    def operand(edge_index: int, k: Expr, inside: Expr) -> ir.Value:
        logical = [*indices[:k_axis], k, *indices[k_axis:]]
        value = w.edge(node.inputs[edge_index], logical)
        zero = ir.Const(0.0, node.dtype)
        return ir.Select(logical_and(inside, less_than(k, k_extent)), value, zero)

    a_k, b_k = kt * tile + lj, kt * tile + li
    a_value = operand(0, a_k, less_than(i, shape[m_axis]))
    b_value = operand(1, b_k, less_than(j, shape[n_axis]))
    step = ir.Accumulate(
        "acc",
        "add",
        ir.Alu(
            "mul",
            (ir.Load(A_TILE, li * tile + kk, _F32), ir.Load(B_TILE, kk * tile + lj, _F32)),
            _F32,
        ),
    )
    k_loop = ir.Loop(
        "kt_",
        ceildiv(k_extent, tile),
        "serial",
        (
            ir.Store(A_TILE, li * tile + lj, a_value, _F32),
            ir.Store(B_TILE, li * tile + lj, b_value, _F32),
            ir.Barrier(),
            ir.Loop("kk_", ONE * tile, "serial", (step,)),
            ir.Barrier(),
        ),
    )
    inside = logical_and(less_than(i, shape[m_axis]), less_than(j, shape[n_axis]))
    result = ir.Store(0, flat_index(indices, shape), ir.Var("acc", _F32), node.dtype)
    store = ir.If(inside, (result,))
    work = (
        *decode,
        ir.Declare("li_", ir.INDEX, ir.IndexValue(i % tile, ir.INDEX), True),
        ir.Declare("lj_", ir.INDEX, ir.IndexValue(j % tile, ir.INDEX), True),
        ir.Declare("acc", _F32, ir.Const(0.0, _F32)),
        k_loop,
        store,
    )
    body: tuple[ir.Stmt, ...] = (
        ir.Loop("gz_", batch_extent, "gpu_global", (
            ir.Loop("i0_", rows, "gpu_global", (ir.Loop("i1_", cols, "gpu_global", work),)),
        )),
    )  # fmt: skip
    local = (
        ir.LocalMemory(A_TILE, _F32, ONE * (tile * tile)),
        ir.LocalMemory(B_TILE, _F32, ONE * (tile * tile)),
    )
    kernel = ir.Kernel(
        f"{kernel_label(graph, w, node)}_tiled{tile}",
        w.kernel_params(),
        tuple(dims),
        (*local, *body),
        tuple(sorted({*w.nodes, node.id})),
    )
    return Launch(kernel, (cols, rows, batch_extent), (tile, tile, 1))

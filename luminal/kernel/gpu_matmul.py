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
BLOCKS = (1, 2, 4)
DEFAULT_TILE = 16
Schedule = tuple[int, int]  # (tile, block): tile 0 is the untiled loop kernel


def schedule(option: int | Schedule) -> Schedule:
    """A tile size alone means no register blocking."""
    return (option, 1) if isinstance(option, int) else (int(option[0]), int(option[1]))


def schedule_name(option: Schedule) -> str:
    """ "0", "16", "16x4": how a schedule is named in search records."""
    tile, block = option
    return str(tile) if tile == 0 or block == 1 else f"{tile}x{block}"


def parse_schedule(name: str) -> Schedule:
    tile, _, block = name.partition("x")
    return int(tile), int(block or 1)


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
    graph: Graph,
    node: Node,
    materialised: set[int],
    dims: list[str],
    tile: int = DEFAULT_TILE,
    block: int = 1,
) -> Launch | None:
    """The tiled launch computing `node`, or None when it is not a tileable product. Each
    work-item computes `block x block` outputs (register blocking): rows `li + a * tile`
    and columns `lj + b * tile` of its work-group's `tile * block` square block, so
    neighbouring work-items still touch neighbouring elements."""
    found = tileable(node)
    if found is None:
        return None
    m_axis, n_axis = found
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    shape = list(node.shape)
    m_extent, n_extent = shape[m_axis], shape[n_axis]
    k_axis = node.op.axis
    k_extent = node.inputs[0].view.shape[k_axis]
    span = tile * block
    rows, cols = ceildiv(m_extent, span) * tile, ceildiv(n_extent, span) * tile
    others = [d for d in range(len(shape)) if d not in (m_axis, n_axis)]
    batch_extent = product(shape[d] for d in others)
    i = w.loop_var("i0_", rows)
    j = w.loop_var("i1_", cols)
    b = w.loop_var("gz_", batch_extent)
    li, lj = loop_index("li_", ONE * tile), loop_index("lj_", ONE * tile)
    kt = w.loop_var("kt_", ceildiv(k_extent, tile))
    kk = loop_index("kk_", ONE * tile)
    # the output's logical indices: M and N per block element, the others from gz_
    indices: list[Expr] = [ONE] * len(shape)
    decode: list[ir.Stmt] = []
    stride: Expr = ONE
    for d in reversed(others):
        name = f"o{d}_"
        value = ir.IndexValue((b // stride) % shape[d], ir.INDEX)
        decode.insert(0, ir.Declare(name, ir.INDEX, value, True))
        indices[d] = w.loop_var(name, shape[d])
        stride = stride * shape[d]
    # the rows and columns this work-item computes, as index locals
    rows_at = [(i - li) * block + li + a * tile for a in range(block)]
    cols_at = [(j - lj) * block + lj + c * tile for c in range(block)]
    places = [
        *(
            ir.Declare(f"row{a}_", ir.INDEX, ir.IndexValue(e, ir.INDEX), True)
            for a, e in enumerate(rows_at)
        ),
        *(
            ir.Declare(f"col{c}_", ir.INDEX, ir.IndexValue(e, ir.INDEX), True)
            for c, e in enumerate(cols_at)
        ),
    ]
    row = [loop_index(f"row{a}_", m_extent + span) for a in range(block)]
    col = [loop_index(f"col{c}_", n_extent + span) for c in range(block)]

    def at(m: Expr, n: Expr) -> list[Expr]:
        out = list(indices)
        out[m_axis], out[n_axis] = m, n
        return out

    def operand(edge_index: int, m: Expr, n: Expr, k: Expr, inside: Expr) -> ir.Value:
        output = at(m, n)
        value = w.edge(node.inputs[edge_index], [*output[:k_axis], k, *output[k_axis:]])
        valid = logical_and(inside, less_than(k, k_extent))
        return ir.Select(valid, value, ir.Const(0.0, node.dtype))

    loads: list[ir.Stmt] = []
    for a in range(block):  # A block: span rows x tile, B block: tile x span columns
        value = operand(0, row[a], col[0], kt * tile + lj, less_than(row[a], m_extent))
        loads.append(ir.Store(A_TILE, (li + a * tile) * tile + lj, value, _F32))
    for c in range(block):
        value = operand(1, row[0], col[c], kt * tile + li, less_than(col[c], n_extent))
        loads.append(ir.Store(B_TILE, li * span + lj + c * tile, value, _F32))
    products: list[ir.Stmt] = []
    for a in range(block):
        products.append(
            ir.Declare(f"tile_a{a}", _F32, ir.Load(A_TILE, (li + a * tile) * tile + kk, _F32), True)
        )
    for c in range(block):
        products.append(
            ir.Declare(f"tile_b{c}", _F32, ir.Load(B_TILE, kk * span + lj + c * tile, _F32), True)
        )
    for a in range(block):
        for c in range(block):
            term = ir.Alu("mul", (ir.Var(f"tile_a{a}", _F32), ir.Var(f"tile_b{c}", _F32)), _F32)
            products.append(ir.Accumulate(f"acc{a}_{c}", "add", term))
    k_loop = ir.Loop(
        "kt_",
        ceildiv(k_extent, tile),
        "serial",
        (*loads, ir.Barrier(), ir.Loop("kk_", ONE * tile, "serial", tuple(products)), ir.Barrier()),
    )
    stores: list[ir.Stmt] = []
    for a in range(block):
        for c in range(block):
            inside = logical_and(less_than(row[a], m_extent), less_than(col[c], n_extent))
            value = ir.Var(f"acc{a}_{c}", _F32)
            stores.append(
                ir.If(
                    inside, (ir.Store(0, flat_index(at(row[a], col[c]), shape), value, node.dtype),)
                )
            )
    work = (
        *decode,
        ir.Declare("li_", ir.INDEX, ir.IndexValue(i % tile, ir.INDEX), True),
        ir.Declare("lj_", ir.INDEX, ir.IndexValue(j % tile, ir.INDEX), True),
        *places,
        *(
            ir.Declare(f"acc{a}_{c}", _F32, ir.Const(0.0, _F32))
            for a in range(block)
            for c in range(block)
        ),
        k_loop,
        *stores,
    )
    body: tuple[ir.Stmt, ...] = (
        ir.Loop("gz_", batch_extent, "gpu_global", (
            ir.Loop("i0_", rows, "gpu_global", (ir.Loop("i1_", cols, "gpu_global", work),)),
        )),
    )  # fmt: skip
    local = (
        ir.LocalMemory(A_TILE, _F32, ONE * (span * tile)),
        ir.LocalMemory(B_TILE, _F32, ONE * (span * tile)),
    )
    suffix = f"_tiled{tile}" + (f"x{block}" if block > 1 else "")
    kernel = ir.Kernel(
        f"{kernel_label(graph, w, node)}{suffix}",
        w.kernel_params(),
        tuple(dims),
        (*local, *body),
        tuple(sorted({*w.nodes, node.id})),
    )
    return Launch(kernel, (cols, rows, batch_extent), (tile, tile, 1))

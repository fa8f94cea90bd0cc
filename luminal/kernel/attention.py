"""The kernel of `ops.FusedAttention`: flash-style attention as kernel IR.

Work items are (batch index, block of ROWS query rows, WIDE_ROWS with wide key
blocks). For each key block of KEYS
keys (WIDE_KEYS for a small head dim), the block's keys are transposed into scratch
(zero-padded, so a score row is a vector loop of a constant KEYS lanes), then each
query row's scores are computed,
scaled and masked, and its running maximum, running sum and output row are rescaled
(online softmax) before the weighted values are added: the output row itself is the
accumulator. Rows go GROUP at a time, the rest one by one: a group's scores and its
weighted values are register tiles (GROUP rows x a few 16-lane vectors accumulated in
locals across the serial head-dim or key loop, stored once), reading the item's query
rows and the block's value rows packed into scratch. Scratch is per thread slot,
KEYS * (D + W + GROUP) + ROWS * (D + 2) floats (W the head width) whatever the sequence
length, each block aligned to a cache line: the (L, S) scores are never stored.

A causal node (`FusedAttention.causal_offset`) skips the key blocks every row of a work
item masks, and computes its mask as a comparison of indices.

Threads: SLOTS parallel slots each own their scratch and take every SLOTS-th work item
(checked mallocs before the parallel loop, freed after).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, index_loop_name
from luminal.kernel.values import ValueLowering
from luminal.shape.expr import ONE, Expr, sym

SLOTS = 64  # parallel slots (threads share them); each owns its scratch
ROWS = 64  # query rows per work item: they share one transposed key block
# ... or WIDE_ROWS with wide key blocks: each block of k is packed (a transposing gather,
# 14 % of the kernel) for half as many items. MiniLM's attention (harness of the
# generated C, 1 thread, minima of 6 alternated runs of 40): 9.1 -> 8.3 ms
WIDE_ROWS = 128
KEYS = 64  # keys per block: a score row is KEYS floats
# ... or WIDE_KEYS when a packed key block of WIDE_KEYS x D floats stays within WIDE_FLOATS
# (16 KB: L1 with the score rows and the values): half the online-softmax steps per row.
# MiniLM's attention (128 keys, head dim 32, 1 thread, CPU time, medians of 40, alternated):
# 13.3/12.6/11.4 -> 11.6/10.5/11.2 ms
WIDE_KEYS = 128
WIDE_FLOATS = 4096
# multiply-adds per store in the two product loops (a store of a 512-bit row slice costs
# about as much as the multiply-adds it follows; measured on AMD Zen 4: 1.3-1.5x faster)
UNROLL = 8
# work items of fewer rows (decoding) read k in place instead of packing key blocks
PACKED_ROWS = 4
# query rows computed together (one load of a key or value vector feeds GROUP rows); a
# head width that is not a multiple of TILE_LANES takes GROUP_UNROLL keys per store of
# the output rows in its weighted values
GROUP = 8
GROUP_UNROLL = 4
# Register tiles (see _score_tile, _value_tile): a group's scores and output rows are
# accumulated in locals of a TILE_LANES-lane vector loop across a serial depth / key loop
# and stored once, so they never go through memory between steps. GROUP rows x at most
# TILE_VECTORS vectors of TILE_LANES lanes (16 512-bit registers for 8 x 2): 16
# independent multiply-add chains, each key / value vector loaded feeds GROUP rows, each
# broadcast TILE_VECTORS vectors. The group's query rows and the block's value rows are
# packed into scratch first (one streaming copy each), so the tile's broadcast loads
# never wait on memory. MiniLM's attention (harness of the generated C, 1 thread, minima
# of 6 alternated runs of 40): 4 x 4 (8 chains in the values: head width 32) 8.6 ms,
# 4 x 2 8.8, 6 x 2 7.5, 8 x 2 7.4
TILE_LANES = 16
TILE_VECTORS = 2
# scratch starts on a cache line (`ir.Alloc.align`): the blocks are read as whole vectors
CACHE_LINE = 64
LOG2_E = 1.0 / math.log(2.0)
FLUSH_BELOW = -126.0  # 2^-126, the smallest normal float32 (see _exp_shifted)
LOWEST = -3.4028234663852886e38  # below every finite float32: the max == -inf test
F32 = DType.float32
KEY_BLOCK, SCORE_ROW, ROW_STATS = "lm_keys", "lm_scores", "lm_stats"
QUERY_BLOCK, VALUE_BLOCK = "lm_queries", "lm_values"


def _product(shape: Sequence[Expr]) -> Expr:
    total = ONE
    for d in shape:
        total = total * d
    return total


def _f(op: str, *args: ir.Value) -> ir.Alu:
    return ir.Alu(op, args, F32)


def _c(value: float) -> ir.Const:
    return ir.Const(value, F32)


def _v(name: str) -> ir.Var:
    return ir.Var(name, F32)


def _exp_shifted(x: ir.Value, shift: ir.Value) -> ir.Value:
    """exp(x - shift) spelled as the softmax primitives spell it, 2^((x + shift*-1) log2 e),
    with arguments clamped at -126 and results for arguments under -126 flushed to 0:
    glibc's vector exp2f takes a scalar slow path for arguments under -126 (18 ns instead
    of 0.2 ns an element, measured), which every masked score (-1e9) would hit; what
    changes are values under 2^-126 that no float32 sum of weights >= 1 can see. NaN stays
    NaN (0 * NaN). The clamp's bound is the local `pfloor` (-126 computed at run time,
    see `_softmax_step`): with a literal bound gcc rewrites exp2f(max(p, -126)) as a
    select of exp2f(p) and the constant exp2f(-126), and the slow path is back."""
    power = _f("mul", _f("add", x, _f("mul", shift, _c(-1.0))), _c(LOG2_E))
    kept = _f("lt", _c(FLUSH_BELOW), power)
    return _f("mul", kept, _f("exp2", _f("max", power, _v("pfloor"))))


class _Builder:
    """Indices, scratch addresses and operand values of one attention kernel."""

    def __init__(self, graph: Graph, node: Node, materialised: set[int]) -> None:
        self.w = ValueLowering(graph, materialised - {node.id})
        self.w.param(node.id)
        self.node, self.op = node, node.op
        self.q, self.k, self.v = node.inputs[:3]
        self.mask = node.inputs[3] if len(node.inputs) == 4 else None
        self.batch = tuple(node.shape[:-2])
        self.length, self.width = node.shape[-2], node.shape[-1]
        self.keys = self.k.view.shape[-2]
        self.depth = self.q.view.shape[-1]
        # keys per block: KEYS, or fewer lanes (a multiple of 16) for a shorter sequence
        known, depth = sym(self.keys).as_int(), sym(self.depth).as_int()
        self.wide = depth is not None and WIDE_KEYS * depth <= WIDE_FLOATS
        most = WIDE_KEYS if self.wide else KEYS
        self.rows = WIDE_ROWS if self.wide else ROWS  # query rows per work item
        self.block = most if known is None else min(most, max(16, -(-known // 16) * 16))
        self.slot = sym(0)  # the parallel slot's index, set by attention_kernel
        self.indices: list[Expr] = []
        self.row0 = self.nrows = self.col0 = self.ncols = sym(0)

    def index(self, name: str, extent: Expr) -> Expr:
        return self.w.loop_var(name, extent)

    def local(self, name: str, value: Expr) -> tuple[Expr, ir.Declare]:
        """An INDEX local (read in index expressions as the returned variable)."""
        variable = self.index(name, sym(value))
        return variable, ir.Declare(name, ir.INDEX, ir.IndexValue(value, ir.INDEX), True)

    def loop(self, name: str, extent: Expr, kind: str, body: Callable) -> ir.Loop:
        """A loop over a fresh index; `body(index)` gives its statements."""
        index = self.index(name, extent)
        return ir.Loop(index_loop_name(index), extent, kind, tuple(body(index)))  # type: ignore[arg-type]

    # scratch of the current slot
    def key_at(self, d: Expr, j: Expr) -> Expr:
        return (self.slot * self.depth + d) * self.block + j

    def score_at(self, j: Expr, r: Expr | int = 0) -> Expr:
        return (self.slot * GROUP + r) * self.block + j

    def query_at(self, i: Expr, d: Expr) -> Expr:
        return (self.slot * self.rows + i) * self.depth + d

    def value_at(self, j: Expr, e: Expr) -> Expr:
        return (self.slot * self.block + j) * self.width + e

    def value_vectors(self) -> int | None:
        """TILE_LANES-lane vectors of an output row per value tile (None: the head
        width is not a known multiple of TILE_LANES; the values take the plain loops)."""
        width = sym(self.width).as_int()
        if width is None or width % TILE_LANES:
            return None
        return _vectors(width // TILE_LANES)

    def peak_at(self, i: Expr) -> Expr:
        return self.slot * 2 * self.rows + i

    def total_at(self, i: Expr) -> Expr:
        return self.slot * 2 * self.rows + self.rows + i

    # operands at the current work item
    def out_at(self, row: Expr, e: Expr) -> Expr:
        return flat_index([*self.indices, row, e], self.node.shape)

    def query(self, row: Expr, d: Expr) -> ir.Value:
        return self.w.edge(self.q, [*self.indices, row, sym(0), d])

    def key(self, col: Expr, d: Expr) -> ir.Value:
        return self.w.edge(self.k, [*self.indices, sym(0), col, d])

    def value(self, col: Expr, e: Expr) -> ir.Value:
        return self.w.edge(self.v, [*self.indices, sym(0), e, col])

    def masked(self, score: ir.Value, row: Expr, col: Expr) -> ir.Value:
        """The scaled score plus the additive mask (a causal one compared in place)."""
        if self.op.causal_offset is not None:
            hidden = (row + self.op.causal_offset).lt(col)
            score = _f("add", score, ir.Select(hidden, _c(self.op.causal_value), _c(0.0)))
        if self.mask is not None:
            score = _f("add", score, self.w.edge(self.mask, [*self.indices, row, col]))
        return score

    def key_blocks(self) -> Expr:
        """Key blocks a work item visits: causal ones stop after the last row's last
        visible key, unless its first row sees no key at all (then it averages every
        key, as the unfused softmax of an all-masked row does)."""
        blocks = sym(self.keys).ceildiv(self.block)
        offset = self.op.causal_offset
        if offset is None:
            return blocks
        last = self.row0 + self.nrows - 1 + offset
        visible = blocks.min(last // self.block + 1)
        return visible.max((self.row0 + offset).lt(0) * blocks)


def attention_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """The IR of one `ops.FusedAttention` node (see the module docstring)."""
    b = _Builder(graph, node, materialised)
    blocks = sym(b.length).ceildiv(b.rows)
    items = _product(b.batch) * blocks
    slots = sym(SLOTS).min(items)
    b.slot = b.index("t0_", slots)
    rounds = b.index("r0_", (items - b.slot).ceildiv(slots))
    # slot t takes items t, 2 SLOTS - 1 - t, 2 SLOTS + t, ...: a thread's slots get early
    # (short, under a causal mask) and late (long) row blocks alike
    snake = rounds * slots + b.slot + (rounds % 2) * (slots - 1 - 2 * b.slot)
    item, item_decl = b.local("item_", snake)
    decls = _batch_indices(b, item, blocks)
    b.row0, row0_decl = b.local("row0_", (item % blocks) * b.rows)
    b.nrows, nrows_decl = b.local("nrows_", sym(b.rows).min(b.length - b.row0))
    pack = ir.If(b.nrows.ge(GROUP), (_pack_queries(b),))
    body = (item_decl, *decls, row0_decl, nrows_decl, _initialise(b), pack, _key_loop(b))
    body = (*body, _finish(b))
    work = _product(b.batch) * b.length * b.keys * b.depth
    per_item = ir.Loop(index_loop_name(rounds), (items - b.slot).ceildiv(slots), "serial", body)
    parallel = ir.Loop(index_loop_name(b.slot), slots, "parallel", (per_item,), work)
    scratch = {
        KEY_BLOCK: slots * b.block * b.depth,
        SCORE_ROW: slots * b.block * GROUP,
        ROW_STATS: slots * 2 * b.rows,
        QUERY_BLOCK: slots * b.rows * b.depth,
    }
    if b.value_vectors() is not None:
        scratch[VALUE_BLOCK] = slots * b.block * b.width
    allocs, released = [], []
    for name, elements in scratch.items():
        allocs.append(ir.Alloc(name, F32, elements, tuple(released), CACHE_LINE))
        released.append(name)
    frees = [ir.Free(name) for name in scratch]
    return ir.Kernel(
        "fused_attention",
        b.w.kernel_params(),
        tuple(dims),
        (*allocs, parallel, *frees),
        tuple(sorted({node.id, *b.w.nodes})),
        scratch=tuple(e * F32.itemsize for e in scratch.values()),
        reports_faults=True,
    )


def _batch_indices(b: _Builder, item: Expr, blocks: Expr) -> list[ir.Stmt]:
    """The batch indices of work item `item` (row blocks innermost) into `b.indices`."""
    decls: list[ir.Stmt] = []
    stride = blocks
    for axis in reversed(range(len(b.batch))):
        index, decl = b.local(f"n{axis}_", (item // stride) % b.batch[axis])
        b.indices.insert(0, index)
        decls.insert(0, decl)
        stride = stride * b.batch[axis]
    return decls


def _initialise(b: _Builder) -> ir.Loop:
    """Each row of the item: max -inf, sum 0, output row 0."""

    def row(i: Expr) -> list[ir.Stmt]:
        zero = b.loop(
            "e0_", b.width, "reduce", lambda e: [ir.Store(0, b.out_at(b.row0 + i, e), _c(0.0), F32)]
        )
        return [
            ir.Store(ROW_STATS, b.peak_at(i), _c(float("-inf")), F32),
            ir.Store(ROW_STATS, b.total_at(i), _c(0.0), F32),
            zero,
        ]

    return b.loop("i0_", b.nrows, "serial", row)


def _key_loop(b: _Builder) -> ir.Loop:
    blocks = b.key_blocks()
    block = b.index("kb_", blocks)
    b.col0, col0_decl = b.local("col0_", block * b.block)
    b.ncols, ncols_decl = b.local("ncols_", sym(b.block).min(b.keys - b.col0))

    def transpose(d: Expr) -> list[ir.Stmt]:  # a row of the packed block: lanes gather keys
        def element(j: Expr) -> list[ir.Stmt]:
            value = ir.Select(j.lt(b.ncols), b.key(b.col0 + j, d), _c(0.0))
            return [ir.Store(KEY_BLOCK, b.key_at(d, j), value, F32)]

        return [b.loop("j0_", sym(b.block), "reduce", element)]

    keys = ir.If(b.nrows.ge(PACKED_ROWS), (b.loop("d0_", b.depth, "serial", transpose),))
    packs: list[ir.Stmt] = [keys]
    if b.value_vectors() is not None:  # the groups' value tiles read packed values
        packs.append(ir.If(b.nrows.ge(GROUP), (_pack_values(b),)))
    groups = b.nrows // GROUP
    grouped = b.loop("g0_", groups, "serial", lambda g: _group(b, g * GROUP))
    rest = b.loop("i0_", b.nrows - groups * GROUP, "serial", lambda i: _row(b, groups * GROUP + i))
    return ir.Loop(
        index_loop_name(block), blocks, "serial", (col0_decl, ncols_decl, *packs, grouped, rest)
    )


def _pack_queries(b: _Builder) -> ir.Loop:
    """The work item's query rows into the slot's scratch, contiguous: one streaming
    copy, so the score tiles' broadcast loads hit L1 (read in place, each waited on
    memory inside the tile's multiply-add chains: 8 % slower than no tile)."""

    def row(i: Expr) -> list[ir.Stmt]:
        def lane(d: Expr) -> list[ir.Stmt]:
            return [ir.Store(QUERY_BLOCK, b.query_at(i, d), b.query(b.row0 + i, d), F32)]

        return [b.loop("d0_", b.depth, "reduce", lane)]

    return b.loop("i0_", b.nrows, "serial", row)


def _pack_values(b: _Builder) -> ir.Loop:
    """The key block's value rows into the slot's scratch, contiguous (as the queries)
    and zero-padded to the block: the value tiles' key loop has a constant count."""

    def key(j: Expr) -> list[ir.Stmt]:
        def lane(e: Expr) -> list[ir.Stmt]:
            value = ir.Select(j.lt(b.ncols), b.value(b.col0 + j, e), _c(0.0))
            return [ir.Store(VALUE_BLOCK, b.value_at(j, e), value, F32)]

        return [b.loop("e0_", b.width, "reduce", lane)]

    return b.loop("j0_", sym(b.block), "serial", key)


def _vectors(available: int) -> int:
    """Vectors per tile: the most of TILE_VECTORS, 2, 1 that divides `available`."""
    return next(v for v in (TILE_VECTORS, 2, 1) if available % v == 0)


def _tile_step(
    acc: list[list[str]], rows: list[ir.Value], columns: list[ir.Value]
) -> list[ir.Stmt]:
    """One step of a register tile's serial loop, both tiles' product: each row's and
    each column's value read once into a local, then acc[r][c] += rows[r] * columns[c]."""
    reads = [ir.Declare(f"tc{c}", F32, v, True) for c, v in enumerate(columns)]
    reads += [ir.Declare(f"tr{r}", F32, v, True) for r, v in enumerate(rows)]
    updates = [
        ir.Accumulate(acc[r][c], "add", _f("mul", _v(f"tr{r}"), _v(f"tc{c}")))
        for r in range(len(rows))
        for c in range(len(columns))
    ]
    return [*reads, *updates]


def _register_tiles(
    b: _Builder,
    names: tuple[str, str, str],
    tiles: Expr,
    vectors: int,
    serial: Expr,
    acc: list[list[str]],
    operands: Callable[[Expr, list[Expr]], tuple[list[ir.Value], list[ir.Value]]],
    start: Callable[[int, Expr], ir.Value],
    store: Callable[[int, Expr, ir.Value], ir.Stmt],
) -> ir.Loop:
    """`tiles` register tiles of GROUP rows x `vectors` x TILE_LANES columns (loops named
    `names`: tiles, lanes, the serial loop): per tile, the accumulators acc[r][c] of a
    TILE_LANES-lane loop start at start(r, column), take one `_tile_step` of the rows'
    and columns' values `operands(k, columns)` per step k of the serial loop (`serial`
    steps), and are stored once (`store(r, column, value)`)."""
    width = vectors * TILE_LANES

    def tile(t: Expr) -> list[ir.Stmt]:
        def lane(j: Expr) -> list[ir.Stmt]:
            cols = [t * width + c * TILE_LANES + j for c in range(vectors)]

            def step(k: Expr) -> list[ir.Stmt]:
                return _tile_step(acc, *operands(k, cols))

            starts = [
                ir.Declare(acc[r][c], F32, start(r, col))
                for r in range(GROUP)
                for c, col in enumerate(cols)
            ]
            stores = [
                store(r, col, _v(acc[r][c])) for r in range(GROUP) for c, col in enumerate(cols)
            ]
            return [*starts, b.loop(names[2], serial, "serial", step), *stores]

        return [b.loop(names[1], sym(TILE_LANES), "reduce", lane)]

    return b.loop(names[0], tiles, "serial", tile)


def _score_tile(b: _Builder, first: Expr) -> ir.Loop:
    """The group's scores against the packed key block as register tiles: per tile,
    GROUP rows x `vectors` x TILE_LANES keys accumulate in locals of a TILE_LANES-lane
    loop across the serial head-dim loop (each key vector loaded feeds GROUP rows, each
    query broadcast `vectors` key vectors) and are stored once."""
    vectors = _vectors(b.block // TILE_LANES)

    def operands(d: Expr, cols: list[Expr]) -> tuple[list[ir.Value], list[ir.Value]]:
        queries = [ir.Load(QUERY_BLOCK, b.query_at(first + r, d), F32) for r in range(GROUP)]
        return queries, [ir.Load(KEY_BLOCK, b.key_at(d, col), F32) for col in cols]

    return _register_tiles(
        b,
        ("jt_", "j0_", "d0_"),
        sym(b.block // (vectors * TILE_LANES)),
        vectors,
        b.depth,
        [[f"acc{r}_{c}" for c in range(vectors)] for r in range(GROUP)],
        operands,
        lambda r, col: _c(0.0),
        lambda r, col, value: ir.Store(SCORE_ROW, b.score_at(col, r), value, F32),
    )


def _value_tile(b: _Builder, first: Expr, vectors: int) -> ir.Loop:
    """out[rows] += weights x values for the group as register tiles: per tile, GROUP
    rows x `vectors` x TILE_LANES output columns are read once, accumulate in locals of
    a TILE_LANES-lane loop across the serial loop over the block's keys (packed values,
    zero-padded, and weights, zero past the keys: a constant count, which gcc needs to
    vectorise the lane loop around it) and are stored once."""
    rows = [b.row0 + first + r for r in range(GROUP)]

    def operands(j: Expr, cols: list[Expr]) -> tuple[list[ir.Value], list[ir.Value]]:
        weights = [ir.Load(SCORE_ROW, b.score_at(j, r), F32) for r in range(GROUP)]
        return weights, [ir.Load(VALUE_BLOCK, b.value_at(j, col), F32) for col in cols]

    return _register_tiles(
        b,
        ("et_", "e0_", "j0_"),
        sym(b.width) // (vectors * TILE_LANES),
        vectors,
        sym(b.block),
        [[f"out{r}_{c}" for c in range(vectors)] for r in range(GROUP)],
        operands,
        lambda r, col: ir.Load(0, b.out_at(rows[r], col), F32),
        lambda r, col, value: ir.Store(0, b.out_at(rows[r], col), value, F32),
    )


def _group(b: _Builder, first: Expr) -> list[ir.Stmt]:
    """GROUP query rows from `first` against the current key block (packed keys): the
    scores of all rows at once, each row's online softmax, then the values of all rows."""

    def softmax(r: Expr) -> list[ir.Stmt]:
        return _softmax_row(b, first + r, b.row0 + first + r, r)

    def pad(r: Expr) -> list[ir.Stmt]:  # weights past the block's keys: 0, not scores
        def lane(j: Expr) -> list[ir.Stmt]:
            return [ir.Store(SCORE_ROW, b.score_at(b.ncols + j, r), _c(0.0), F32)]

        return [b.loop("j0_", b.block - b.ncols, "reduce", lane)]

    vectors = b.value_vectors()
    if vectors is None:
        values = _group_values(b, first)
    else:
        values = [b.loop("h0_", sym(GROUP), "serial", pad), _value_tile(b, first, vectors)]
    return [_score_tile(b, first), b.loop("h0_", sym(GROUP), "serial", softmax), *values]


def _group_values(b: _Builder, first: Expr) -> list[ir.Stmt]:
    """out[rows] += weights x v[key] for GROUP rows: GROUP_UNROLL keys per store, each
    value vector loaded once for every row, then the rest of the keys one by one."""
    rows = [b.row0 + first + r for r in range(GROUP)]

    def keys(first_key: Callable[[Expr], Expr], count: int) -> Callable[[Expr], list[ir.Stmt]]:
        def body(j: Expr) -> list[ir.Stmt]:
            cols = [first_key(j) + u for u in range(count)]

            def lane(e: Expr) -> list[ir.Stmt]:
                values = [
                    ir.Declare(f"vv{u}", F32, b.value(b.col0 + col, e), True)
                    for u, col in enumerate(cols)
                ]
                stores = []
                for r, row in enumerate(rows):
                    out = b.out_at(row, e)
                    step: ir.Value = ir.Load(0, out, F32)
                    for u in range(count):
                        step = _f("add", step, _f("mul", _v(f"p{r}j{u}"), _v(f"vv{u}")))
                    stores.append(ir.Store(0, out, step, F32))
                return [*values, *stores]

            weights = [
                ir.Declare(f"p{r}j{u}", F32, ir.Load(SCORE_ROW, b.score_at(col, r), F32), True)
                for r in range(GROUP)
                for u, col in enumerate(cols)
            ]
            return [*weights, b.loop("e0_", b.width, "reduce", lane)]

        return body

    return _key_steps(b, GROUP_UNROLL, keys)


def _row(b: _Builder, i: Expr) -> list[ir.Stmt]:
    """One query row against the current key block: scores, online softmax, values."""
    row = b.row0 + i
    score = lambda j: ir.Load(SCORE_ROW, b.score_at(j), F32)  # noqa: E731

    def product(d: Expr) -> list[ir.Stmt]:  # UNROLL depths per store of the score row
        unroll = _unroll(b.depth)
        depths = [d * unroll + u for u in range(unroll)]

        def lane(j: Expr) -> list[ir.Stmt]:
            step: ir.Value = score(j)
            for u, depth in enumerate(depths):
                key = ir.Load(KEY_BLOCK, b.key_at(depth, j), F32)
                step = _f("add", step, _f("mul", _v(f"qv{u}"), key))
            return [ir.Store(SCORE_ROW, b.score_at(j), step, F32)]

        queries = [ir.Declare(f"qv{u}", F32, b.query(row, x), True) for u, x in enumerate(depths)]
        return [*queries, b.loop("j0_", sym(b.block), "reduce", lane)]

    clear = b.loop(
        "j0_", sym(b.block), "reduce", lambda j: [ir.Store(SCORE_ROW, b.score_at(j), _c(0.0), F32)]
    )
    packed = (clear, b.loop("d0_", sym(b.depth) // _unroll(b.depth), "serial", product))
    return [
        ir.If(b.nrows.ge(PACKED_ROWS), packed, (_direct_scores(b, row),)),
        *_softmax_row(b, i, row, 0),
        *_weighted_values(b, row),
    ]


def _softmax_row(b: _Builder, i: Expr, row: Expr, r: Expr | int) -> list[ir.Stmt]:
    """Row i's scores (score row r of the slot) scaled and masked, the online softmax's
    new maximum, sum and rescaled output row, and the scores turned into weights."""
    score = lambda j: ir.Load(SCORE_ROW, b.score_at(j, r), F32)  # noqa: E731
    j = b.index("j0_", b.ncols)
    scaled = b.masked(_f("mul", score(j), _c(b.op.scale)), row, b.col0 + j)
    masked = ir.Loop(
        index_loop_name(j),
        b.ncols,
        "reduce",
        (
            ir.Declare("sv", F32, scaled, True),
            ir.Store(SCORE_ROW, b.score_at(j, r), _v("sv"), F32),
            ir.Accumulate("mb", "max", _v("sv")),
        ),
        reductions=(ir.Reduction("mb", "max", F32),),
    )
    exps = ir.Loop(
        index_loop_name(j),
        b.ncols,
        "reduce",
        (
            ir.Declare("pv", F32, _exp_shifted(score(j), _v("msafe")), True),
            ir.Store(SCORE_ROW, b.score_at(j, r), _v("pv"), F32),
            ir.Accumulate("ps", "add", _v("pv")),
        ),
        reductions=(ir.Reduction("ps", "add", F32),),
    )
    return [masked, *_softmax_step(b, i), exps, *_rescale(b, i, row)]


def _direct_scores(b: _Builder, row: Expr) -> ir.Loop:
    """The score row as one dot product per key, reading k in place: for work items of
    a few rows (decoding), where packing the key block would cost more than it saves."""

    def key(j: Expr) -> list[ir.Stmt]:
        def lane(d: Expr) -> list[ir.Stmt]:
            return [ir.Accumulate("dot", "add", _f("mul", b.query(row, d), b.key(b.col0 + j, d)))]

        d = b.index("d0_", b.depth)
        dot = ir.Loop(
            index_loop_name(d),
            b.depth,
            "reduce",
            tuple(lane(d)),
            reductions=(ir.Reduction("dot", "add", F32),),
        )
        return [dot, ir.Store(SCORE_ROW, b.score_at(j), _v("dot"), F32)]

    return b.loop("j0_", b.ncols, "serial", key)


def _softmax_step(b: _Builder, i: Expr) -> list[ir.Stmt]:
    """The new running maximum, the shift used for this block (0 while every score so far
    is -inf, so exp gives 0 rather than NaN) and the factor rescaling what came before."""
    new = _v("mnew")
    safe = ir.Select(_f("lt", _c(LOWEST), new), new, _c(0.0))
    return [
        ir.Declare("mold", F32, ir.Load(ROW_STATS, b.peak_at(i), F32), True),
        ir.Declare("mnew", F32, _f("max", _v("mold"), _v("mb")), True),
        ir.Declare("msafe", F32, safe, True),
        # FLUSH_BELOW as a value the compiler cannot fold (msafe * 0 is not 0 for inf/NaN)
        ir.Declare(
            "pfloor", F32, _f("add", _f("mul", _v("msafe"), _c(0.0)), _c(FLUSH_BELOW)), True
        ),
        ir.Declare("alpha", F32, _exp_shifted(_v("mold"), _v("msafe")), True),
    ]


def _rescale(b: _Builder, i: Expr, row: Expr) -> list[ir.Stmt]:
    total = _f("add", _f("mul", ir.Load(ROW_STATS, b.total_at(i), F32), _v("alpha")), _v("ps"))

    def lane(e: Expr) -> list[ir.Stmt]:
        out = b.out_at(row, e)
        return [ir.Store(0, out, _f("mul", ir.Load(0, out, F32), _v("alpha")), F32)]

    return [
        ir.Store(ROW_STATS, b.total_at(i), total, F32),
        ir.Store(ROW_STATS, b.peak_at(i), _v("mnew"), F32),
        b.loop("e0_", b.width, "reduce", lane),
    ]


def _weighted_values(b: _Builder, row: Expr) -> list[ir.Stmt]:
    """out[row] += sum over the block's keys of weight * v[key]: UNROLL keys per store of
    the output row, then the rest one by one."""

    def keys(first: Callable[[Expr], Expr], count: int) -> Callable[[Expr], list[ir.Stmt]]:
        def body(j: Expr) -> list[ir.Stmt]:
            cols = [first(j) + u for u in range(count)]

            def lane(e: Expr) -> list[ir.Stmt]:
                out = b.out_at(row, e)
                step: ir.Value = ir.Load(0, out, F32)
                for u, col in enumerate(cols):
                    step = _f("add", step, _f("mul", _v(f"pj{u}"), b.value(b.col0 + col, e)))
                return [ir.Store(0, out, step, F32)]

            weights = [
                ir.Declare(f"pj{u}", F32, ir.Load(SCORE_ROW, b.score_at(col), F32), True)
                for u, col in enumerate(cols)
            ]
            return [*weights, b.loop("e0_", b.width, "reduce", lane)]

        return body

    return _key_steps(b, UNROLL, keys)


def _key_steps(
    b: _Builder, unroll: int, keys: Callable[[Callable[[Expr], Expr], int], Callable]
) -> list[ir.Stmt]:
    """The block's keys `unroll` at a time, then the rest one by one: `keys(first, count)`
    is the body for the keys `first(j), first(j) + 1, ...` (count of them)."""
    groups = sym(b.ncols) // unroll
    rest = b.ncols - groups * unroll
    return [
        b.loop("j0_", groups, "serial", keys(lambda j: j * unroll, unroll)),
        b.loop("j0_", rest, "serial", keys(lambda j: groups * unroll + j, 1)),
    ]


def _unroll(depth: Expr) -> int:
    """How many head-dim steps share one store of the score row (dividing D)."""
    size = sym(depth).as_int()
    return next((u for u in (UNROLL, 4, 2) if size is not None and size % u == 0), 1)


def _finish(b: _Builder) -> ir.Loop:
    """Divide each row by its sum (no keys at all: an empty sum, 0, as unfused)."""

    def row(i: Expr) -> list[ir.Stmt]:
        total = ir.Load(ROW_STATS, b.total_at(i), F32)
        inverse = ir.Select(sym(b.keys).ge(1), _f("recip", total), _c(0.0))

        def lane(e: Expr) -> list[ir.Stmt]:
            out = b.out_at(b.row0 + i, e)
            return [ir.Store(0, out, _f("mul", ir.Load(0, out, F32), _v("inv")), F32)]

        return [ir.Declare("inv", F32, inverse, True), b.loop("e0_", b.width, "reduce", lane)]

    return b.loop("i0_", b.nrows, "serial", row)

"""Lowering from the schedule to kernel IR: one builder per kind of materialised node
(elementwise chain, reduction, row-fused group, gather, scatter, custom kernel), each
returning an `ir.Kernel` built with the `ValueLowering` of `values.py`.

Loop structure is decided here, not by a renderer: the outermost loop of a nest is
`parallel` (with its work, so a renderer may keep small nests serial), reductions are
`reduce` loops with their accumulators, short reductions unroll into straight code.
"""

from __future__ import annotations

from collections.abc import Sequence

from luminal import ops
from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, index_loop_name
from luminal.kernel.transforms import walk
from luminal.kernel.values import NotRowLocal, ValueLowering, substitute_indices
from luminal.schedule.fusion import UNROLL_LIMIT
from luminal.shape.expr import ONE, ZERO, Expr, sym

__all__ = [
    "NotRowLocal",
    "custom_kernel",
    "elementwise_kernel",
    "gather_kernel",
    "reduce_kernel",
    "row_kernel",
    "scatter_kernel",
]


# iterations the leading loops of a reordered elementwise nest should offer the threads
# (`_read_major_order`): the renderer's collapse(2) shares fewer than 64 with the next loop
PARALLEL_ITERATIONS = 128


def product(shape: Sequence[Expr]) -> Expr:
    total = ONE
    for d in shape:
        total = total * d
    return total


def loop_nest(
    shape: Sequence[Expr],
    indices: Sequence[Expr],
    body: Sequence[ir.Stmt],
    work: Expr | None,
) -> tuple[ir.Stmt, ...]:
    """Loops over `shape`, the outermost parallel over `work` elements (`work=None`: all
    serial). Loops of one iteration go innermost (the compiler removes them), so a
    leading dim of 1 (one image) does not leave the parallel loop a single iteration.
    A 0-d shape is the body itself."""
    order = [a for a in range(len(shape)) if shape[a] != 1]
    order += [a for a in range(len(shape)) if shape[a] == 1]
    nest = tuple(body)
    for position, axis in reversed(list(enumerate(order))):
        kind = "parallel" if position == 0 and work is not None else "serial"
        name = index_loop_name(indices[axis])
        nest = (ir.Loop(name, shape[axis], kind, nest, work if kind == "parallel" else None),)
    return nest


def _kernel(
    graph: Graph,
    node: Node,
    w: ValueLowering,
    dims: Sequence[str],
    body: tuple[ir.Stmt, ...],
    faults: bool = False,
) -> ir.Kernel:
    computed = tuple(sorted(set(w.nodes + [node.id])))
    return ir.Kernel(
        kernel_label(graph, w, node),
        w.kernel_params(),
        tuple(dims),
        body,
        computed,
        reports_faults=faults,
    )


def kernel_label(graph: Graph, w: ValueLowering, node: Node) -> str:
    """A kernel's name: the first four distinct ops it computes, producers first."""
    names = [graph.nodes[n].op.name.lower() for n in reversed(w.nodes)]
    if node.id not in w.nodes:
        names.append(node.op.name.lower())
    seen: list[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return "_".join(seen[:4]) or node.op.name.lower()


def _writer(graph: Graph, node: Node, materialised: set[int]) -> ValueLowering:
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    return w


# ------------------------------------------------------------------------ elementwise
def elementwise_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    w = _writer(graph, node, materialised)
    indices = w.loop_vars(node.shape)
    value = w.value(node, indices)
    store = ir.Store(0, flat_index(indices, node.shape), value, node.dtype)
    order = _read_major_order(value, indices, node.shape)
    shape = [node.shape[a] for a in order]
    body = loop_nest(shape, [indices[a] for a in order], [store], product(node.shape))
    return _kernel(graph, node, w, dims, body)


def _read_major_order(value: ir.Value, indices: Sequence[Expr], shape: Sequence[Expr]) -> list[int]:
    """The loop order of an elementwise nest: the output's, unless the value is one load
    whose largest stride is not along the outermost axis. Then the axes with the largest
    strides go first, until they give `PARALLEL_ITERATIONS` iterations to share among the
    threads; the rest keep the output's order. Winograd's window copy, (ah, aw, C, N, th,
    tw) read from NCHW, then runs over (N, C) outside the window offsets: threads over
    the offsets each read the whole input, threads over images and channels each read
    their own (56x56x64 at batch 8, 2 threads: 0.49 -> 0.34 ms)."""
    axes = list(range(len(indices)))
    loads = _loads(value)
    if len(loads) != 1 or len(axes) < 3:
        return axes
    strides = [_stride(loads[0].index, _variable(index)) for index in indices]
    if any(s is None for s in strides):
        return axes
    outer = [a for a in axes[:-1] if shape[a] != 1]  # the innermost loop stays innermost
    if not outer or abs(strides[outer[0]]) >= max(abs(strides[a]) for a in outer):
        return axes
    front: list[int] = []
    iterations = ONE
    for a in sorted(outer, key=lambda a: -abs(strides[a])):
        if strides[a] == 0 or _at_least(iterations, PARALLEL_ITERATIONS):
            break
        front.append(a)
        iterations = iterations * shape[a]
    return front + [a for a in axes if a not in front]


def _at_least(count: Expr, bound: int) -> bool:
    """Whether a loop count is known to be at least `bound` (a symbolic one is not)."""
    value = count.as_int()
    return value is not None and value >= bound


# ------------------------------------------------------------------------- reductions
def reduce_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str], columns: bool = False
) -> ir.Kernel:
    """SumReduce/MaxReduce, or a Contract (sum of a product) without BLAS: one output
    element per outer iteration, producers fused into the inner loop; with `columns`, a
    reduction over a strided axis accumulates over contiguous output columns instead
    (`_column_reduction`: a form for one thread vectorising across columns, which the
    CPU asks for; GPU work-items over the output already read consecutive columns at
    once, so a backend that does not ask gets the plain form)."""
    if len(getattr(node.op, "summed", ())) > 1:
        return _multi_sum_kernel(graph, node, materialised, dims)
    w = _writer(graph, node, materialised)
    axis = node.op.axis
    size = node.inputs[0].view.shape[axis]
    outer = w.loop_vars(node.shape)
    upper = size.as_int()
    reduce_index = w.loop_var("r0_", size)
    if upper is not None and upper <= UNROLL_LIMIT:
        # a short reduction (relu is a max over the pair (x, 0)) unrolls into straight
        # code, so the surrounding loop vectorises and padding checks fold away
        terms = [
            w.reduced_value(node, outer[:axis] + [sym(k)] + outer[axis:]) for k in range(upper)
        ]
        stages = _unrolled(node, terms)
    else:
        value = w.reduced_value(node, outer[:axis] + [reduce_index] + outer[axis:])
        tiled = _column_reduction(w, node, value, outer, reduce_index) if columns else None
        if tiled is not None:
            return _kernel(graph, node, w, dims, tiled)
        stages = [_reduction_loop(node, value, reduce_index, size, "acc")]
    acc = ir.Var("acc", node.dtype)
    store = ir.Store(0, flat_index(outer, node.shape), acc, node.dtype)
    work = product(node.inputs[0].view.shape)
    return _kernel(graph, node, w, dims, loop_nest(node.shape, outer, [*stages, store], work))


# a column reduction accumulates in this many output elements at most per outer
# iteration (16 KB of float32: they stay in L1 while the reduced rows stream past)
COLUMN_TILE = 4096
# with no other output axis to run on threads, the columns are cut into blocks of the
# largest of these that divides them into at least four (else two)
COLUMN_BLOCKS = (1024, 512, 256, 128, 64)


def _column_reduction(
    w: ValueLowering, node: Node, value: ir.Value, outer: list[Expr], reduce_index: Expr
) -> tuple[ir.Stmt, ...] | None:
    """A reduction over a strided axis whose innermost output axis is contiguous (MiniLM's
    `(V * 0).sum(-2)` over keys at stride 384, a bias gradient summed over the batch):
    the reduce loop outside, the trailing output axes (the columns) inside, accumulating
    in the output row, so each step reads a contiguous run of the input and gcc
    vectorises across columns; the reduce-innermost form gathers at the axis's stride.
    Each element is still reduced in order of the reduced index. None where that form
    does not apply: the reduced axis is contiguous in some load that the columns read
    (a per-row weight `w[r]` is not such a load: masked mean pooling takes this form),
    no load is contiguous along the last output axis, or the output is not
    float32/int32 (a float16 accumulator in memory would round at every step)."""
    if node.dtype not in (DType.float32, DType.int32) or not outer or node.shape[-1] == 1:
        return None
    loads = _loads(value)
    reduced, last = _variable(reduce_index), _variable(outer[-1])
    # a load the columns do not read (a per-row weight) is read once per row
    if any(_unit_stride(load.index, reduced) for load in loads if last in load.index.variables()):
        return None
    if not any(_unit_stride(load.index, last) for load in loads):
        return None
    shape = tuple(node.shape)
    tile = _column_tile(shape)
    outer_axes = [a for a in range(len(shape)) if a not in tile]
    flat = flat_index(outer, shape)
    op = "max" if isinstance(node.op, ops.MaxReduce) else "add"
    identity = _identity(op, node.dtype)
    if all(shape[a] == 1 for a in outer_axes):  # the columns are every output element
        blocked = _column_blocks(w, value, outer, tile[-1], shape)
        if blocked is not None:
            value, outer, flat, shape, tile, outer_axes = blocked
    update = ir.Alu(op, (ir.Load(0, flat, node.dtype), value), node.dtype)
    tile_shape = [shape[a] for a in tile]
    tile_idx = [outer[a] for a in tile]
    init = loop_nest(tile_shape, tile_idx, [ir.Store(0, flat, identity, node.dtype)], None)
    steps = loop_nest(tile_shape, tile_idx, [ir.Store(0, flat, update, node.dtype)], None)
    size = node.inputs[0].view.shape[node.op.axis]
    reduce_loop = ir.Loop(index_loop_name(reduce_index), size, "serial", steps)
    work = product(node.inputs[0].view.shape)
    outer_shape = [shape[a] for a in outer_axes]
    outer_idx = [outer[a] for a in outer_axes]
    return loop_nest(outer_shape, outer_idx, [*init, reduce_loop], work)


def _column_tile(shape: tuple[Expr, ...]) -> list[int]:
    """The trailing output axes accumulated inside the reduce loop: the last, then
    outward while the tile stays within COLUMN_TILE elements and another axis (of more
    than one element) is left for the parallel loop."""
    tile = [len(shape) - 1]
    elements = shape[-1].as_int()
    for a in range(len(shape) - 2, -1, -1):
        extent = shape[a].as_int()
        rest = [b for b in range(a) if shape[b] != 1]
        if extent is None or elements is None or elements * extent > COLUMN_TILE or not rest:
            break
        tile.insert(0, a)
        elements *= extent
    return tile


def _column_blocks(
    w: ValueLowering, value: ir.Value, outer: list[Expr], axis: int, shape: tuple[Expr, ...]
) -> tuple | None:
    """The columns (every output element, along `axis`) as parallel blocks times the
    columns of one block, where a size of COLUMN_BLOCKS divides them into four blocks or
    more (else two): the blocks run on threads as the output elements did."""
    columns = shape[axis].as_int()
    if columns is None:
        return None
    fits = [b for b in COLUMN_BLOCKS if columns % b == 0 and columns > b]
    block = next((b for b in fits if columns // b >= 4), fits[0] if fits else None)
    if block is None:
        return None
    blocks = w.loop_var("k0_", sym(columns // block))
    inner = w.loop_var("c0_", sym(block))
    (name,) = outer[axis].variables()
    value = substitute_indices(value, {name: blocks * block + inner})
    outer = [*outer[:axis], blocks, inner, *outer[axis + 1 :]]
    shape = (*shape[:axis], sym(columns // block), sym(block), *shape[axis + 1 :])
    flat = flat_index(outer, shape)
    tile = [axis + 1]
    outer_axes = [a for a in range(len(shape)) if a != axis + 1]
    return value, outer, flat, shape, tile, outer_axes


def _identity(op: str, dtype: DType) -> ir.Const:
    if op == "add":
        return _zero(dtype)
    return ir.Const(float("-inf") if dtype.is_float else -(2**31), dtype)


def _variable(index: Expr) -> str:
    (name,) = index.variables()
    return name


def _unit_stride(index: Expr, variable: str) -> bool:
    """Whether `index` steps by exactly 1 along `variable` (affine in it, coefficient 1)."""
    return _stride(index, variable) == 1


def _stride(index: Expr, variable: str) -> int | None:
    """`index`'s integer step along `variable`, or None when it is not affine in it with a
    constant coefficient (a multiple of a dim, or under a division)."""
    coefficient = 0
    for mono, coef in index.terms:
        if variable not in Expr(((mono, 1),)).variables():
            continue
        if len(mono) != 1 or mono[0].op != "var" or not isinstance(coef, int):
            return None
        coefficient += coef
    return coefficient


def _loads(value: ir.Value) -> list[ir.Load]:
    """The loads under an IR value."""
    return [x for x in walk(value) if isinstance(x, ir.Load)]


def _multi_sum_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """A ContractSum without BLAS: sum(a * b) over several axes, one loop per axis."""
    w = _writer(graph, node, materialised)
    summed = node.op.summed
    shape = node.inputs[0].view.shape
    outer = w.loop_vars(node.shape)
    reduce_vars = {d: w.loop_var(f"r{j}_", shape[d]) for j, d in enumerate(summed)}
    inner, rest = [], iter(outer)
    for d in range(len(shape)):
        inner.append(reduce_vars[d] if d in reduce_vars else next(rest))
    value = w.reduced_value(node, inner)
    last = summed[-1]
    body: tuple[ir.Stmt, ...] = (
        _reduction_loop(node, value, reduce_vars[last], shape[last], "v1"),
        ir.Accumulate("acc", "add", ir.Var("v1", node.dtype)),
    )
    for d in reversed(summed[:-1]):
        body = (ir.Loop(index_loop_name(reduce_vars[d]), shape[d], "serial", body),)
    stages = [
        ir.Declare("acc", node.dtype, _zero(node.dtype)),
        *body,
        ir.Store(0, flat_index(outer, node.shape), ir.Var("acc", node.dtype), node.dtype),
    ]
    return _kernel(graph, node, w, dims, loop_nest(node.shape, outer, stages, product(shape)))


def _zero(dtype: DType) -> ir.Const:
    return ir.Const(0.0 if dtype.is_float else 0, dtype)


def _unrolled(node: Node, terms: list[ir.Value]) -> list[ir.Stmt]:
    """acc over a few values, with the same NaN rule as the loop form."""
    is_max = isinstance(node.op, ops.MaxReduce)
    if not terms:
        return [ir.Declare("acc", node.dtype, _identity("max" if is_max else "add", node.dtype))]
    stages: list[ir.Stmt] = [ir.Declare("acc", node.dtype, terms[0])]
    for k, term in enumerate(terms[1:], start=1):
        if not is_max:
            stages.append(ir.Accumulate("acc", "add", term))
            continue
        local = f"v{k}"
        stages.append(
            ir.Scope(
                (
                    ir.Declare(local, node.dtype, term, const=True),
                    ir.Accumulate("acc", "max", ir.Var(local, node.dtype)),
                )
            )
        )
    return stages


def _reduction_loop(
    node: Node,
    value: ir.Value,
    index: Expr,
    size: Expr,
    local: str,
    store: ir.Store | None = None,
) -> ir.Loop:
    """A reduce loop accumulating `value` into `local`; `store` runs per element with the
    value in the local `v` (int32 sums accumulate the value directly)."""
    op = "max" if isinstance(node.op, ops.MaxReduce) else "add"
    reduction = ir.Reduction(local, op, node.dtype)
    if op == "add" and not node.dtype.is_float:
        body: tuple[ir.Stmt, ...] = (ir.Accumulate(local, op, value),)
    else:
        v = ir.Var("v", node.dtype)
        body = (
            ir.Declare("v", node.dtype, value, const=True),
            *((store,) if store is not None else ()),
            ir.Accumulate(local, op, v),
        )
    return ir.Loop(index_loop_name(index), size, "reduce", body, reductions=(reduction,))


# ----------------------------------------------------------------------------- rows
def row_kernel(
    graph: Graph, head: Node, absorbed: list[int], materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """One loop nest over rows for a head and the row reductions it needs (softmax,
    layer norm): each absorbed reduction or per-row scalar becomes a local computed in
    a stage before the head's loop. Raises NotRowLocal when a value would be read at
    another row."""
    absorbed_set = set(absorbed)
    w = ValueLowering(graph, materialised - {head.id} - absorbed_set)
    w.param(head.id)
    is_reduce = hasattr(head.op, "axis")
    full = tuple(head.inputs[0].view.shape) if is_reduce else tuple(head.shape)
    outer, inner = full[:-1], full[-1]
    outer_idx = w.loop_vars(outer)
    j = w.loop_var("j0_", inner)
    row_flat = flat_index(outer_idx, outer)
    w.row_flat = row_flat
    stages: list[ir.Stmt] = []
    for node_id in absorbed:
        node = graph.nodes[node_id]
        local = f"s{node_id}"
        if hasattr(node.op, "axis"):  # SumReduce, MaxReduce or a loop Contract
            value = w.reduced_value(node, [*outer_idx, j])
            cached = _cacheable_row_value(graph, head, node, absorbed_set, is_reduce)
            store = None
            if cached is not None and cached not in w.row_cache:
                # softmax: exp(x - max) is summed here and stored in the output row,
                # so the head reads it back instead of computing it again
                store = ir.Store(0, row_flat * inner + j, ir.Var("v", node.dtype), DType.float32)
                w.row_cache[cached] = row_flat * inner + j
            stages.append(_reduction_loop(node, value, j, inner, local, store))
        elif tuple(node.shape) in (outer, (*outer, 1)):
            indices = list(outer_idx) + ([ZERO] if len(node.shape) > len(outer) else [])
            stages.append(ir.Declare(local, node.dtype, w.value(node, indices), const=True))
        else:
            continue  # a (rows, n) value: recomputed inline where read
        w.scalars[node_id] = ir.Var(local, node.dtype)
    if is_reduce:
        value = w.reduced_value(head, [*outer_idx, j])
        stages.append(_reduction_loop(head, value, j, inner, "acc"))
        stages.append(ir.Store(0, row_flat, ir.Var("acc", head.dtype), head.dtype))
    else:
        store = ir.Store(0, row_flat * inner + j, w.value(head, [*outer_idx, j]), head.dtype)
        stages.append(ir.Loop(index_loop_name(j), inner, "serial", (store,)))
    w.nodes.extend(absorbed)
    return _kernel(graph, head, w, dims, loop_nest(outer, outer_idx, stages, product(full)))


def _cacheable_row_value(
    graph: Graph, head: Node, reduction: Node, absorbed: set[int], head_is_reduce: bool
) -> int | None:
    """The recomputed row value a sum reduces, when it can be kept in the head's output
    row (same shape, float32, read through the identity view)."""
    if head_is_reduce or not isinstance(reduction.op, ops.SumReduce):
        return None
    (edge,) = reduction.inputs
    source = graph.nodes[edge.source]
    if (
        edge.source in absorbed
        and edge.view.is_identity()
        and tuple(source.shape) == tuple(head.shape)
        and source.dtype == head.dtype == DType.float32
    ):
        return edge.source
    return None


# --------------------------------------------------------------------- gather, scatter
def gather_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """Rows of a table at int32 indices; an index out of range reads row 0 and is recorded
    in the run's fault record, which the runtime turns into an ExecutionError. The index
    is read and checked once per row, outside the loops over the row's elements (a copy
    gcc vectorises): per element, MiniLM's NaN-row select (6 MB) took 1.9 ms, 5x a copy."""
    w = _writer(graph, node, materialised)
    table_edge, index_edge = node.inputs
    lead = len(index_edge.view.shape)
    indices = w.loop_vars(node.shape)
    rows = table_edge.view.shape[0]
    row = w.loop_var("g0_", rows)
    index_value = w.edge(index_edge, indices[:lead])
    value = w.edge(table_edge, [row, *indices[lead:]])
    index_dtype = graph.nodes[index_edge.source].dtype
    store = ir.Store(0, flat_index(indices, node.shape), value, node.dtype)
    body = [
        ir.Declare(index_loop_name(row), ir.INDEX, ir.Cast(index_value, index_dtype, ir.INDEX)),
        ir.CheckIndex(index_loop_name(row), rows, "clamp"),
        *loop_nest(node.shape[lead:], indices[lead:], [store], None),
    ]
    nest = loop_nest(node.shape[:lead], indices[:lead], body, product(node.shape))
    return _kernel(graph, node, w, dims, nest, faults=True)


def scatter_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel:
    """base.index_add(0, indices, updates): copy the base, then add each update row at its
    index. The adds run in one thread, in order (serial loops), so repeated indices
    accumulate exactly as in the reference runtime (the gradient of an embedding lookup)."""
    w = _writer(graph, node, materialised)
    base_edge, index_edge, update_edge = node.inputs
    copy_idx = w.loop_vars(node.shape)
    copy = ir.Store(0, flat_index(copy_idx, node.shape), w.edge(base_edge, copy_idx), node.dtype)
    lead = len(index_edge.view.shape)
    update_shape = tuple(update_edge.view.shape)
    update_idx = w.loop_vars(update_shape, prefix="r")
    row = w.loop_var("g0_", node.shape[0])
    index_value = w.edge(index_edge, update_idx[:lead])
    update_value = w.edge(update_edge, update_idx)
    row_shape = tuple(node.shape[1:])
    target = row * product(row_shape) + flat_index(update_idx[lead:], row_shape)
    index_dtype = graph.nodes[index_edge.source].dtype
    total = ir.Alu("add", (ir.Load(0, target, node.dtype), update_value), node.dtype)
    scatter = [
        ir.Declare(index_loop_name(row), ir.INDEX, ir.Cast(index_value, index_dtype, ir.INDEX)),
        ir.CheckIndex(index_loop_name(row), node.shape[0], "skip"),
        ir.Store(0, target, total, node.dtype),
    ]
    body = (
        *loop_nest(node.shape, copy_idx, [copy], product(node.shape)),
        *loop_nest(update_shape, update_idx, scatter, None),  # never parallel
    )
    return _kernel(graph, node, w, dims, body, faults=True)


# ---------------------------------------------------------------------------- custom
def custom_kernel(graph: Graph, node: Node, dims: Sequence[str]) -> ir.Kernel:
    """The user's C function called with the output, the inputs and their element counts
    (see luminal/custom.py for the ABI); its source is the kernel's prelude."""
    if node.op.backend != "c":  # OpenCL C: only its own backend runs it
        raise CompileError(
            f"custom kernel '{node.op.function}' (node {node.id}) is {node.op.backend} source; "
            f"compile the graph with that backend (lm.OpenCLCompiler())"
        )
    function = node.op.function
    buffers = [node.id] + [edge.source for edge in node.inputs]
    params = tuple(ir.Param(n, graph.nodes[n].dtype, output=i == 0) for i, n in enumerate(buffers))
    counts = (product(node.shape), *(product(e.view.shape) for e in node.inputs))
    call = ir.Call(function, tuple(range(len(buffers))), counts)
    return ir.Kernel(
        f"custom_{function}", params, tuple(dims), (call,), (node.id,), prelude=node.op.source
    )

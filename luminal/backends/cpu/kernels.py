"""Kernel builders: one function per kind of materialised node (elementwise chain,
reduction, row-fused group, gather, custom C), each returning a KernelSource built with
the KernelWriter of `codegen`."""

from __future__ import annotations

from collections.abc import Sequence

from luminal import ops
from luminal.backends.cpu.codegen import (
    C_COMPUTE,
    C_STORAGE,
    KernelSource,
    KernelWriter,
    _finish,
    _finish_source,
    _loops,
    _product,
    _store,
    c_expr,
)
from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.kernel.indexing import flat_index
from luminal.schedule.fusion import UNROLL_LIMIT
from luminal.shape.expr import ZERO, Expr, sym


def elementwise_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    indices = writer.loop_vars(node.shape)
    value = writer.value(node, indices)
    flat = flat_index(indices, node.shape)
    body = f"b0[{c_expr(flat)}] = {_store(node, value)};"
    total = _product(node.shape)
    return _finish(graph, node, writer, dims, _loops(node.shape, indices, body, total), [total])


def reduce_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    """SumReduce/MaxReduce, or a Contract (sum of a product) without BLAS: one output
    element per outer iteration, producers fused into the inner loop."""
    if len(getattr(node.op, "summed", ())) > 1:
        return _multi_sum_kernel(graph, node, materialised, dims)
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    axis = node.op.axis
    view = node.inputs[0].view
    size = view.shape[axis]
    outer = writer.loop_vars(node.shape)
    upper = size.as_int()
    reduce_index = writer.loop_var("r0_", size)
    compute = C_COMPUTE[node.dtype]
    flat = flat_index(outer, node.shape)
    if upper is not None and upper <= UNROLL_LIMIT:
        # a short reduction (relu is a max over the pair (x, 0)) unrolls into straight
        # code, so the surrounding loop vectorises and padding checks fold away
        terms = []
        for k in range(upper):
            indices = outer[:axis] + [sym(k)] + outer[axis:]
            terms.append(_reduced_value(writer, node, indices))
        body = _unrolled(node, compute, terms) + f"\nb0[{c_expr(flat)}] = {_store(node, 'acc')};"
    else:
        inner = outer[:axis] + [reduce_index] + outer[axis:]
        value = _reduced_value(writer, node, inner)
        body = (
            _reduction_loop(node, compute, value, reduce_index, size, "acc")
            + f"\nb0[{c_expr(flat)}] = {_store(node, 'acc')};"
        )
    total = _product(view.shape)
    return _finish(graph, node, writer, dims, _loops(node.shape, outer, body, total), [total])


def _multi_sum_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    """A ContractSum without BLAS: sum(a * b) over several axes, one loop per axis."""
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    summed = node.op.summed
    shape = node.inputs[0].view.shape
    outer = writer.loop_vars(node.shape)
    reduce_vars = {d: writer.loop_var(f"r{j}_", shape[d]) for j, d in enumerate(summed)}
    inner, rest = [], iter(outer)
    for d in range(len(shape)):
        inner.append(reduce_vars[d] if d in reduce_vars else next(rest))
    value = _reduced_value(writer, node, inner)
    innermost = reduce_vars[summed[-1]]
    loop = _reduction_loop(node, C_COMPUTE[node.dtype], value, innermost, shape[summed[-1]], "v1")
    body = loop + ("\nacc += v1;" if node.dtype.is_float else "\nacc = lm_iadd(acc, v1);")
    for d in reversed(summed[:-1]):
        name = c_expr(reduce_vars[d])
        body = f"for (long long {name} = 0; {name} < {c_expr(shape[d])}; {name}++) {{\n{body}\n}}"
    flat = flat_index(outer, node.shape)
    start = "float acc = 0.0f;" if node.dtype.is_float else "int acc = 0;"
    body = f"{start}\n{body}\nb0[{c_expr(flat)}] = {_store(node, 'acc')};"
    total = _product(shape)
    return _finish(graph, node, writer, dims, _loops(node.shape, outer, body, total), [total])


def _unrolled(node: Node, compute: str, terms: list[str]) -> str:
    """acc over a few values, with the same NaN rule as the loop form."""
    lines = [f"{compute} acc = {terms[0]};"] if terms else [f"{compute} acc = 0;"]
    is_max = isinstance(node.op, ops.MaxReduce)
    for k, term in enumerate(terms[1:], start=1):
        if not is_max:
            lines.append(
                f"acc += {term};" if node.dtype.is_float else f"acc = lm_iadd(acc, {term});"
            )
        elif node.dtype.is_float:
            lines.append(
                f"{{ const float v{k} = {term}; acc = (v{k} > acc || v{k} != v{k}) ? v{k} : acc; }}"
            )
        else:
            lines.append(f"{{ const int v{k} = {term}; acc = v{k} > acc ? v{k} : acc; }}")
    if is_max and not terms:
        lines[0] = (
            f"{compute} acc = {'(-INFINITY)' if node.dtype.is_float else '(-2147483647 - 1)'};"
        )
    return "\n".join(lines)


def row_kernel(
    graph: Graph, head: Node, absorbed: list[int], materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    """One loop nest over rows for a head and the row reductions it needs (softmax,
    layer norm): each absorbed reduction or per-row scalar becomes a C local computed in
    a stage before the head's loop. Raises NotRowLocal when a value would be read at
    another row."""
    absorbed_set = set(absorbed)
    writer = KernelWriter(graph, materialised - {head.id} - absorbed_set)
    writer.buffer(head.id)
    is_reduce = hasattr(head.op, "axis")
    full = tuple(head.inputs[0].view.shape) if is_reduce else tuple(head.shape)
    outer, inner = full[:-1], full[-1]
    outer_idx = writer.loop_vars(outer)
    j = writer.loop_var("j0_", inner)
    row_flat = flat_index(outer_idx, outer)
    writer.row_flat = row_flat
    stages: list[str] = []
    for node_id in absorbed:
        node = graph.nodes[node_id]
        compute = C_COMPUTE[node.dtype]
        local = f"s{node_id}"
        if hasattr(node.op, "axis"):  # SumReduce, MaxReduce or a loop Contract
            value = _reduced_value(writer, node, [*outer_idx, j])
            cached = _cacheable_row_value(graph, head, node, absorbed_set, is_reduce)
            store = ""
            if cached is not None and cached not in writer.row_cache:
                # softmax: exp(x - max) is summed here and stored in the output row,
                # so the head reads it back instead of computing it again
                store = f"b0[{c_expr(row_flat * inner + j)}] = v;"
                writer.row_cache[cached] = row_flat * inner + j
            stages.append(_reduction_loop(node, compute, value, j, inner, local, store))
        elif tuple(node.shape) in (outer, (*outer, 1)):
            indices = list(outer_idx) + ([ZERO] if len(node.shape) > len(outer) else [])
            value = writer.value(node, indices)
            stages.append(f"const {compute} {local} = {value};")
        else:
            continue  # a (rows, n) value: recomputed inline where read
        writer.scalars[node_id] = local
    compute = C_COMPUTE[head.dtype]
    if is_reduce:
        value = _reduced_value(writer, head, [*outer_idx, j])
        stages.append(_reduction_loop(head, compute, value, j, inner, "acc"))
        stages.append(f"b0[{c_expr(row_flat)}] = {_store(head, 'acc')};")
    else:
        value = writer.value(head, [*outer_idx, j])
        target = c_expr(row_flat * inner + j)
        name = c_expr(j)
        stages.append(
            f"for (long long {name} = 0; {name} < {c_expr(inner)}; {name}++) {{\n"
            f"    b0[{target}] = {_store(head, value)};\n}}"
        )
    writer.nodes.extend(absorbed)
    body = "\n".join(stages)
    loops = _loops(outer, outer_idx, body, _product(full))
    return _finish(graph, head, writer, dims, loops, [])


def _reduced_value(writer: KernelWriter, node: Node, indices: list[Expr]) -> str:
    """What a reduction sums or maxes at `indices`: its input, or a Contract's product
    (int32 products wrap, as numpy's do: signed overflow is undefined in C)."""
    values = [writer.edge(edge, indices) for edge in node.inputs]
    if len(values) == 1:
        return values[0]
    if node.dtype.is_float:
        return f"({values[0]} * {values[1]})"
    return f"lm_imul({values[0]}, {values[1]})"


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


def _reduction_loop(
    node: Node, compute: str, value: str, index: Expr, size: Expr, local: str, store: str = ""
) -> str:
    """A reduction loop gcc vectorises: `omp simd reduction` for sums; for floating max,
    a max reduction plus a NaN flag, so a NaN anywhere gives NaN (as numpy does).
    `store` is a statement run per element with the value in `v`."""
    name = c_expr(index)
    loop = f"for (long long {name} = 0; {name} < {c_expr(size)}; {name}++) {{\n"
    if not isinstance(node.op, ops.MaxReduce) and not node.dtype.is_float:
        # int32 sums wrap modulo 2**32 as numpy's do: accumulate unsigned (signed
        # overflow is undefined in C), then read the bits back as int
        return (
            f"unsigned {local}_bits = 0u;\n"
            f"#pragma omp simd reduction(+:{local}_bits)\n{loop}"
            f"    {local}_bits += (unsigned)({value});\n}}\n"
            f"int {local} = (int){local}_bits;"
        )
    if not isinstance(node.op, ops.MaxReduce):
        return (
            f"{compute} {local} = 0.0f;\n"
            f"#pragma omp simd reduction(+:{local})\n{loop}"
            f"    const {compute} v = {value};\n"
            + (f"    {store}\n" if store else "")
            + f"    {local} += v;\n}}"
        )
    if not node.dtype.is_float:
        return (
            f"int {local} = (-2147483647 - 1);\n"
            f"#pragma omp simd reduction(max:{local})\n{loop}"
            f"    const int v = {value};\n    {local} = v > {local} ? v : {local};\n}}"
        )
    return (
        f"float {local} = (-INFINITY);\nint {local}_nan = 0;\n"
        f"#pragma omp simd reduction(max:{local}) reduction(|:{local}_nan)\n{loop}"
        f"    const float v = {value};\n"
        f"    {local} = v > {local} ? v : {local};\n"
        f"    {local}_nan |= (v != v);\n}}\n"
        f"if ({local}_nan) {local} = NAN;"
    )


def gather_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    """Rows of a table at int32 indices; an index out of range reads row 0 and is recorded
    in the run's fault record, which the runtime turns into an ExecutionError."""
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    table_edge, index_edge = node.inputs
    lead = len(index_edge.view.shape)
    indices = writer.loop_vars(node.shape)
    row = writer.loop_var("g0_", table_edge.view.shape[0])
    index_value = writer.edge(index_edge, indices[:lead])
    value = writer.edge(table_edge, [row, *indices[lead:]])
    rows = c_expr(table_edge.view.shape[0])
    flat = flat_index(indices, node.shape)
    body = (
        f"long long g0_ = (long long)({index_value});\n"
        f"if (g0_ < 0 || g0_ >= {rows}) {{ lm_fault_index(lm_fault, g0_, {rows}); g0_ = 0; }}\n"
        f"b0[{c_expr(flat)}] = {_store(node, value)};"
    )
    total = _product(node.shape)
    loops = _loops(node.shape, indices, body, total)
    source = _finish(graph, node, writer, dims, loops, [total], faults=True)
    source.source = FAULT_INDEX + source.source
    return source


# C: record an index out of range in the run's fault record {code, value, bound}; threads
# racing here store whole values, and any offending index is a true report
FAULT_INDEX = """static inline void lm_fault_index(long long* f, long long index, long long rows) {
    __atomic_store_n(&f[1], index, __ATOMIC_RELAXED);
    __atomic_store_n(&f[2], rows, __ATOMIC_RELAXED);
    __atomic_store_n(&f[0], 1, __ATOMIC_RELAXED);
}
"""


def scatter_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> KernelSource:
    """base.index_add(0, indices, updates): copy the base, then add each update row at its
    index. The adds run in one thread, in order, so repeated indices accumulate exactly
    as in the reference runtime (the gradient of an embedding lookup)."""
    writer = KernelWriter(graph, materialised - {node.id})
    writer.buffer(node.id)
    base_edge, index_edge, update_edge = node.inputs
    copy_idx = writer.loop_vars(node.shape)
    base_value = _store(node, writer.edge(base_edge, copy_idx))
    copy = f"b0[{c_expr(flat_index(copy_idx, node.shape))}] = {base_value};"
    lead = len(index_edge.view.shape)
    update_shape = tuple(update_edge.view.shape)
    update_idx = writer.loop_vars(update_shape, prefix="r")
    row_shape = tuple(node.shape[1:])
    index_value = writer.edge(index_edge, update_idx[:lead])
    update_value = writer.edge(update_edge, update_idx)
    rows = c_expr(node.shape[0])
    target = (
        f"g0_ * {c_expr(_product(row_shape))} + {c_expr(flat_index(update_idx[lead:], row_shape))}"
    )
    load = f"b0[{target}]"
    if node.dtype == DType.bfloat16:
        load = f"lm_bf16_load({load})"
    elif node.dtype == DType.float16:
        load = f"((float){load})"
    scatter = (
        f"long long g0_ = (long long)({index_value});\n"
        f"if (g0_ < 0 || g0_ >= {rows}) {{ lm_fault_index(lm_fault, g0_, {rows}); continue; }}\n"
        f"b0[{target}] = {_store(node, f'({load} + {update_value})')};"
    )
    copy_loops = _loops(node.shape, copy_idx, copy, _product(node.shape))
    sequential = _loops(update_shape, update_idx, scatter, ZERO)  # never parallel
    source = _finish(graph, node, writer, dims, copy_loops + "\n" + sequential, [], faults=True)
    source.source = FAULT_INDEX + source.source
    return source


def custom_kernel_source(graph: Graph, node: Node, dims: Sequence[str]) -> KernelSource:
    """The user's C function plus a wrapper with the generated-kernel signature that
    passes element counts (see luminal/custom.py for the ABI)."""
    function = node.op.function
    buffers = [node.id] + [edge.source for edge in node.inputs]
    types = [f"{C_STORAGE[node.dtype]}* restrict b0"] + [
        f"const {C_STORAGE[graph.nodes[n].dtype]}* restrict b{i + 1}"
        for i, n in enumerate(buffers[1:])
    ]
    counts = [_product(node.shape)] + [_product(e.view.shape) for e in node.inputs]
    numel = ", ".join(f"(long long)({c_expr(c)})" for c in counts)
    args = ", ".join(f"b{i}" for i in range(len(buffers)))
    body = f"    const long long numel[] = {{{numel}}};\n    {function}({args}, numel);"
    return _finish_source(
        f"custom_{function}", buffers, types, dims, body, [node.id], prelude=node.op.source
    )

"""Search options for matrix products: generated, register-blocked C (`matmul_codegen`)
in place of the BLAS call, with the consumer's bias / residual / ReLU fused into the
kernel when the product has exactly one reader that is such an epilogue.

Only plain two-operand products qualify: concrete sizes, float32, no batch axis, no
padding, operands BLAS could read in place (row axes may merge, as for BLAS).
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import ops
from luminal.backends.cpu.codegen import KernelSource, _finish_source
from luminal.backends.cpu.lowering import Lowering
from luminal.backends.cpu.matmul_codegen import render_matmul
from luminal.backends.cpu.matmul_schedule import Epilogue, MatmulSchedule
from luminal.backends.cpu.ops import Contract
from luminal.backends.cpu.tuning import KernelOption
from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.graph import Edge, Graph, Node
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


def _merge_axes(axes: list[int], shape, tables) -> tuple | None:  # noqa: ANN001
    """(merged size, innermost axis) of adjacent axes that are row-major in every stride
    table; (None, None) for no axes; None when they cannot merge."""
    if not axes:
        return None, None
    if axes != list(range(axes[0], axes[-1] + 1)):
        return None
    size = shape[axes[0]]
    for outer, inner in zip(axes, axes[1:], strict=False):
        size = size * shape[inner]
        if any(table[outer] != table[inner] * shape[inner] for table in tables):
            return None
    return size, axes[-1]


def _int(expr) -> int | None:  # noqa: ANN001 - an Expr
    return expr.as_int()


def matmul_problem(node: Node) -> MatmulProblem | None:
    """The product's sizes and layouts, or None when it is not a plain matrix product."""
    if not isinstance(node.op, Contract) or node.dtype != DType.float32:
        return None
    a_edge, b_edge = node.inputs
    if a_edge.view.mask is not None or b_edge.view.mask is not None:
        return None
    shape, axis = a_edge.view.shape, node.op.axis
    if any(_int(d) is None for d in shape):
        return None
    sa, sb = a_edge.view.strides, b_edge.view.strides
    m_axes, n_axes = [], []
    for d in range(len(shape)):
        if d == axis or shape[d] == 1:
            continue
        a_var, b_var = sa[d] != 0, sb[d] != 0
        if a_var == b_var:
            return None  # a batch axis (or a broadcast of both)
        (m_axes if a_var else n_axes).append(d)
    out_axes = [d for d in range(len(shape)) if d != axis]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    m_group = _merge_axes(m_axes, shape, (sa, out_strides))
    n_group = _merge_axes(n_axes, shape, (sb, out_strides))
    if m_group is None or n_group is None or (m_axes and n_axes and m_axes[0] > n_axes[0]):
        return None  # the output is not (M rows, N columns) row-major
    m = _int(m_group[0]) if m_group[0] is not None else 1
    n = _int(n_group[0]) if n_group[0] is not None else 1
    k = _int(shape[axis])
    strides = [_int(s) for s in (sa[axis], sb[axis])]
    sa_m = _int(sa[m_group[1]]) if m_group[1] is not None else None
    sb_n = _int(sb[n_group[1]]) if n_group[1] is not None else None
    offsets = _int(a_edge.view.offset), _int(b_edge.view.offset)
    if None in (m, n, k, *strides, *offsets) or k < 1:
        return None
    if strides[0] == 1:
        a_trans, lda = False, sa_m if sa_m is not None else k
    elif sa_m == 1:
        a_trans, lda = True, strides[0]
    else:
        return None
    if sb_n == 1 or sb_n is None:
        b_trans, ldb = False, strides[1]
        if sb_n is None:
            ldb = 1
    elif strides[1] == 1:
        b_trans, ldb = True, sb_n
    else:
        return None
    if lda < (m if a_trans else k) or ldb < (k if b_trans else n):
        return None
    return MatmulProblem(m, n, k, a_trans, b_trans, lda, ldb, offsets[0], offsets[1])


@dataclass(frozen=True)
class FusedEpilogue:
    """A consumer kernel the product can absorb: c = relu?(a @ b + bias + residual)."""

    consumer: int
    epilogue: Epilogue
    bias: tuple[int, int] | None  # (source node, element offset)
    residual: tuple[int, int, int] | None  # (source node, element offset, row stride)


def _is_buffer(graph: Graph, lowering: Lowering, node_id: int) -> bool:
    return node_id in lowering.materialised or isinstance(graph.nodes[node_id].op, ops.Input)


def match_epilogue(lowering: Lowering, product: int, m: int, n: int) -> FusedEpilogue | None:
    """The single reader of `product` when it computes relu?(product + bias + residual)
    with a row (length-N) bias and/or an M x N residual, all float32 buffers."""
    graph = lowering.graph
    readers = [
        node_id
        for node_id, node in graph.nodes.items()
        if any(e.source == product for e in node.inputs)
    ]
    consumer_kernel = None
    for head, kernel in lowering.kernels.items():
        if readers and set(readers) <= set(kernel.nodes) and head in lowering.materialised:
            consumer_kernel = (head, kernel)
    if consumer_kernel is None or product in graph.output_roots():
        return None
    head, kernel = consumer_kernel
    node = graph.nodes[head]
    shape = tuple(_int(d) for d in node.shape)
    if node.dtype != DType.float32 or shape != tuple(_int(d) for d in graph.nodes[product].shape):
        return None
    activation = "none"
    if isinstance(node.op, ops.MaxReduce):  # relu: max over the pair (x, padding 0)
        (edge,) = node.inputs
        view = edge.view
        if not (
            node.op.axis == len(view.shape) - 1
            and view.shape[-1] == 2
            and view.strides[-1] == 0
            and view.mask is not None
            and tuple(_int(x) for x in view.mask[-1]) == (0, 1)
            and all(_int(lo) == 0 for lo, _ in view.mask[:-1])
        ):
            return None
        activation, top = "relu", edge.source
        if view.offset != 0 or tuple(view.strides[:-1]) != tuple(contiguous_strides(node.shape)):
            return None
    else:
        top = head
    others: list[Edge] = []
    if top != product:  # relu(product) alone has no sum to take apart
        terms: list[Edge] = []
        if not _flatten_adds(graph, top, set(kernel.nodes), terms, shape):
            return None
        product_terms = [e for e in terms if e.source == product]
        others = [e for e in terms if e.source != product]
        if len(product_terms) != 1 or not _identity(product_terms[0], shape):
            return None
    bias = residual = None
    for edge in others:
        source = graph.nodes[edge.source]
        if source.dtype != DType.float32 or not _is_buffer(graph, lowering, edge.source):
            return None
        strides = [_int(s) for s in edge.view.strides]
        offset = _int(edge.view.offset)
        if edge.view.mask is not None or offset is None or None in strides or strides[-1] != 1:
            return None
        if all(s == 0 for s in strides[:-1]) and bias is None:
            bias = (edge.source, offset)
        elif len(shape) >= 2 and _rows_merge(strides, shape) and residual is None:
            residual = (edge.source, offset, strides[-2])
        else:
            return None
    if bias is None and residual is None and activation == "none":
        return None
    epilogue = Epilogue("row" if bias else "none", activation, residual is not None)
    return FusedEpilogue(head, epilogue, bias, residual)


def _rows_merge(strides: list[int], shape: tuple) -> bool:
    """Leading axes that step as one row index (row stride at least the row length)."""
    if strides[-2] < shape[-1]:
        return False
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))


def _identity(edge: Edge, shape: tuple) -> bool:
    view = edge.view
    return (
        view.mask is None
        and _int(view.offset) == 0
        and tuple(_int(d) for d in view.shape) == shape
        and tuple(_int(s) for s in view.strides) == tuple(contiguous_strides(shape))
    )


def _flatten_adds(
    graph: Graph, node_id: int, inside: set[int], terms: list[Edge], shape: tuple
) -> bool:
    """The terms of a tree of Adds computed inside the consumer kernel."""
    node = graph.nodes[node_id]
    if not isinstance(node.op, ops.Add):
        return False
    for edge in node.inputs:
        if edge.source in inside and isinstance(graph.nodes[edge.source].op, ops.Add):
            if not _identity(edge, shape):
                return False
            if not _flatten_adds(graph, edge.source, inside, terms, shape):
                return False
        else:
            terms.append(edge)
    return True


def generated_kernel(
    lowering: Lowering,
    product: int,
    problem: MatmulProblem,
    schedule: MatmulSchedule,
    fused: FusedEpilogue | None,
) -> KernelSource:
    graph = lowering.graph
    node = graph.nodes[product]
    a_edge, b_edge = node.inputs
    output = fused.consumer if fused else product
    buffers = [output, a_edge.source, b_edge.source]
    types = ["float* restrict b0", "const float* restrict b1", "const float* restrict b2"]
    bias_arg = residual_arg = "0"
    ldr = None
    if fused and fused.bias:
        buffers.append(fused.bias[0])
        types.append(f"const float* restrict b{len(types)}")
        bias_arg = f"b{len(types) - 1} + {fused.bias[1]}"
    if fused and fused.residual:
        buffers.append(fused.residual[0])
        types.append(f"const float* restrict b{len(types)}")
        residual_arg = f"b{len(types) - 1} + {fused.residual[1]}"
        ldr = fused.residual[2]
    epilogue = fused.epilogue if fused else Epilogue()
    p = problem
    prelude = render_matmul(
        "KERNEL_NAME_mm",
        p.m,
        p.n,
        p.k,
        p.a_trans,
        p.b_trans,
        p.lda,
        p.ldb,
        p.n,
        schedule,
        epilogue,
        ldr,
    )
    body = (
        f"    KERNEL_NAME_mm(b0, b1 + {p.a_offset}, b2 + {p.b_offset}, {bias_arg}, {residual_arg});"
    )
    computed = [product] + (list(lowering.kernels[fused.consumer].nodes) if fused else [])
    label = "matmul_epilogue" if fused else "matmul"
    return _finish_source(
        label, buffers, types, lowering.dims, body, sorted(set(computed)), prelude
    )


def matmul_options(lowering: Lowering, node_id: int, dims: dict[str, int]) -> list[KernelOption]:
    """`gen:<schedule>` (generated product) and, when the product's reader is a bias /
    residual / ReLU epilogue, `gen+epilogue:<schedule>` (that reader fused in)."""
    problem = matmul_problem(lowering.graph.nodes[node_id])
    if problem is None or node_id not in lowering.kernels:
        return []
    fusable = match_epilogue(lowering, node_id, problem.m, problem.n) is not None
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
        fused = match_epilogue(lowering, node_id, problem.m, problem.n) if fuse else None
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

"""BLAS products that compute their consumer as they store: the bias, residual and ReLU
or GELU of a linear layer or a convolution, fused into the product's `lm_sgemm` call
(and a fused Winograd convolution's bias, residual and ReLU into its `lm_winograd` call,
`backends/cpu/winograd.py`).

A product whose single reader kernel computes act(product + terms) (`match_consumer`)
gets the `_ep` variant of its call (`gemm.c`: applied while each C tile is still in
registers), writing the consumer's buffer; the consumer's kernel and the product's buffer
go. Each term must be, in C's terms (the call's rows, columns, leading dimension and
column blocks), a vector along C's rows (a convolution's bias per output channel, or a
linear layer's when C is its transpose), a vector along C's columns (a linear layer's
bias), or a matrix laid out as C (a residual). Anything else keeps its own kernel.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

from luminal import ops
from luminal.backends.cpu import gemv, winograd
from luminal.backends.cpu.codegen import KernelSource, kernel_source
from luminal.backends.cpu.gemm import EPILOGUE_PROTOTYPE
from luminal.dtype import DType
from luminal.graph import Edge, Graph
from luminal.kernel import ir
from luminal.schedule.epilogue import ConsumerSum, match_consumer
from luminal.shape.expr import ONE, Expr, sym
from luminal.shape.tracker import contiguous_strides

ENTRIES = {
    "lm_sgemm": "lm_sgemm_ep",
    "lm_sgemm_gather": "lm_sgemm_gather_ep",
    gemv.NAME: "lm_sgemm_rows_ep",
}
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2}  # LM_ACT_* of gemm.c
NULL = sym(0)


def fuse_epilogues(
    graph: Graph,
    order: Sequence[int],
    kernels: dict[int, KernelSource],
    materialised: set[int],
    keep: Collection[int] = (),
) -> None:
    """Fuse, in place, each sgemm kernel's consumer into it (see the module docstring):
    `kernels[consumer]` becomes the fused kernel, the product leaves `kernels` and
    `materialised`. Kernels whose head is in `keep` (a search option's) are left as
    they are."""
    keep = set(keep)
    readers, outputs = graph.readers(), set(graph.output_roots())  # the graph stays as it is
    for product in order:
        kernel = kernels.get(product)
        if kernel is None or kernel.kernel is None:
            continue
        op = graph.nodes[product].op
        if kernel.kernel.label == "sgemm" and isinstance(op, ops.Contract):
            fuse = _fused
        elif kernel.kernel.label == "winograd" and isinstance(op, ops.WinogradConv):
            fuse = _winograd_fused
        else:
            continue
        heads = {head: source.nodes for head, source in kernels.items()}
        found = match_consumer(graph, heads, materialised, product, readers, outputs)
        if found is None or found.consumer not in kernels or {product, found.consumer} & keep:
            continue
        fused = fuse(graph, kernel.kernel, found, kernels[found.consumer].nodes)
        if fused is None:
            continue
        kernels[found.consumer] = kernel_source(fused)
        del kernels[product]
        materialised.discard(product)


def _fused(
    graph: Graph, kernel: ir.Kernel, found: ConsumerSum, consumer_nodes: Sequence[int]
) -> ir.Kernel | None:
    """The sgemm kernel writing `found.consumer` with its terms and activation fused into
    the call, or None when a term is not a vector along C's rows or columns or a matrix
    laid out as C."""
    calls = list(_calls(kernel.body))
    if len(calls) != 1 or calls[0].function not in ENTRIES:
        return None
    call = calls[0]
    first = 1 if call.function == "lm_sgemm_gather" else 2
    sizes = (call.args[first], call.args[first + 1], *call.args[-3:])
    pointer = call.args[-4]
    if not isinstance(pointer, ir.Pointer) or pointer.param != 0:
        return None
    if not all(isinstance(x, Expr) for x in sizes):
        return None
    geometry = _Geometry(*sizes, found.shape)
    params = [ir.Param(found.consumer, DType.float32, output=True), *kernel.params[1:]]
    fused: dict[str, ir.Pointer] = {}
    for edge in found.terms:
        kind = geometry.kind(edge)
        if kind is None or kind in fused:
            return None
        offset = edge.view.offset
        if kind == "residual":
            offset = offset + pointer.offset  # C's offset: the batch index's matrix
        fused[kind] = ir.Pointer(_param(params, edge.source), offset)
    epilogue = tuple(fused.get(kind, NULL) for kind in ("row", "col", "residual"))
    fused_call = replace(
        call,
        function=ENTRIES[call.function],
        args=(
            *call.args,
            *epilogue,
            sym(ACTIVATIONS[found.activation]),
            ir.Const(found.scale, DType.float32),
        ),
    )
    label = "sgemm" + "".join(f"_{kind}" for kind in ("row", "col", "residual") if kind in fused)
    return replace(
        kernel,
        label=label + ("" if found.activation == "none" else f"_{found.activation}"),
        params=tuple(params),
        body=_replaced(kernel.body, call, fused_call),
        nodes=tuple(sorted({*kernel.nodes, *consumer_nodes})),
        prelude=f"{kernel.prelude}\n{EPILOGUE_PROTOTYPE}"
        + (f"\n{gemv.EPILOGUE_PROTOTYPE}" if call.function == gemv.NAME else ""),
    )


def _winograd_fused(
    graph: Graph, kernel: ir.Kernel, found: ConsumerSum, consumer_nodes: Sequence[int]
) -> ir.Kernel | None:
    """The Winograd kernel writing `found.consumer`, relu?(Y + bias + residual) applied
    as each tile row is stored (`lm_winograd_ep`), or None when the activation is not
    ReLU, or a term is neither a vector along the output channels nor laid out as Y."""
    (call,) = kernel.body
    if not isinstance(call, ir.LibraryCall) or found.activation not in ("none", "relu"):
        return None
    if found.scale != 1.0:
        return None
    product = graph.nodes[kernel.nodes[-1]]
    outs = product.shape[1]
    channel_stride = contiguous_strides(product.shape)[1]
    layout = contiguous_strides(found.shape)
    params = [ir.Param(found.consumer, DType.float32, output=True), *kernel.params[1:]]
    fused: dict[str, ir.Pointer] = {}
    for edge in found.terms:
        view = edge.view
        pairs = list(zip(found.shape, view.strides, layout, strict=True))
        if view.mask is not None:
            return None
        if all(n == 1 or s == c for n, s, c in pairs) and "residual" not in fused:
            kind = "residual"
        elif "bias" not in fused and _channel_vector(pairs, outs, channel_stride):
            kind = "bias"
        else:
            return None
        fused[kind] = ir.Pointer(_param(params, edge.source), view.offset)
    args = (
        *call.args,
        fused.get("bias", NULL),
        fused.get("residual", NULL),
        sym(1 if found.activation == "relu" else 0),
    )
    label = "winograd" + "".join(f"_{kind}" for kind in ("bias", "residual") if kind in fused)
    return replace(
        kernel,
        label=label + ("_relu" if found.activation == "relu" else ""),
        params=tuple(params),
        body=(replace(call, function="lm_winograd_ep", args=args),),
        nodes=tuple(sorted({*kernel.nodes, *consumer_nodes})),
        prelude=f"{kernel.prelude}\n{winograd.EPILOGUE_PROTOTYPE}",
    )


def _channel_vector(pairs: Sequence[tuple], outs: object, channel_stride: object) -> bool:
    """A term (its (size, stride, consumer stride) per axis) that reads element k at
    output channel k: stride 1 on the consumer's axis that steps the channels (its
    stride the product's channel stride, its size the channel count), 0 on every other
    axis. A consumer shape with no such axis (channels merged with images or split) has
    no channel index to read a vector by: only a single channel's scalar is one."""
    on_channels = [s for n, s, c in pairs if n == outs and c == channel_stride]
    others = [s for n, s, c in pairs if n != 1 and not (n == outs and c == channel_stride)]
    if any(s != 0 for s in others):
        return False
    return outs == 1 or on_channels == [1]


class _Geometry:
    """Where C's element (i, j) of a call lies in the consumer's flat index: i * ldc plus
    column j in blocks of `width` at `stride` (plus the batch index's offset), the
    consumer reading the product's buffer in its own memory order. Sizes may be
    symbolic: equalities are exact (`Expr`'s normal form), and only the order of the
    consumer's axes by stride is read at a sample of the dims (`_SAMPLE`)."""

    def __init__(self, rows: Expr, cols: Expr, ldc: Expr, width: Expr, stride: Expr,
                 shape: tuple[Expr, ...]) -> None:  # fmt: skip
        self.rows, self.cols, self.ldc = rows, cols, ldc
        self.one_block = width == cols
        # C's row i at i * ldc alone: one block, or blocks of whole planes (ldc == width)
        self.rows_whole = self.one_block or (ldc == width and stride == rows * ldc)
        self.shape = shape
        self.strides = tuple(contiguous_strides(shape))

    def kind(self, edge: Edge) -> str | None:
        """ "residual", "row", "col" or None: how the term `edge` maps onto C."""
        strides = tuple(edge.view.strides)
        if all(
            _one(n) or s == c for n, s, c in zip(self.shape, strides, self.strides, strict=True)
        ):
            return "residual"
        if self.rows_whole and self._vector(strides, self.ldc, self.rows * self.ldc):
            return "row"
        if self.one_block and self.cols == self.ldc and self._vector(strides, ONE, self.cols):
            return "col"
        return None

    def _vector(self, strides: tuple[Expr, ...], low: Expr, high: Expr) -> bool:
        """Whether the term varies only along the axes that make up C's index stepping
        `low` in the flat index up to `high` (C's row index i: low = ldc, high = rows *
        ldc; the column index j: 1 to cols), as a unit-stride vector indexed by it: those
        axes chain from `low` to `high`, every other axis is broadcast."""
        span = low
        axes = zip(self.shape, strides, self.strides, strict=True)
        for n, s, c in sorted(axes, key=lambda axis: _sample(axis[2])):
            if _one(n):
                continue
            if _sample(low) <= _sample(c) < _sample(high):
                if c != span or s * low != c:
                    return False
                span = span * n
            elif s != 0:
                return False
        return span == high


# dims for ordering strides: distinct primes, so distinct monomials (products of sizes)
# differ
_PRIMES = (101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157)


def _sample(expr: Expr) -> int:
    names = sorted(expr.variables())
    return expr.evaluate({n: _PRIMES[i % len(_PRIMES)] for i, n in enumerate(names)})


def _one(size: Expr) -> bool:
    return size.as_int() == 1


def _param(params: list[ir.Param], node: int) -> int:
    """The index of `node`'s input parameter, appended when the kernel has none."""
    for index, param in enumerate(params):
        if index and param.node == node:
            return index
    params.append(ir.Param(node, DType.float32))
    return len(params) - 1


def _calls(body: Sequence[ir.Stmt]) -> Iterator[ir.LibraryCall]:
    for stmt in body:
        if isinstance(stmt, ir.LibraryCall):
            yield stmt
        elif isinstance(stmt, ir.Loop):
            yield from _calls(stmt.body)


def _replaced(body: tuple[ir.Stmt, ...], old: ir.Stmt, new: ir.Stmt) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for stmt in body:
        if stmt is old:
            out.append(new)
        elif isinstance(stmt, ir.Loop):
            out.append(replace(stmt, body=_replaced(stmt.body, old, new)))
        else:
            out.append(stmt)
    return tuple(out)

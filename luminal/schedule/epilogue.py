"""Matrix-product epilogues: the consumer a product may absorb into its own kernel.

A product (`ops.Contract`) whose only reader computes relu?(product + bias + residual)
(a linear layer, a residual add, a ReLU) can write that result directly, instead of
writing the product for another kernel to read back. `match_consumer` recognises such a
reader in the fusion plan (the BLAS path maps its terms onto C: `backends/cpu/
sgemm_epilogue.py`); `match_epilogue` narrows it to the `Epilogue` a backend's generated
matmul renders.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from luminal import ops
from luminal.compiler.pattern import relu_edge
from luminal.dtype import DType
from luminal.errors import LuminalError
from luminal.graph import Edge, Graph
from luminal.schedule.activation_probe import probe_activation
from luminal.shape.expr import Expr
from luminal.shape.expr import product as shape_product
from luminal.shape.tracker import contiguous_strides


def _int(expr) -> int | None:  # noqa: ANN001 - an Expr
    return expr.as_int()


@dataclass(frozen=True)
class Epilogue:
    """What is fused after the product: `bias` "row" adds a length-N vector to every row,
    "col" a length-M vector to every column; `residual` adds an M x N matrix (leading
    dimension `ldr`, default N; it must not alias c); `activation` "relu" keeps NaN."""

    bias: str = "none"
    activation: str = "none"
    residual: bool = False

    def __post_init__(self) -> None:
        if self.bias not in ("none", "row", "col"):
            raise LuminalError(f"Epilogue.bias must be 'none', 'row' or 'col', got {self.bias!r}")
        if self.activation not in ("none", "relu"):
            raise LuminalError(f"Epilogue.activation must be 'none' or 'relu': {self.activation!r}")

    def describe(self, product: str = "a @ b") -> str:
        value = product
        if self.bias != "none":
            value += f" + bias[{'N' if self.bias == 'row' else 'M'}]"
        if self.residual:
            value += " + residual"
        return f"relu({value})" if self.activation == "relu" else value


@dataclass(frozen=True)
class FusedEpilogue:
    """A consumer kernel the product can absorb: c = relu?(a @ b + bias + residual)."""

    consumer: int
    epilogue: Epilogue
    bias: tuple[int, int] | None  # (source node, element offset)
    residual: tuple[int, int, int] | None  # (source node, element offset, row stride)


def _is_buffer(graph: Graph, materialised: Collection[int], node_id: int) -> bool:
    return node_id in materialised or isinstance(graph.nodes[node_id].op, ops.Input)


@dataclass(frozen=True)
class ConsumerSum:
    """The kernel reading a product when it computes act(product + terms): `consumer` its
    head, `activation` "none", "relu" or "gelu" (GELU-erf, recognised by evaluating the
    kernel: `activation_probe.py`), `terms` the other addends (float32 buffers read
    without a mask), all in the consumer's `shape`, through which the product is read
    whole in its own memory order (the same element count: a reshape at most, as a
    convolution's (image, channel, position) product read as (image, channel, y, x))."""

    consumer: int
    activation: str
    terms: tuple[Edge, ...]
    shape: tuple[Expr, ...]
    scale: float = 1.0  # the activation's value times this


def match_consumer(
    graph: Graph,
    kernels: Mapping[int, Collection[int]],
    materialised: Collection[int],
    product: int,
    readers: Mapping[int, set[int]] | None = None,
    outputs: Collection[int] | None = None,
) -> ConsumerSum | None:
    """The single reader kernel of `product` as a `ConsumerSum`, or None: several reader
    kernels, an output product, a consumer computing anything else. `kernels` maps each
    kernel's head (the node it writes) to the nodes it computes; `readers` and `outputs`
    are `graph.readers()` and `graph.output_roots()`, passed by a caller matching many
    products (each is a walk over the whole graph)."""
    product_readers = (graph.readers() if readers is None else readers)[product]
    consumer_kernel = None
    for head, computed in kernels.items():
        if product_readers and product_readers <= set(computed) and head in materialised:
            consumer_kernel = (head, computed)
    if consumer_kernel is None:
        return None
    if product in (graph.output_roots() if outputs is None else outputs):
        return None
    head, computed = consumer_kernel
    node = graph.nodes[head]
    shape = tuple(node.shape)
    if node.dtype != DType.float32:
        return None
    if shape_product(shape) != shape_product(graph.nodes[product].shape):
        return None
    activation, scale = "none", 1.0
    if isinstance(node.op, ops.MaxReduce):  # relu: max over the pair (x, padding 0)
        edge = relu_edge(node)
        if edge is None:
            return None
        activation, top = "relu", edge.source
    elif not isinstance(node.op, ops.Add):  # an activation of the sum (product + terms)?
        (top,) = product_readers if len(product_readers) == 1 else (None,)
        if top is None or not isinstance(graph.nodes[top].op, ops.Add):
            return None
        if tuple(graph.nodes[top].shape) != shape:
            return None
        probed = probe_activation(graph, head, computed, top)
        if probed is None:
            return None
        activation, scale = probed
    else:
        top = head
    others: list[Edge] = []
    if top != product:  # relu(product) alone has no sum to take apart
        terms: list[Edge] = []
        if not _flatten_adds(graph, top, set(computed), terms, shape):
            return None
        product_terms = [e for e in terms if e.source == product]
        others = [e for e in terms if e.source != product]
        if len(product_terms) != 1 or not _identity(product_terms[0], shape):
            return None
    for edge in others:
        if graph.nodes[edge.source].dtype != DType.float32 or edge.view.mask is not None:
            return None
        if not _is_buffer(graph, materialised, edge.source):
            return None
    if not others and activation == "none":
        return None
    return ConsumerSum(head, activation, tuple(others), shape, scale)


def match_epilogue(
    graph: Graph,
    kernels: Mapping[int, Collection[int]],
    materialised: Collection[int],
    product: int,
) -> FusedEpilogue | None:
    """The single reader of `product` when it computes relu?(product + bias + residual)
    in the product's own shape, with a row (length-N) bias and/or an M x N residual
    (`match_consumer`, narrowed to what the generated matmul renders)."""
    found = match_consumer(graph, kernels, materialised, product)
    if found is None or found.shape != tuple(graph.nodes[product].shape):
        return None
    if found.activation not in ("none", "relu") or found.scale != 1.0:
        return None
    shape = tuple(_int(d) for d in found.shape)
    if None in shape:
        return None
    bias = residual = None
    for edge in found.terms:
        strides = [_int(s) for s in edge.view.strides]
        offset = _int(edge.view.offset)
        if offset is None or None in strides or strides[-1] != 1:
            return None
        if all(s == 0 for s in strides[:-1]) and bias is None:
            bias = (edge.source, offset)
        elif len(shape) >= 2 and _rows_merge(strides, shape) and residual is None:
            residual = (edge.source, offset, strides[-2])
        else:
            return None
    epilogue = Epilogue("row" if bias else "none", found.activation, residual is not None)
    return FusedEpilogue(found.consumer, epilogue, bias, residual)


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
        and tuple(view.shape) == tuple(shape)
        and tuple(view.strides) == tuple(contiguous_strides(shape))
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

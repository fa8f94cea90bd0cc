"""Contractions (`ops.Contract`, `ops.ContractSum`): which are matrix products, and how
their axes form matrices.

Each axis of a contraction's logical shape is classified by which operand varies along
it: M (only a), N (only b), batch (both) or K (summed). A class of axes acts as one
matrix dimension when its axes are row-major in memory (`merged_axes`), and a matrix is
readable in place by a row-major BLAS when one of its strides is 1 and its leading
dimension covers a row (`matrix_layout`). Fusion asks `is_blas_contract` whether a
contraction needs its operands as buffers; the backends' BLAS and generated-matmul
lowerings ask the rest. This is the one place contractions are recognised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.dtype import DType
from luminal.shape.expr import ONE, ZERO, Expr, known_ints
from luminal.shape.tracker import contiguous_strides

F32 = DType.float32


def is_blas_contract(node) -> bool:  # noqa: ANN001 - a Node
    """A Contract with a real matrix shape: one operand is broadcast along some axis (an
    M or N axis), so BLAS applies. Without one it is an elementwise product summed
    (a dot along rows), better fused as a loop; so is one whose BLAS call would pack a
    broadcast into a matrix larger than anything else it touches (`_packs_a_broadcast`)."""
    if not isinstance(node.op, ops.Contract):
        return False
    views = [e.view for e in node.inputs]
    if _padded_broadcast(views):
        return False
    return not _packs_a_broadcast(node) and any(
        (a == 0) != (b == 0)
        for a, b, d in zip(views[0].strides, views[1].strides, views[0].shape, strict=True)
        if d != 1
    )


def _padded_broadcast(views: Sequence) -> bool:
    """Whether an operand is broadcast (stride 0) along an axis it is also padded along:
    it varies there through its mask, which the axis classes (read from strides) miss."""
    return any(
        view.mask is not None and stride == 0 and tuple(view.mask[d]) != (0, view.shape[d])
        for view in views
        for d, stride in enumerate(view.strides)
    )


def _packs_a_broadcast(node) -> bool:  # noqa: ANN001 - a Node
    """Whether an operand is broadcast along a summed axis and its packed matrix (its own
    axes times K) would outgrow both the other operand and the output: (u * v).sum() with
    u (n, 1) and v (1, n) would pack n x n numbers for 2n, where the loop needs none."""
    views = [e.view for e in node.inputs]
    shape = views[0].shape
    summed = node.op.summed
    output = _size(shape, [d for d in range(len(shape)) if d not in summed])
    spans = [
        _size(shape, [d for d in range(len(shape)) if d in summed or v.strides[d] != 0])
        for v in views
    ]
    for view, span, other in zip(views, spans, reversed(spans), strict=True):
        broadcast = any(view.strides[d] == 0 and shape[d] != 1 for d in summed)
        if broadcast and not any((bound - span).bounds()[0] >= 0 for bound in (other, output)):
            return True
    return False


def _size(shape, axes: list[int]):  # noqa: ANN001, ANN202 - Exprs
    total = ONE
    for d in axes:
        total = total * shape[d]
    return total


def is_loop_contract(node) -> bool:  # noqa: ANN001 - a Node
    return type(node.op) is ops.Contract and not is_blas_contract(node)


def _at_least(a: Expr, b: Expr) -> bool:
    return (a - b).bounds()[0] >= 0


def _leading(ld: Expr, length: Expr) -> bool:
    """A usable leading dimension for rows of `length`: at least it, and at least 1 unless
    it is the length itself (`batch * 784` for a batch of 0 rows)."""
    return _at_least(ld, length) and (_at_least(ld, ONE) or _at_least(length, ld))


def matrix_layout(rows: Expr, cols: Expr, s_rows: Expr, s_cols: Expr) -> tuple[bool, Expr] | None:
    """(transposed, leading dimension) of a rows x cols matrix with these strides, as a
    row-major BLAS operand reads it, or None. The leading dimension must be provably at
    least the row length: overlapping windows (pooling views) have a smaller one. It may
    be below 1 only where it equals the row length (the matrix is then empty: nothing is
    read, and lm_sgemm passes the BLAS at least 1)."""
    if cols == 1 or s_cols == 1:
        ld = s_rows if rows != 1 else cols
        return (False, ld) if _leading(ld, cols) else None
    if rows == 1 or s_rows == 1:
        ld = s_cols if cols != 1 else rows
        return (True, ld) if _leading(ld, rows) else None
    return None


def merged_axes(
    axes: Sequence[int], shape: Sequence[Expr], strides: Sequence[Expr] | dict
) -> tuple[Expr, Expr] | None:
    """(size, stride of the innermost axis) of axes that read as one row-major dimension
    through `strides` (every stride nonzero, each the next one's times its size);
    (1, 0) for no axes; None when they do not merge."""
    if not axes:
        return ONE, ZERO
    size = ONE
    for d in axes:
        size = size * shape[d]
        if strides[d] == 0:
            return None
    for outer, inner in zip(axes, axes[1:], strict=False):
        if strides[outer] != strides[inner] * shape[inner]:
            return None
    return size, strides[axes[-1]]


@dataclass
class Axes:
    """The contraction's axes by class, each list in logical order."""

    batch: list[int]
    m: list[int]
    n: list[int]
    k: list[int]


def classify(shape: Sequence[Expr], summed: Sequence[int], views: Sequence) -> Axes | None:
    """Split the logical axes (size-1 axes dropped) into batch, M, N and K; None when the
    output would be broadcast along an axis (neither operand varies along it) or an
    operand is padded along an axis it is broadcast along (`_padded_broadcast`)."""
    if _padded_broadcast(views):
        return None
    axes = Axes([], [], [], [])
    sa, sb = views[0].strides, views[1].strides
    for d in range(len(shape)):
        if shape[d] == 1:
            continue
        if d in summed:
            axes.k.append(d)
            continue
        a_var, b_var = sa[d] != 0, sb[d] != 0
        if a_var and b_var:
            axes.batch.append(d)
        elif a_var:
            axes.m.append(d)
        elif b_var:
            axes.n.append(d)
        else:
            return None
    return axes


@dataclass(frozen=True)
class Gathered:
    """A product's operand read from the buffer under the `Contiguous` copy it reads
    (a convolution's im2col columns, copied from overlapping windows of the padded
    input): the copy is never made, the product packs its tiles from `source` directly.
    `axes` maps each logical axis the operand varies along to its (size, stride in
    `source`) sub-axes, outermost first; `offset` is the view's offset in `source`."""

    copy: int
    source: int
    offset: int
    axes: dict[int, tuple[tuple[int, int], ...]]


def gathered_operand(graph, node, side: int, readers: dict) -> Gathered | None:  # noqa: ANN001
    """The operand `side` of a float32 matrix product as a `Gathered`, when it is a
    float32 `Contiguous` copy of a strided, unmasked view of sizes and strides known as
    ints, which the product reads without offset and whose axes split into the copy's
    axes, and every reader of the copy is such a product reading it as the call's second
    operand (two convolutions of one input with the same window share one im2col copy:
    both gather instead); else None."""
    edge = node.inputs[side]
    copy = graph.nodes[edge.source]
    if not isinstance(copy.op, ops.Contiguous) or copy.id in graph.retrieved | graph.kept:
        return None
    found = _gathered_here(graph, node, side)
    for other in readers.get(copy.id, set()) - {node.id}:
        reader = graph.nodes[other]
        sides = [i for i, e in enumerate(reader.inputs) if e.source == copy.id]
        if not (is_blas_contract(reader) and len(sides) == 1):
            return None
        if gathered_side(graph, reader) != sides[0] or not _gathered_here(graph, reader, sides[0]):
            return None
    return found


def _gathered_here(graph, node, side: int) -> Gathered | None:  # noqa: ANN001
    """`gathered_operand` for this product's edge alone (the copy's other readers not
    looked at)."""
    edge = node.inputs[side]
    copy = graph.nodes[edge.source]
    if not (isinstance(node.op, ops.Contract) and isinstance(copy.op, ops.Contiguous)):
        return None
    inner = copy.inputs[0]
    source = graph.nodes[inner.source]
    if node.dtype != F32 or copy.dtype != F32 or source.dtype != F32:
        return None
    if inner.view.mask is not None or edge.view.mask is not None:
        return None
    copy_shape = known_ints(copy.shape)
    x_strides, offset = known_ints(inner.view.strides), inner.view.offset.as_int()
    shape, strides = known_ints(edge.view.shape), known_ints(edge.view.strides)
    if None in (copy_shape, x_strides, offset, shape, strides) or edge.view.offset != 0:
        return None
    copy_strides = [int(s) for s in contiguous_strides(copy.shape)]
    axes: dict[int, tuple[tuple[int, int], ...]] = {}
    for d, (size, stride) in enumerate(zip(shape, strides, strict=True)):
        if stride == 0 or size == 1:
            continue
        parts = _split(size, stride, copy_shape, copy_strides, x_strides)
        if parts is None:
            return None
        axes[d] = parts
    return Gathered(copy.id, source.id, offset, axes)


def _split(size: int, stride: int, shape, strides, x_strides):  # noqa: ANN001, ANN202
    """The copy's axes (size, stride in the source) one logical axis of `size` with
    `stride` in the copy's row-major buffer runs over, or None."""
    for last in range(len(shape) - 1, -1, -1):
        if strides[last] == stride and shape[last] != 1:
            break
    else:
        return None
    total, first = 1, last + 1
    while first > 0 and total < size:
        first -= 1
        total *= shape[first]
    if total != size:
        return None
    return tuple((shape[i], x_strides[i]) for i in range(first, last + 1) if shape[i] != 1)


def blas_gathered(graph, order) -> dict[int, int]:  # noqa: ANN001
    """For each copy a matrix product reads through `gathered_operand`: the buffer the
    product reads instead (the copy is never materialised; fusion keeps that buffer)."""
    readers = graph.readers()
    found: dict[int, int] = {}
    for node_id in order:
        node = graph.nodes[node_id]
        if not is_blas_contract(node) or node.dtype != F32:
            continue
        for side in (0, 1):
            gathered = gathered_operand(graph, node, side, readers)
            if gathered is not None and gathered_side(graph, node) == side:
                found[gathered.copy] = gathered.source
    return found


def gathered_side(graph, node) -> int | None:  # noqa: ANN001, ARG001
    """The operand a gathered copy may be: the one the BLAS call takes as its second
    operand, whose columns are the output's unit-stride columns (a convolution's
    columns); None when the output is no such matrix."""
    views = [e.view for e in node.inputs]
    axes = classify(tuple(views[0].shape), node.op.summed, views)
    if axes is None or not (axes.m and axes.n):
        return None
    out_axes = [d for d in range(len(views[0].shape)) if d not in node.op.summed]
    out_strides = dict(zip(out_axes, contiguous_strides(node.shape), strict=True))
    return 0 if out_strides[axes.n[-1]] != 1 else 1

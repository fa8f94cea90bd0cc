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
from luminal.shape.expr import ONE, ZERO, Expr


def is_blas_contract(node) -> bool:  # noqa: ANN001 - a Node
    """A Contract with a real matrix shape: one operand is broadcast along some axis (an
    M or N axis), so BLAS applies. Without one it is an elementwise product summed
    (a dot along rows), better fused as a loop; so is one whose BLAS call would pack a
    broadcast into a matrix larger than anything else it touches (`_packs_a_broadcast`)."""
    if not isinstance(node.op, ops.Contract):
        return False
    views = [e.view for e in node.inputs]
    return not _packs_a_broadcast(node) and any(
        (a == 0) != (b == 0)
        for a, b, d in zip(views[0].strides, views[1].strides, views[0].shape, strict=True)
        if d != 1
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


def matrix_layout(rows: Expr, cols: Expr, s_rows: Expr, s_cols: Expr) -> tuple[bool, Expr] | None:
    """(transposed, leading dimension) of a rows x cols matrix with these strides, as a
    row-major BLAS operand reads it, or None. The leading dimension must be provably at
    least the row length: overlapping windows (pooling views) have a smaller one."""
    if cols == 1 or s_cols == 1:
        ld = s_rows if rows != 1 else cols
        return (False, ld) if _at_least(ld, cols) and _at_least(ld, ONE) else None
    if rows == 1 or s_rows == 1:
        ld = s_cols if cols != 1 else rows
        return (True, ld) if _at_least(ld, rows) and _at_least(ld, ONE) else None
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
    output would be broadcast along an axis (neither operand varies along it)."""
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

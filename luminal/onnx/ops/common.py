"""Helpers several op families share: exact select, reversal, axis handling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from luminal.dtype import DType, float32, int32
from luminal.hl.binary import broadcast_shapes
from luminal.hl.combine import concat
from luminal.shape.expr import Expr, sym, var
from luminal.tensor import GraphTensor


def axis_of(axis: int, rank: int) -> int:
    return int(axis) % max(rank, 1)


def select(condition: GraphTensor, a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """a where condition else b, exactly (no a * c + b * (1 - c), which turns inf * 0
    into NaN): the pair is stacked and one of the two is gathered per element."""
    dtype = a.dtype if a.dtype == b.dtype else _promote(a.dtype, b.dtype)
    a, b = a.cast(dtype), b.cast(dtype)
    shape = broadcast_shapes(a.view.shape, b.view.shape, "Where")
    shape = broadcast_shapes(shape, condition.view.shape, "Where")
    flags = condition.cast(int32).expand(shape)
    wide = dtype if dtype != DType.bool else int32
    pair = concat(
        [b.cast(wide).expand(shape).unsqueeze(-1), a.cast(wide).expand(shape).unsqueeze(-1)], -1
    )
    flat = pair.reshape((-1,))
    index = a.graph.iota(var("z") * 2, shape) + flags
    return flat.gather(index).cast(dtype)


def _promote(a: DType, b: DType) -> DType:
    from luminal.dtype import promote

    return promote(a, b)


def reverse(x: GraphTensor, axis: int) -> GraphTensor:
    """x with `axis` reversed (a gather of rows n-1, ..., 0)."""
    n = x.view.shape[axis]
    order = [axis, *(d for d in range(x.ndim) if d != axis)]
    front = x.permute(order)
    rows = front.gather(x.graph.iota(n - 1 - var("z"), (n,)))
    inverse = [order.index(d) for d in range(x.ndim)]
    return rows.permute(inverse)


def take(x: GraphTensor, indices: GraphTensor, axis: int) -> GraphTensor:
    """numpy.take along `axis` for in-range non-negative int32 indices."""
    order = [axis, *(d for d in range(x.ndim) if d != axis)]
    rows = x.permute(order).gather(indices)  # indices.shape + others
    k = indices.ndim
    # rows dims: indices dims (k) then the other dims in order; put them back at `axis`
    perm = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, rows.ndim))
    return rows.permute(perm)


def wrap_negative(indices: GraphTensor, size: Any) -> GraphTensor:
    """ONNX indices may count from the end: i < 0 -> i + size (int32)."""
    indices = indices.cast(int32)
    known = sym(size).as_int()
    bound = indices.graph.constant(known if known is not None else sym(size), int32)
    return indices + indices.lt(0) * bound


def as_float(x: GraphTensor) -> GraphTensor:
    return x if x.dtype.is_float else x.cast(float32)


def full(graph: Any, value: float | int | bool, shape: Sequence[Any], dtype: Any) -> GraphTensor:
    return graph.constant(value, dtype).expand(
        tuple(sym(d) if isinstance(d, Expr) else d for d in shape)
    )


def floor(x: GraphTensor) -> GraphTensor:
    """floor(x) = x - (x mod 1), floor-mod keeping the sign of 1."""
    if not x.dtype.is_float:
        return x
    return x - x % 1.0


def _split(v: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
    """Veltkamp's split of a float32 into two halves of 12 bits (hi + lo == v)."""
    c = v * 4097.0
    hi = c - (c - v)
    return hi, v - hi


def divide(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """a / b rounded as IEEE division rounds (luminal divides as a * (1 / b), which can
    land one ulp off; quantization rounds the quotient to an integer, where that ulp
    decides ties). The product q * b is made exact with Dekker's two-product and the
    remainder corrects q."""
    inverse = b.reciprocal()
    q = a * inverse
    high = q * b
    qh, ql = _split(q)
    bh, bl = _split(b)
    low = ((qh * bh - high) + qh * bl + ql * bh) + ql * bl
    return q + ((a - high) - low) * inverse


def round_half_even(x: GraphTensor) -> GraphTensor:
    """Round to nearest, ties to even (numpy.round, ONNX Round)."""
    if not x.dtype.is_float:
        return x
    shifted = x + 0.5
    rounded = floor(shifted)
    tie = (shifted % 1.0).eq(0)
    odd = (rounded % 2.0).eq(1)
    return rounded - tie * odd

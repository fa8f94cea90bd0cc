"""Shape and movement ops: reshapes, slices, pads, concat/split, tiling, scans, masks.

Shape arguments (Reshape's shape, Slice's starts, Pad's pads, ...) must be known when
the model loads; they may hold symbolic dims (see folding.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.dtype import bool_, int32
from luminal.hl.binary import broadcast_shapes
from luminal.hl.combine import concat
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.onnx.folding import shape_array
from luminal.onnx.ops.common import axis_of, full, reverse, wrap_negative
from luminal.shape.expr import Expr, sym, var
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
INT64_MAX = 2**63 - 1


def _axes_input(ctx: NodeContext, index: int, since: int = 13) -> list[int] | None:
    if ctx.opset >= since:
        return ctx.static_ints(index, "axes") if ctx.has(index) else None
    axes = ctx.attr("axes")
    return None if axes is None else list(axes)


def _product(dims: Any) -> Any:
    total: Any = 1
    for d in dims:
        total = d * total
    return total


# ---------------------------------------------------------------- shape queries
def _shape(ctx: NodeContext) -> np.ndarray:
    value = ctx.inputs[0]
    dims = value.view.shape if isinstance(value, GraphTensor) else np.asarray(value).shape
    rank = len(dims)
    start, end = ctx.attr("start", 0), ctx.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return shape_array(tuple(dims)[start:end])


def _size(ctx: NodeContext) -> np.ndarray:
    value = ctx.inputs[0]
    dims = value.view.shape if isinstance(value, GraphTensor) else np.asarray(value).shape
    return shape_array([_product(dims)]).reshape(())


def _constant(ctx: NodeContext) -> np.ndarray:
    for name, kind in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if name in ctx.attrs:
            return np.asarray(ctx.attrs[name], dtype=kind)
    raise ctx.unsupported(f"attributes {sorted(ctx.attrs)} (strings and sparse tensors)")


# ---------------------------------------------------------------- reshapes
def _reshape(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    wanted = ctx.static_ints(1, "shape")
    allowzero = ctx.attr("allowzero", 0)
    dims = [x.view.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(wanted)]
    return x.reshape(tuple(dims))


def _flatten(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    shape = x.view.shape
    return x.reshape((_product(shape[:axis]), _product(shape[axis:])))


def _squeeze(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    axes = _axes_input(ctx, 1)
    return x.squeeze(None if axes is None else tuple(axes))


def _unsqueeze(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    axes = _axes_input(ctx, 1) or []
    rank = x.ndim + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = x.unsqueeze(axis)
    return x


def _transpose(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    perm = ctx.attr("perm", list(reversed(range(x.ndim))))
    return x.permute(tuple(perm))


def _expand(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    target = tuple(sym(d) for d in ctx.static_ints(1, "shape"))
    shape = broadcast_shapes(x.view.shape, target, "Expand")
    return x.expand(shape)


def _tile(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    repeats = ctx.static_ints(1, "repeats")
    if all(r == 1 for r in repeats):
        return x
    interleaved = []
    for axis, (dim, times) in enumerate(zip(x.view.shape, repeats, strict=True)):
        x = x.unsqueeze(2 * axis)
        interleaved.append(times * dim)
    expanded = list(x.view.shape)
    for axis, times in enumerate(repeats):
        expanded[2 * axis] = sym(times)
    return x.expand(tuple(expanded)).reshape(tuple(interleaved))


def _depth_to_space(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.view.shape
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape((n, b, b, c // (b * b), h, w)).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape((n, c // (b * b), b, b, h, w)).permute(0, 1, 4, 2, 5, 3)
    return y.reshape((n, c // (b * b), h * b, w * b))


def _space_to_depth(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.view.shape
    blocks = x.reshape((n, c, h // b, b, w // b, b))
    if ctx.attr("mode", "DCR") == "CRD":
        y = blocks.permute(0, 1, 3, 5, 2, 4)
    else:
        y = blocks.permute(0, 3, 5, 1, 2, 4)
    return y.reshape((n, c * b * b, h // b, w // b))


# ---------------------------------------------------------------- concat / split
def _concat(ctx: NodeContext) -> GraphTensor:
    tensors = ctx.tensors()
    axis = axis_of(ctx.attr("axis"), tensors[0].ndim)
    kept = [t for t in tensors if t.view.shape[axis].as_int() != 0] or tensors[:1]
    return concat(kept, axis)


def _split(ctx: NodeContext) -> list[GraphTensor]:
    x = ctx.tensor(0)
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    count = len(ctx.node.output)
    if ctx.opset >= 13 and ctx.has(1):
        sizes: list[Any] = ctx.static_ints(1, "split")
    elif ctx.opset < 13 and ctx.attr("split") is not None:
        sizes = list(ctx.attr("split"))
    else:
        dim = x.view.shape[axis]
        parts = ctx.attr("num_outputs", count)
        known = dim.as_int()
        if known is None:
            sizes = [dim // parts] * parts
        else:
            chunk = -(-known // parts)
            sizes = [min(chunk, known - i * chunk) for i in range(parts)]
    outputs, start = [], sym(0)
    for size in sizes:
        ranges: list[Any] = [None] * x.ndim
        ranges[axis] = (start, start + size)
        outputs.append(x.slice(ranges))
        start = start + size
    return outputs


# ---------------------------------------------------------------- slice
def _slice(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = ctx.static_ints(1, "starts"), ctx.static_ints(2, "ends")
        axes = ctx.static_ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.static_ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        x = _slice_axis(ctx, x, axis_of(axis, x.ndim), start, end, int(step))
    return x


def _slice_axis(ctx: NodeContext, x: GraphTensor, axis: int, start: Any, end: Any, step: int):
    dim = x.view.shape[axis]
    size = dim.as_int()
    if size is not None and isinstance(end, Expr) and step > 0 and not isinstance(start, Expr):
        return _slice_to_symbolic_end(ctx, x, axis, start, end, step)
    if size is None or isinstance(start, Expr) or isinstance(end, Expr):
        if step < 0:
            raise ctx.unsupported("a negative step over a symbolic dim")
        ranges: list[Any] = [None] * x.ndim
        ranges[axis] = (_bound(start), _bound(end), step)
        return x.slice(ranges)
    lo, hi, step = slice(_bound(start), _bound(end), step).indices(size)
    ranges = [None] * x.ndim
    if step > 0:
        ranges[axis] = (lo, max(hi, lo), step)
        return x.slice(ranges)
    count = len(range(lo, hi, step))
    if count == 0:
        ranges[axis] = (0, 0, 1)
        return x.slice(ranges)
    first = size - 1 - lo
    ranges[axis] = (first, first + (count - 1) * -step + 1, -step)
    return reverse(x, axis).slice(ranges)


def _slice_to_symbolic_end(
    ctx: NodeContext, x: GraphTensor, axis: int, start: int, end: Expr, step: int
) -> GraphTensor:
    """A known dim sliced up to a symbolic end (BERT's position_ids[:, :seq]): the end is
    taken as it is, so the result has the end's dim, not min(dim, end), and the graph
    checks end <= dim at every run instead of clamping."""
    dim = x.view.shape[axis]
    ctx.graph.require_nonzero(
        end.lt(dim + 1), f"{ctx.describe()}: the slice end {end} must be at most {dim}"
    )
    ranges: list[Any] = [None] * x.ndim
    ranges[axis] = (start % int(dim.as_int()) if start < 0 else start, end, step)
    return x._with_view(
        x.view.slice(
            [r if r is not None else (0, d, 1) for r, d in zip(ranges, x.view.shape, strict=True)]
        )
    )


def _bound(value: Any) -> Any:
    if isinstance(value, Expr):
        return value
    return max(min(int(value), 2**62), -(2**62))


# ---------------------------------------------------------------- pad
def _pad(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads", ctx.attr("paddings", [])))
        value = ctx.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = ctx.static_ints(1, "pads")
        value = (
            float(np.asarray(ctx.static(2, "constant_value")).reshape(-1)[0]) if ctx.has(2) else 0
        )
        axes = ctx.static_ints(3, "axes") if ctx.has(3) else list(range(x.ndim))
    axes = [axis_of(a, x.ndim) for a in axes]
    count = len(axes)
    for i, axis in enumerate(axes):
        before, after = pads[i], pads[i + count]
        x = _pad_axis(ctx, x, axis, before, after, mode, value)
    return x


def _pad_axis(ctx, x: GraphTensor, axis: int, before: Any, after: Any, mode: str, value: Any):
    if isinstance(before, int) and before < 0:
        x = _crop(x, axis, -before, 0)
        before = 0
    if isinstance(after, int) and after < 0:
        x = _crop(x, axis, 0, -after)
        after = 0
    if before == 0 and after == 0:
        return x
    if mode == "constant":
        padding: list[Any] = [None] * x.ndim
        padding[axis] = (before, after)
        fill = value if x.dtype.is_float else int(value)
        return x.pad(padding, fill)
    n = x.view.shape[axis]
    pieces = []
    if before:
        pieces.append(_border(ctx, x, axis, before, n, mode, leading=True))
    pieces.append(x)
    if after:
        pieces.append(_border(ctx, x, axis, after, n, mode, leading=False))
    return concat(pieces, axis)


def _crop(x: GraphTensor, axis: int, front: int, back: int) -> GraphTensor:
    n = x.view.shape[axis]
    ranges: list[Any] = [None] * x.ndim
    ranges[axis] = (front, n - back)
    return x.slice(ranges)


def _border(ctx, x: GraphTensor, axis: int, amount: int, n: Any, mode: str, leading: bool):
    """The `amount` elements an edge/reflect/wrap pad adds on one side of `axis`."""
    positions = range(-amount, 0) if leading else range(0, amount)
    size = n.as_int()
    if size is None:
        raise ctx.unsupported(f"{mode} padding of a symbolic dim")
    rows = []
    for p in positions:
        index = p if leading else size + p
        if mode == "edge":
            rows.append(0 if leading else size - 1)
        elif mode == "reflect":
            period = 2 * (size - 1) if size > 1 else 1
            k = index % period
            rows.append(k if k < size else period - k)
        elif mode == "wrap":
            rows.append(index % size)
        else:
            raise ctx.unsupported(f"pad mode {mode!r}")
    table = np.asarray(rows, dtype=np.int32)
    indices = x.graph.tensor((len(rows),), dtype=int32, name="pad_rows").set(table)
    from luminal.onnx.ops.common import take

    return take(x, indices, axis)


# ---------------------------------------------------------------- generators
def _constant_of_shape(ctx: NodeContext) -> GraphTensor:
    shape = ctx.static_ints(0, "shape")
    value = ctx.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    dtype = dtypes.luminal_dtype(dtypes.from_numpy(fill.dtype))
    item = fill[0].item()
    return full(ctx.graph, item, shape, dtype)


def _first(value: np.ndarray) -> Any:
    """The one element of a scalar or one-element array, as a Python number or Expr."""
    item = np.asarray(value).reshape(-1)[0]
    return item.item() if isinstance(item, np.generic) else item


def _range(ctx: NodeContext) -> GraphTensor:
    start, limit, delta = (
        _first(ctx.static(i, n)) for i, n in enumerate(("start", "limit", "delta"))
    )
    if any(isinstance(v, float) for v in (start, limit, delta)):
        raise ctx.unsupported("a float Range with symbolic bounds")
    count = (sym(limit) - start + delta - 1) // delta if delta > 0 else None
    if count is None:
        raise ctx.unsupported("a symbolic Range with a negative delta")
    count = count.max(0)
    return ctx.graph.iota(var("z") * delta + start, (count,), "int32")


def _eye_like(ctx: NodeContext) -> np.ndarray:
    x = ctx.tensor(0)
    rows, cols = (d.as_int() for d in x.view.shape)
    if rows is None or cols is None:
        raise ctx.unsupported("EyeLike of a symbolic shape")
    elem = ctx.attr("dtype")
    dtype = dtypes.numpy_dtype(elem) if elem is not None else x.dtype.numpy
    return np.eye(rows, cols, k=ctx.attr("k", 0), dtype=dtype)


def _one_hot(ctx: NodeContext) -> GraphTensor:
    indices = ctx.tensor(0)
    depth = int(np.asarray(ctx.static(1, "depth")).reshape(-1)[0])
    values = ctx.tensor(2)
    off, on = values[0], values[1]
    axis = ctx.attr("axis", -1)
    rank = indices.ndim + 1
    axis = axis % rank
    index = wrap_negative(
        indices.cast(values.dtype if not values.dtype.is_float else "float32").cast(int32), depth
    )
    index = index.unsqueeze(axis)
    shape = [1] * rank
    shape[axis] = depth
    positions = ctx.graph.arange(depth).reshape(shape)
    hot = positions.eq(index)
    return off + (on - off) * hot.cast(values.dtype)


def _trilu(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    k = int(np.asarray(ctx.static(1, "k")).reshape(-1)[0]) if ctx.has(1) else 0
    if x.view.n_elements().as_int() == 0:
        return x
    if x.dtype == bool_:
        x32 = x.cast(int32)
        return (x32.triu(k) if ctx.attr("upper", 1) else x32.tril(k)).cast(bool_)
    return x.triu(k) if ctx.attr("upper", 1) else x.tril(k)


def _cumsum(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    axis = axis_of(int(np.asarray(ctx.static(1, "axis")).reshape(-1)[0]), x.ndim)
    backward = ctx.attr("reverse", 0)
    source = reverse(x, axis) if backward else x
    total = source.cumsum(axis)
    if ctx.attr("exclusive", 0):
        total = total - source
    return reverse(total, axis) if backward else total


def _cumprod(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    axis = axis_of(int(np.asarray(ctx.static(1, "axis")).reshape(-1)[0]), x.ndim)
    backward = ctx.attr("reverse", 0)
    source = reverse(x, axis) if backward else x
    if ctx.attr("exclusive", 0):
        n = source.view.shape[axis]
        ranges: list[Any] = [None] * x.ndim
        ranges[axis] = (0, n - 1)
        head = source.slice(ranges)
        shape = list(source.view.shape)
        shape[axis] = 1
        source = concat([full(ctx.graph, 1, shape, x.dtype), head], axis)
    total = source.cumprod(axis)
    return reverse(total, axis) if backward else total


def _identity(ctx: NodeContext) -> list[Any]:
    return [ctx.inputs[0]]  # a list: the value may be a sequence


def _compress(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    condition = np.asarray(ctx.static(1, "condition")).reshape(-1).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = x.reshape((-1,)), 0
    axis = axis_of(axis, x.ndim)
    picked = np.flatnonzero(condition[: x.view.shape[axis].as_int()]).astype(np.int32)
    from luminal.onnx.ops.common import take

    indices = ctx.lift(picked, "compress_indices")
    return take(x, indices, axis)


RULES: dict[str, Rule] = {
    "Shape": _shape,
    "Size": _size,
    "Constant": _constant,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Expand": _expand,
    "Tile": _tile,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Pad": _pad,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "EyeLike": _eye_like,
    "OneHot": _one_hot,
    "Trilu": _trilu,
    "CumSum": _cumsum,
    "CumProd": _cumprod,
    "Identity": _identity,
    "Compress": _compress,
}

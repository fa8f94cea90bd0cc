"""Shape arithmetic folded at load time.

Exporters compute shapes inside the model (Shape -> Gather -> Concat -> Reshape).
Values known when the model loads are kept as numpy arrays; a tensor's shape becomes
an int64 array, or an object array of `Expr` where a dim is symbolic, so
`Reshape(x, Concat(Shape(x)[0], -1))` folds to `x.reshape((batch, -1))`. Each folder
computes an op on such arrays, or returns None to let the op's graph rule run (for
instance a comparison of symbolic dims, which is only known at run time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.graph import Graph
from luminal.hl.combine import stack
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.shape.expr import Expr, sym
from luminal.tensor import GraphTensor

Folder = Callable[[NodeContext], list[np.ndarray] | None]


def normalize(array: Any) -> np.ndarray:
    """An object array whose entries are all known ints becomes int64."""
    array = np.asarray(array)
    if array.dtype != object:
        return array
    if all(not isinstance(v, Expr) or v.as_int() is not None for v in array.flat):
        return np.array([int(v) for v in array.flat], dtype=np.int64).reshape(array.shape)
    return array


def is_symbolic(array: np.ndarray) -> bool:
    return np.asarray(array).dtype == object


def shape_array(dims: Any) -> np.ndarray:
    """A shape as ONNX's Shape op gives it: int64, or object where a dim is symbolic."""
    values = [d.as_int() if isinstance(d, Expr) and d.as_int() is not None else d for d in dims]
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return normalize(array)


def lift_array(cx: Graph, array: np.ndarray, name: str) -> GraphTensor:
    """A known value as a graph tensor: a scalar or a uniform array as a broadcast
    constant, symbolic dims as expression constants, anything else as a weight."""
    array = normalize(array)
    if is_symbolic(array):
        items = [cx.constant(v, "int32") for v in array.flat]
        if array.ndim == 0:
            return items[0]
        return stack(items, 0).reshape(array.shape) if items else _empty(cx, array)
    data = dtypes.to_luminal_array(array, f"constant {name!r}")
    dtype = _luminal(data)
    if data.size and data.ndim <= 8 and (data.size == 1 or _uniform(data)):
        first = data.reshape(-1)[0].item()
        return cx.constant(first, dtype).expand(data.shape)
    return cx.tensor(data.shape, dtype=dtype, name=name).set(data)


def _empty(cx: Graph, array: np.ndarray) -> GraphTensor:
    return cx.tensor(array.shape, dtype="int32").set(np.zeros(array.shape, np.int32))


def _uniform(data: np.ndarray) -> bool:
    flat = data.reshape(-1)
    if data.dtype.kind == "f" and np.isnan(flat).any():
        return False
    return bool((flat == flat[0]).all())


def _luminal(data: np.ndarray) -> Any:
    from luminal.dtype import from_numpy

    return from_numpy(data.dtype)


# ---------------------------------------------------------------- folders
def _arrays(ctx: NodeContext) -> list[np.ndarray | None]:
    return [None if v is None else np.asarray(v) for v in ctx.inputs]


def _elementwise(fn: Callable[..., Any], allow_symbolic: bool = True) -> Folder:
    def fold(ctx: NodeContext) -> list[np.ndarray] | None:
        arrays = [a for a in _arrays(ctx) if a is not None]
        if any(is_symbolic(a) for a in arrays):
            if not allow_symbolic:
                return None
            if any(a.dtype.kind == "f" for a in arrays):
                return None
        with np.errstate(all="ignore"):
            result = fn(*arrays)
        out_dtype = np.result_type(*[a for a in arrays if not is_symbolic(a)] or [np.int64])
        result = np.asarray(result)
        if result.dtype != object:
            result = result.astype(out_dtype if result.dtype != bool else bool)
        return [normalize(result)]

    return fold


def _dim_equal(a: Any, b: Any) -> bool | None:
    """Whether two dims (ints or Exprs) are equal, None when only run time can tell:
    a symbolic dim outside another's range (e.g. seq vs -1) is known to differ."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return bool(a == b)
    difference = sym(a) - sym(b)
    known = difference.as_int()
    if known is not None:
        return known == 0
    low, high = difference.bounds()
    return False if low > 0 or high < 0 else None


def _equal(ctx: NodeContext) -> list[np.ndarray] | None:
    a, b = np.asarray(ctx.inputs[0]), np.asarray(ctx.inputs[1])
    if not is_symbolic(a) and not is_symbolic(b):
        return [np.equal(a, b)]
    pairs = np.broadcast_arrays(a.astype(object), b.astype(object))
    flags = [_dim_equal(x, y) for x, y in zip(pairs[0].flat, pairs[1].flat, strict=True)]
    if any(f is None for f in flags):
        return None
    return [np.array(flags, dtype=bool).reshape(pairs[0].shape)]


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a / b
    if is_symbolic(a) or is_symbolic(b):
        return a // b
    with np.errstate(all="ignore"):
        quotient = np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b)))
    return quotient.astype(np.result_type(a, b))


def _mod(ctx: NodeContext) -> list[np.ndarray] | None:
    a, b = np.asarray(ctx.inputs[0]), np.asarray(ctx.inputs[1])
    if is_symbolic(a) or is_symbolic(b):
        return [normalize(a % b)] if not ctx.attr("fmod", 0) else None
    with np.errstate(all="ignore"):
        result = np.fmod(a, b) if ctx.attr("fmod", 0) else np.mod(a, b)
    return [result.astype(np.result_type(a, b))]


def _cast(ctx: NodeContext) -> list[np.ndarray] | None:
    (array,) = [np.asarray(ctx.inputs[0])]
    if ctx.attr("to") in dtypes.NARROW_FLOATS:
        return None  # rounding with saturation: the graph rule
    target = dtypes.numpy_dtype(ctx.attr("to"))
    if is_symbolic(array):
        return [array] if target.kind in "iu" else None
    if array.dtype.kind == "f" and target.kind in "iu":
        with np.errstate(all="ignore"):
            array = np.trunc(array)
    return [array.astype(target)]


def _cast_like(ctx: NodeContext) -> list[np.ndarray] | None:
    """CastLike of a known value needs only the other input's type, not its value."""
    array, like = np.asarray(ctx.inputs[0]), ctx.inputs[1]
    target = like.dtype.numpy if isinstance(like, GraphTensor) else np.asarray(like).dtype
    if ctx.elem_type(1) in dtypes.NARROW_FLOATS or ctx.elem_type(1) in dtypes.NARROW_INTEGERS:
        return None  # luminal holds it as float32/int32: the graph rule rounds or wraps
    if is_symbolic(array):
        return [array] if target.kind in "iuO" else None
    return [array.astype(np.int64 if target.kind == "O" else target)]


def _gather(ctx: NodeContext) -> list[np.ndarray]:
    data, indices = np.asarray(ctx.inputs[0]), np.asarray(ctx.inputs[1])
    axis = ctx.attr("axis", 0)
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return [normalize(np.take(data, indices, axis=axis))]


def _concat(ctx: NodeContext) -> list[np.ndarray]:
    arrays = [np.asarray(a) for a in ctx.inputs if a is not None]
    if any(is_symbolic(a) for a in arrays):
        arrays = [a.astype(object) for a in arrays]
    return [normalize(np.concatenate(arrays, axis=ctx.attr("axis")))]


def _split(ctx: NodeContext) -> list[np.ndarray] | None:
    """Split of a known 1-D value (an exporter splitting a shape into its dims)."""
    data = np.asarray(ctx.inputs[0])
    axis = ctx.attr("axis", 0) % max(data.ndim, 1)
    if ctx.opset >= 13 and ctx.has(1):
        sizes = [int(v) for v in np.asarray(ctx.inputs[1]).reshape(-1)]
    elif ctx.opset < 13 and ctx.attr("split") is not None:
        sizes = [int(v) for v in ctx.attr("split")]
    else:
        parts = ctx.attr("num_outputs", len(ctx.node.output))
        chunk = -(-data.shape[axis] // parts)
        sizes = [min(chunk, data.shape[axis] - i * chunk) for i in range(parts)]
    edges = np.cumsum(sizes)[:-1]
    return [normalize(part) for part in np.split(data, edges, axis=axis)]


def _axes(ctx: NodeContext, index: int) -> list[int] | None:
    if ctx.opset >= 13 and ctx.has(index):
        return [int(a) for a in np.asarray(ctx.inputs[index]).reshape(-1)]
    axes = ctx.attr("axes")
    return None if axes is None else list(axes)


def _unsqueeze(ctx: NodeContext) -> list[np.ndarray]:
    data = np.asarray(ctx.inputs[0])
    axes = _axes(ctx, 1) or []
    rank = data.ndim + len(axes)
    for axis in sorted(a % rank for a in axes):
        data = np.expand_dims(data, axis)
    return [data]


def _squeeze(ctx: NodeContext) -> list[np.ndarray]:
    data = np.asarray(ctx.inputs[0])
    axes = _axes(ctx, 1)
    if axes is None:
        return [np.squeeze(data)]
    return [np.squeeze(data, axis=tuple(a % data.ndim for a in axes))]


def _slice(ctx: NodeContext) -> list[np.ndarray] | None:
    data = np.asarray(ctx.inputs[0])
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        values = [np.asarray(v) if v is not None else None for v in ctx.inputs[1:5]]
        values += [None] * (4 - len(values))
        if any(v is not None and is_symbolic(v) for v in values):
            return None
        starts, ends = list(values[0]), list(values[1])
        axes = list(values[2]) if values[2] is not None else list(range(len(starts)))
        steps = list(values[3]) if values[3] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[int(axis) % data.ndim] = slice(_clamp(start), _clamp(end), int(step))
    return [data[tuple(index)]]


def _clamp(value: Any) -> int:
    """Python slicing clamps any int; ONNX's INT64_MAX sentinels become None-like."""
    value = int(value)
    return max(min(value, 2**62), -(2**62))


def _reshape(ctx: NodeContext) -> list[np.ndarray] | None:
    data = np.asarray(ctx.inputs[0])
    shape = np.asarray(ctx.inputs[1])
    if is_symbolic(shape):
        return None
    dims = [int(d) for d in shape]
    allowzero = ctx.attr("allowzero", 0)
    dims = [data.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
    return [data.reshape(dims)]


def _constant_of_shape(ctx: NodeContext) -> list[np.ndarray] | None:
    shape = np.asarray(ctx.inputs[0])
    if is_symbolic(shape):
        return None
    value = ctx.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full([int(d) for d in shape], fill[0], dtype=fill.dtype)]


def _range(ctx: NodeContext) -> list[np.ndarray] | None:
    start, limit, delta = (np.asarray(v) for v in ctx.inputs[:3])
    if any(is_symbolic(v) for v in (start, limit, delta)):
        return None
    # scalars by the spec; exporters (AffineGrid's body) also pass one-element arrays
    start, limit, delta = (v.reshape(-1)[0] for v in (start, limit, delta))
    return [np.arange(start, limit, delta, dtype=start.dtype)]


def _expand(ctx: NodeContext) -> list[np.ndarray] | None:
    data, shape = np.asarray(ctx.inputs[0]), np.asarray(ctx.inputs[1])
    if is_symbolic(shape):
        return None
    target = np.broadcast_shapes(data.shape, tuple(int(d) for d in shape))
    return [np.broadcast_to(data, target).copy()]


def _reduce(fn: Callable[..., Any]) -> Folder:
    def fold(ctx: NodeContext) -> list[np.ndarray] | None:
        data = np.asarray(ctx.inputs[0])
        if data.size == 0:
            return None
        axes = _axes(ctx, 1)
        keepdims = bool(ctx.attr("keepdims", 1))
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0) and axes is not None:
                return [data]
            axes = list(range(data.ndim))
        result = fn(data, axis=tuple(a % max(data.ndim, 1) for a in axes), keepdims=keepdims)
        return [normalize(np.asarray(result, dtype=data.dtype if data.dtype != object else None))]

    return fold


def _where(condition: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(condition, a, b)


def _where_fold(ctx: NodeContext) -> list[np.ndarray] | None:
    """Where on shapes (Expand's `Where(shape == -1, 1, shape)`): the condition must be
    numbers, the branches may hold symbolic dims."""
    condition = np.asarray(ctx.inputs[0])
    if is_symbolic(condition):
        return None
    a, b = np.asarray(ctx.inputs[1]), np.asarray(ctx.inputs[2])
    if is_symbolic(a) or is_symbolic(b):
        return [normalize(np.where(condition, a.astype(object), b.astype(object)))]
    return [np.where(condition, a, b)]


def _transpose(ctx: NodeContext) -> list[np.ndarray]:
    data = np.asarray(ctx.inputs[0])
    return [np.transpose(data, ctx.attr("perm"))]


def _identity(ctx: NodeContext) -> list[np.ndarray]:
    return [ctx.inputs[0]]


def _tile(ctx: NodeContext) -> list[np.ndarray] | None:
    data, repeats = np.asarray(ctx.inputs[0]), np.asarray(ctx.inputs[1])
    if is_symbolic(repeats):
        return None
    return [np.tile(data, [int(r) for r in repeats])]


def _not_symbolic(fold: Folder) -> Folder:
    def guarded(ctx: NodeContext) -> list[np.ndarray] | None:
        if any(v is not None and is_symbolic(np.asarray(v)) for v in ctx.inputs):
            return None
        return fold(ctx)

    return guarded


FOLDERS: dict[str, Folder] = {
    "Identity": _identity,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Gather": _gather,
    "Concat": _concat,
    "Split": _split,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Expand": _expand,
    "Tile": _tile,
    "Add": _elementwise(np.add),
    "Sub": _elementwise(np.subtract),
    "Mul": _elementwise(np.multiply),
    "Div": _elementwise(_int_div),
    "Neg": _elementwise(np.negative),
    "Mod": _mod,
    "Pow": _elementwise(lambda a, b: np.power(a, b).astype(a.dtype), allow_symbolic=False),
    "Exp": _elementwise(np.exp, allow_symbolic=False),
    "Log": _elementwise(np.log, allow_symbolic=False),
    "Reciprocal": _elementwise(np.reciprocal, allow_symbolic=False),
    "Xor": _elementwise(np.logical_xor, allow_symbolic=False),
    "Equal": _equal,
    "Less": _elementwise(np.less, allow_symbolic=False),
    "Greater": _elementwise(np.greater, allow_symbolic=False),
    "LessOrEqual": _elementwise(np.less_equal, allow_symbolic=False),
    "GreaterOrEqual": _elementwise(np.greater_equal, allow_symbolic=False),
    "Not": _elementwise(np.logical_not, allow_symbolic=False),
    "And": _elementwise(np.logical_and, allow_symbolic=False),
    "Or": _elementwise(np.logical_or, allow_symbolic=False),
    "Where": _where_fold,
    "Max": _elementwise(np.maximum, allow_symbolic=False),
    "Min": _elementwise(np.minimum, allow_symbolic=False),
    "Abs": _elementwise(np.abs, allow_symbolic=False),
    "Relu": _elementwise(lambda a: np.maximum(a, 0).astype(a.dtype), allow_symbolic=False),
    "Sqrt": _elementwise(np.sqrt, allow_symbolic=False),
    "Floor": _elementwise(np.floor, allow_symbolic=False),
    "Ceil": _elementwise(np.ceil, allow_symbolic=False),
    "ReduceProd": _not_symbolic(_reduce(np.prod)),
    "ReduceSum": _not_symbolic(_reduce(np.sum)),
    "ReduceMax": _not_symbolic(_reduce(np.max)),
    "ReduceMin": _not_symbolic(_reduce(np.min)),
}

"""MaxPool's Indices output and MaxUnpool.

Indices: a tensor of input positions (as float32, exact below 2^24, padding -1) is cut
into the same windows as the values; the first maximum of each window picks its
position (argmax), and the batch/channel offset is added. MaxUnpool writes each value
at its index with a Scatter (an index-add): an index that several windows chose gets
the same element several times, so the sums are divided by the hit counts."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from luminal import ops
from luminal.dtype import float32, int32
from luminal.nn.conv import sliding_windows
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.indexing import gather_along
from luminal.shape.expr import var
from luminal.tensor import GraphTensor


def max_pool_indices(
    ctx: NodeContext,
    x: GraphTensor,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    padding: list[tuple[int, int]],
) -> GraphTensor:
    """int32 (N, C, *O): the flat input index of each window's first maximum."""
    dims = len(kernel)
    spatial = [int(d.as_int()) for d in x.view.shape[2:]]
    z = var("z")
    if ctx.attr("storage_order", 0):  # column-major: h + w * H (+ d * H * W ...)
        code: Any = 0
        stride = 1
        for axis in range(dims):
            inner = math.prod(spatial[axis + 1 :])
            code = code + ((z // inner) % spatial[axis]) * stride
            stride *= spatial[axis]
    else:
        code = z % math.prod(spatial)
    codes = ctx.graph.iota(code, tuple(x.view.shape)).cast(float32)
    source = x if x.dtype.is_float else x.cast(float32)
    values = sliding_windows(source, kernel, strides, dilations, padding, -math.inf)
    where = sliding_windows(codes, kernel, strides, dilations, padding, -1.0)
    outer = tuple(values.view.shape[: x.ndim])
    best = values.reshape((*outer, -1)).argmax(-1, keepdim=True)
    picked = gather_along(where.reshape((*outer, -1)), best, x.ndim).reshape(outer)
    per_plane = math.prod(int(d.as_int()) for d in outer[2:])
    planes = ctx.graph.iota((z // per_plane) * math.prod(spatial), outer)
    return picked.cast(int32) + planes


def _max_unpool(ctx: NodeContext) -> GraphTensor:
    x, indices = ctx.tensor(0), ctx.tensor(1).cast(int32)
    kernel = list(ctx.attr("kernel_shape"))
    dims = len(kernel)
    strides = list(ctx.attr("strides", [1] * dims))
    pads = list(ctx.attr("pads", [0] * 2 * dims))
    n, c = x.view.shape[:2]
    inferred = [
        (int(x.view.shape[2 + i].as_int()) - 1) * strides[i] - pads[i] - pads[i + dims] + kernel[i]
        for i in range(dims)
    ]
    total = int(n.as_int()) * int(c.as_int()) * math.prod(inferred)
    rows = indices.reshape((-1,))
    values = x.reshape((-1,)).cast(float32).contiguous()
    zeros = ctx.graph.constant(0.0, float32).expand((total,)).contiguous()
    ones = ctx.graph.constant(1.0, float32).expand(values.view.shape).contiguous()
    sums = ctx.graph.add_node(ops.Scatter(), [zeros, rows, values])
    hits = ctx.graph.add_node(ops.Scatter(), [zeros, rows, ones])
    y = (sums / hits.maximum(1.0)).reshape((n, c, *inferred)).cast(x.dtype)
    if ctx.has(2):
        target = [int(v) for v in ctx.static_ints(2, "output_shape")][2:]
        padding: list[Any] = [None, None]
        padding += [(0, t - s) for t, s in zip(target, inferred, strict=True)]
        y = y.pad(padding)
    return y


RULES: dict[str, Callable[[NodeContext], object]] = {"MaxUnpool": _max_unpool}

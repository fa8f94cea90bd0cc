"""Sampling at positions computed from data: GridSample, RoiAlign, DeformConv.

The positions are tensors, so the taps are too: along every sampled axis each output
point has 1 (nearest), 2 (linear) or 4 (cubic) source indices and weights, computed
elementwise in float32 as ONNX's reference computes them (padding modes make an index
in range and fold validity into its weight). The input is laid out as rows (one per
batch entry and position, channels along the row), and each combination of taps is one
row gather, weighted and summed: separable, exact in the indices, no loop over points.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from luminal import ops
from luminal.dtype import float32, int32
from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import floor, round_half_even, select
from luminal.shape.expr import var
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
Tap = tuple[GraphTensor, GraphTensor]  # (int32 index in range, float32 weight)


def _reflect(v: GraphTensor, low: float, high: float) -> GraphTensor:
    """v reflected by the near border until it lies in [low, high] (the reference's
    _gs_reflect)."""
    span = high - low

    def fold(distance: GraphTensor, near: float, far: float, sign: float) -> GraphTensor:
        turns = floor(distance / span)
        rest = distance - turns * span
        even = (turns % 2.0).lt(0.5)
        return select(even, rest * sign + near, far - rest * sign)

    below = fold(low - v, low, high, 1.0)
    above = fold(v - high, high, low, -1.0)
    return select(v.lt(low), below, select(v.gt(high), above, v))


def _pixel(i: GraphTensor, length: int, padding: str, bounds: tuple[float, float]) -> Tap:
    """Index i (integral float32) made readable under `padding`, and its 0/1 weight."""
    last = float(length - 1)
    if padding == "zeros":
        inside = i.ge(0.0).cast(float32) * i.le(last).cast(float32)
        return i.clamp(0.0, last).cast(int32), inside
    if padding == "reflection":
        i = _reflect(i, *bounds)
    one = i.graph.constant(1.0, float32).expand(i.view.shape)
    return i.clamp(0.0, last).cast(int32), one


def _cubic_weights(t: GraphTensor) -> list[GraphTensor]:
    """Keys' cubic convolution (a = -0.75) at distances 1 + t, t, 1 - t, 2 - t."""
    a = -0.75

    def near(x: GraphTensor) -> GraphTensor:
        return ((x * (a + 2) - (a + 3)) * x) * x + 1.0

    def far(x: GraphTensor) -> GraphTensor:
        return ((x * a - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def grid_taps(
    x: GraphTensor, length: int, mode: str, padding: str, align_corners: bool
) -> list[Tap]:
    """GridSample's taps along one axis for denormalised coordinates x."""
    bounds = (0.0, length - 1.0) if align_corners else (-0.5, length - 0.5)
    if mode == "nearest":
        x = round_half_even(x)
    if padding == "border":
        outside = x.lt(bounds[0]).cast(float32).maximum(x.gt(bounds[1]).cast(float32))
        x = select(outside.gt(0.5), x.clamp(0.0, length - 1.0), x)
    elif padding == "reflection":
        x = _reflect(x, *bounds)
    if mode == "nearest":
        return [_pixel(x, length, padding, bounds)]
    start = floor(x)
    t = x - start
    if mode == "linear":
        offsets, weights = [0.0, 1.0], [1.0 - t, t]
    else:
        offsets, weights = [-1.0, 0.0, 1.0, 2.0], _cubic_weights(t)
    taps = []
    for offset, weight in zip(offsets, weights, strict=True):
        index, valid = _pixel(start + offset, length, padding, bounds)
        taps.append((index, weight * valid))
    return taps


def gather_taps(
    x: GraphTensor,
    rows_of: GraphTensor,
    taps: Sequence[list[Tap]],
    combine: str = "sum",
) -> GraphTensor:
    """Over every combination of taps, weight * x's row at (batch row, *indices), summed
    (or the max, RoiAlign's max mode).

    x: (B, C, *dims); rows_of: int32, the first row of each point's batch entry, in
    the taps' shape P; taps[i]: the taps along spatial axis i. Returns (*P, C)."""
    c = x.view.shape[1]
    dims = [int(d.as_int()) for d in x.view.shape[2:]]
    table = x.permute((0, *range(2, x.ndim), 1)).reshape((-1, c))
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    terms = []
    for combo in itertools.product(*taps):
        row, weight = rows_of, None
        for (index, w), stride in zip(combo, strides, strict=True):
            row = row + index * stride
            weight = w if weight is None else weight * w
        assert weight is not None
        terms.append(table.gather(row) * weight.unsqueeze(-1))
    total = terms[0]
    for term in terms[1:]:
        total = total.maximum(term) if combine == "max" else total + term
    return total


def _batch_rows(graph: Any, points: Sequence[Any], dims: Sequence[int]) -> GraphTensor:
    """For points shaped (B, ...), the first table row of each point's batch entry."""
    per_point = 1
    for d in points[1:]:
        per_point = per_point * d
    return graph.iota((var("z") // per_point) * math.prod(dims), tuple(points))


def _grid_sample(ctx: NodeContext) -> GraphTensor:
    x, grid = ctx.tensor(0), ctx.tensor(1).cast(float32)
    source = x.cast(float32)
    dims = [int(d.as_int()) for d in x.view.shape[2:]]
    rank = len(dims)
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.unsupported(f"mode={mode!r}")
    padding = ctx.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise ctx.unsupported(f"padding_mode={padding!r}")
    align = bool(ctx.attr("align_corners", 0))
    points = tuple(grid.view.shape[:-1])  # (N, *O)
    taps = []
    for axis, length in enumerate(dims):
        ranges: list[Any] = [None] * grid.ndim
        ranges[-1] = (rank - 1 - axis, rank - axis)  # the grid lists x (last axis) first
        g = grid.slice(ranges).reshape(points)
        coordinate = (g + 1.0) * (0.5 * (length - 1)) if align else ((g + 1.0) * length - 1.0) * 0.5
        taps.append(grid_taps(coordinate, length, mode, padding, align))
    out = gather_taps(source, _batch_rows(ctx.graph, points, dims), taps)  # (N, *O, C)
    return out.permute((0, out.ndim - 1, *range(1, out.ndim - 1))).cast(x.dtype)


def _roi_taps(v: GraphTensor, length: int) -> list[Tap]:
    """RoiAlign's bilinear taps along one axis (the reference's pre_calc): v clamped
    below at 0, the upper tap and the fraction collapse at the last index."""
    v = v.maximum(0.0)
    low = floor(v).minimum(length - 1.0)
    high = (low + 1.0).minimum(length - 1.0)
    fraction = select(low.ge(length - 1.0), v * 0.0, v - low)
    return [(low.cast(int32), 1.0 - fraction), (high.cast(int32), fraction)]


def _roi_align(ctx: NodeContext) -> GraphTensor:
    """Each roi's output bin averages (or maxes) a sampling_ratio^2 grid of bilinear
    samples; positions come from the rois tensor, so everything is elementwise."""
    x, rois = ctx.tensor(0), ctx.tensor(1).cast(float32)
    batch = ctx.tensor(2).cast(int32)
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise ctx.unsupported(
            "sampling_ratio=0 (the number of samples per bin would depend on each roi's "
            "size, a data-dependent shape)"
        )
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode={mode!r}")
    half = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    out_h, out_w = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    scale = float(ctx.attr("spatial_scale", 1.0))
    height, width = (int(d.as_int()) for d in x.view.shape[2:])
    count = rois.view.shape[0]

    def column(i: int) -> GraphTensor:
        return rois.slice([None, (i, i + 1)]).reshape((count, 1, 1)) * scale - (
            0.5 if half else 0.0
        )

    def positions(start: GraphTensor, end: GraphTensor, bins: int) -> GraphTensor:
        size = end - start if half else (end - start).maximum(1.0)
        step = size / float(bins)
        grid = ctx.graph.arange(bins).cast(float32).reshape((1, bins, 1))
        within = (ctx.graph.arange(ratio).cast(float32) + 0.5).reshape((1, 1, ratio))
        return start + grid * step + within * step / float(ratio)  # (R, bins, ratio)

    ys = positions(column(1), column(3), out_h).reshape((count, out_h, ratio, 1, 1))
    xs = positions(column(0), column(2), out_w).reshape((count, 1, 1, out_w, ratio))
    points = (count, out_h, ratio, out_w, ratio)
    ys, xs = ys.expand(points), xs.expand(points)
    inside = ys.ge(-1.0).cast(float32) * ys.le(float(height)).cast(float32)
    inside = inside * xs.ge(-1.0).cast(float32) * xs.le(float(width)).cast(float32)
    y_taps = [(i, w * inside) for i, w in _roi_taps(ys, height)]
    rows = batch.reshape((count, 1, 1, 1, 1)).expand(points) * (height * width)
    samples = gather_taps(x.cast(float32), rows, [y_taps, _roi_taps(xs, width)], mode)
    pooled = samples.max((2, 4)) if mode == "max" else samples.mean((2, 4))
    return pooled.permute((0, 3, 1, 2)).cast(x.dtype)  # (R, C, out_h, out_w)


def _deform_conv(ctx: NodeContext) -> GraphTensor:
    """Each kernel tap reads the input at its regular position plus a learned offset
    (bilinear, zeros outside), scaled by the mask; the taps then meet the weight in one
    matrix product per group, as an im2col convolution."""
    x, weight, offset = ctx.tensor(0), ctx.tensor(1).cast(float32), ctx.tensor(2)
    bias, mask = ctx.optional(3), ctx.optional(4)
    source = x.cast(float32)
    n, channels = x.view.shape[:2]
    dims = [int(d.as_int()) for d in x.view.shape[2:]]
    kernel = [int(d.as_int()) for d in weight.view.shape[2:]]
    out = [int(d.as_int()) for d in offset.view.shape[2:]]
    rank = len(dims)
    strides = list(ctx.attr("strides", [1] * rank))
    dilations = list(ctx.attr("dilations", [1] * rank))
    pads = list(ctx.attr("pads", [0] * 2 * rank))
    group, offset_group = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    points = (n, *kernel, *out)
    offset = offset.cast(float32).reshape((n, offset_group, *kernel, rank, *out))
    mask = None if mask is None else mask.cast(float32).reshape((n, offset_group, *kernel, *out))
    per_offset_group = int(channels.as_int()) // offset_group
    sampled = []
    for g in range(offset_group):
        taps = []
        for axis in range(rank):
            ranges: list[Any] = [None] * offset.ndim
            ranges[1] = (g, g + 1)
            ranges[2 + rank] = (axis, axis + 1)
            moved = offset.slice(ranges).reshape(points)
            shape = [1] * len(points)
            shape[1 + axis] = kernel[axis]
            tap = ctx.graph.arange(kernel[axis]).cast(float32) * float(dilations[axis])
            shape_o = [1] * len(points)
            shape_o[1 + rank + axis] = out[axis]
            position = ctx.graph.arange(out[axis]).cast(float32) * float(strides[axis])
            where = moved + tap.reshape(tuple(shape)) + position.reshape(tuple(shape_o))
            taps.append(grid_taps(where - float(pads[axis]), dims[axis], "linear", "zeros", True))
        ranges = [None, (g * per_offset_group, (g + 1) * per_offset_group)]
        part = source.slice(ranges + [None] * rank)
        values = gather_taps(part, _batch_rows(ctx.graph, points, dims), taps)
        if mask is not None:
            ranges = [None] * mask.ndim
            ranges[1] = (g, g + 1)
            values = values * mask.slice(ranges).reshape(points).unsqueeze(-1)
        sampled.append(values)
    columns = concat(sampled, -1) if len(sampled) > 1 else sampled[0]  # (N, *k, *O, C)
    order = (0, *range(1 + rank, 1 + 2 * rank), 1 + 2 * rank, *range(1, 1 + rank))
    columns = columns.permute(order)  # (N, *O, C, *k)
    per_group = int(weight.view.shape[1].as_int())
    taps_per_group = per_group * math.prod(kernel)
    columns = columns.reshape((-1, group, taps_per_group))
    out_channels = int(weight.view.shape[0].as_int())
    filters = weight.reshape((group, out_channels // group, taps_per_group))
    results = [
        columns.slice([None, (k, k + 1), None])
        .reshape((-1, taps_per_group))
        .matmul(filters.slice([(k, k + 1), None, None]).reshape((-1, taps_per_group)).T)
        for k in range(group)
    ]
    y = concat(results, 1) if group > 1 else results[0]  # (N * positions, out_channels)
    y = y.reshape((n, *out, out_channels)).permute((0, rank + 1, *range(1, rank + 1)))
    if bias is not None:
        y = y + bias.cast(float32).reshape((out_channels,) + (1,) * rank)
    return y.cast(x.dtype)


def _col2im(ctx: NodeContext) -> GraphTensor:
    """Columns (N, C * prod(block), L) summed back into an image: every column entry's
    place in the padded image is known at load, so this is one Scatter (index-add,
    overlaps accumulate) into the padded image, then the padding is sliced away."""
    x = ctx.tensor(0)
    image = [int(v) for v in ctx.static_ints(1, "image_shape")]
    block = [int(v) for v in ctx.static_ints(2, "block_shape")]
    rank = len(image)
    strides = list(ctx.attr("strides", [1] * rank))
    dilations = list(ctx.attr("dilations", [1] * rank))
    pads = list(ctx.attr("pads", [0] * 2 * rank))
    padded = [image[i] + pads[i] + pads[i + rank] for i in range(rank)]
    counts = [
        (padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(rank)
    ]
    if math.prod(counts) != x.view.shape[2].as_int():
        raise ctx.invalid(f"{x.view.shape[2]} columns, but the shapes give {counts}")
    k = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1).reshape(-1, rank)
    l = np.stack(np.meshgrid(*[np.arange(c) for c in counts], indexing="ij"), -1).reshape(-1, rank)
    where = k[:, None, :] * np.array(dilations) + l[None, :, :] * np.array(strides)
    rows = np.ravel_multi_index(tuple(where.reshape(-1, rank).T), padded).astype(np.int32)
    n = x.view.shape[0]
    channels = x.view.shape[1] // math.prod(block)
    updates = x.reshape((n, channels, math.prod(block), -1)).permute((2, 3, 0, 1))
    updates = updates.reshape((rows.shape[0], -1)).contiguous()
    base = ctx.graph.constant(0.0, x.dtype).expand((math.prod(padded), updates.view.shape[1]))
    summed = ctx.graph.add_node(
        ops.Scatter(), [base.contiguous(), ctx.lift(rows, f"{ctx.node.output[0]}_rows"), updates]
    )
    summed = summed.reshape((*padded, n, channels))
    summed = summed.slice([(pads[i], pads[i] + image[i]) for i in range(rank)] + [None, None])
    return summed.permute((rank, rank + 1, *range(rank)))


RULES: dict[str, Rule] = {
    "Col2Im": _col2im,
    "GridSample": _grid_sample,
    "RoiAlign": _roi_align,
    "DeformConv": _deform_conv,
}

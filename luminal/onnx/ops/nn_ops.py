"""Convolutions, pools and normalisations, on luminal's conv/pooling building blocks.

ONNX pads may differ at the two ends of a dim (and SAME_* auto_pad computes them), so
the input is padded here and luminal's `conv` / `sliding_windows` run unpadded."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from luminal.dtype import float32
from luminal.hl.combine import concat
from luminal.nn.conv import conv, sliding_windows
from luminal.nn.pooling import relu_input
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import as_float, axis_of, reverse
from luminal.onnx.ops.pool_index import max_pool_indices
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _spatial(ctx: NodeContext, x: GraphTensor, kernel: list[int]) -> tuple[list, list, list]:
    """(strides, dilations, (begin, end) pads) for x's spatial dims, auto_pad applied."""
    dims = len(kernel)
    strides = list(ctx.attr("strides", [1] * dims))
    dilations = list(ctx.attr("dilations", [1] * dims))
    pads = list(ctx.attr("pads", [0] * (2 * dims)))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    pairs = [(pads[i], pads[i + dims]) for i in range(dims)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for i in range(dims):
            size = x.view.shape[x.ndim - dims + i].as_int()
            if size is None:
                raise ctx.unsupported("auto_pad SAME over a symbolic spatial dim")
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, large = total // 2, total - total // 2
            pairs.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
    elif auto_pad == "VALID":
        pairs = [(0, 0)] * dims
    return strides, dilations, pairs


def _pad_spatial(x: GraphTensor, pairs: list, value: float = 0.0) -> GraphTensor:
    if all(p == (0, 0) for p in pairs):
        return x
    return x.pad([None] * (x.ndim - len(pairs)) + [tuple(p) for p in pairs], value)


def _conv(ctx: NodeContext) -> GraphTensor:
    return conv_node(ctx, ctx.tensor(0), ctx.tensor(1), ctx.optional(2))


def conv_node(
    ctx: NodeContext, x: GraphTensor, weight: GraphTensor, bias: GraphTensor | None
) -> GraphTensor:
    """Conv with the node's attributes (pads, strides, dilations, group, auto_pad)."""
    kernel = [int(d.as_int()) for d in weight.view.shape[2:]]
    strides, dilations, pairs = _spatial(ctx, x, kernel)
    x = _pad_spatial(x, pairs)
    return conv(x, weight, bias, strides, 0, dilations, ctx.attr("group", 1), op="Conv")


def _dilate(x: GraphTensor, axis: int, stride: int) -> GraphTensor:
    """Insert stride - 1 zeros between elements along `axis` (transposed convolution)."""
    if stride == 1:
        return x
    n = x.view.shape[axis]
    spread = x.unsqueeze(axis + 1)
    padding: list[Any] = [None] * spread.ndim
    padding[axis + 1] = (0, stride - 1)
    spread = spread.pad(padding)
    shape = list(x.view.shape)
    shape[axis] = n * stride
    flat = spread.reshape(tuple(shape))
    ranges: list[Any] = [None] * flat.ndim
    ranges[axis] = (0, (n - 1) * stride + 1)
    return flat.slice(ranges)


def _conv_transpose(ctx: NodeContext) -> GraphTensor:
    x, weight = ctx.tensor(0), ctx.tensor(1)
    bias = ctx.optional(2)
    group = ctx.attr("group", 1)
    kernel = [int(d.as_int()) for d in weight.view.shape[2:]]
    dims = len(kernel)
    strides = list(ctx.attr("strides", [1] * dims))
    dilations = list(ctx.attr("dilations", [1] * dims))
    out_pad = list(ctx.attr("output_padding", [0] * dims))
    pads = list(ctx.attr("pads", [0] * (2 * dims)))
    output_shape = ctx.attr("output_shape")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    sizes = [x.view.shape[2 + i].as_int() for i in range(dims)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = (
            list(output_shape)[-dims:]
            if output_shape is not None
            else [sizes[i] * strides[i] for i in range(dims)]
        )
        for i in range(dims):
            total = (
                strides[i] * (sizes[i] - 1)
                + out_pad[i]
                + (kernel[i] - 1) * dilations[i]
                + 1
                - target[i]
            )
            half = total // 2
            if auto_pad == "SAME_UPPER":
                pads[i], pads[i + dims] = half, total - half
            else:
                pads[i], pads[i + dims] = total - half, half
    for i in range(dims):
        x = _dilate(x, 2 + i, strides[i])
    pairs = []
    for i in range(dims):
        reach = (kernel[i] - 1) * dilations[i]
        pairs.append((reach - pads[i], reach - pads[i + dims] + out_pad[i]))
    for i, (before, after) in enumerate(pairs):
        axis = 2 + i
        n = x.view.shape[axis]
        ranges: list[Any] = [None] * x.ndim
        ranges[axis] = (max(-before, 0), n - max(-after, 0))
        x = x.slice(ranges)
        padding: list[Any] = [None] * x.ndim
        padding[axis] = (max(before, 0), max(after, 0))
        x = x.pad(padding)
    channels, per_group = (int(d.as_int()) for d in weight.view.shape[:2])
    flipped = weight
    for i in range(dims):
        flipped = reverse(flipped, 2 + i)
    flipped = flipped.reshape((group, channels // group, per_group, *kernel))
    flipped = flipped.permute((0, 2, 1, *range(3, 3 + dims)))
    flipped = flipped.reshape((group * per_group, channels // group, *kernel))
    return conv(x, flipped, bias, 1, 0, dilations, group, op="ConvTranspose")


# ---------------------------------------------------------------- pools
def _pool_setup(ctx: NodeContext, x: GraphTensor) -> tuple:
    kernel = list(ctx.attr("kernel_shape"))
    strides, dilations, pairs = _spatial(ctx, x, kernel)
    extra = [0] * len(kernel)
    if ctx.attr("ceil_mode", 0):
        for i, (k, s, d, (pb, pe)) in enumerate(
            zip(kernel, strides, dilations, pairs, strict=True)
        ):
            size = x.view.shape[x.ndim - len(kernel) + i].as_int()
            span = size + pb + pe - d * (k - 1) - 1
            out = -(-span // s) + 1
            if (out - 1) * s >= size + pb:
                out -= 1
            extra[i] = max(0, (out - 1) * s + d * (k - 1) + 1 - (size + pb + pe))
    return kernel, strides, dilations, pairs, extra


def _max_pool(ctx: NodeContext) -> GraphTensor | list[GraphTensor]:
    x = ctx.tensor(0)
    kernel, strides, dilations, pairs, extra = _pool_setup(ctx, x)
    full = [(b, e + x_) for (b, e), x_ in zip(pairs, extra, strict=True)]
    geometry = (kernel, strides, dilations, full)
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        indices = max_pool_indices(ctx, x, kernel, strides, dilations, full)
        return [_windows_max(x, *geometry), indices]
    inner = relu_input(x)  # relu(max(y, 0-padding)): see luminal.nn.pooling.relu_input
    return (
        _windows_max(x, *geometry) if inner is None else _windows_max(inner, *geometry, 0.0).relu()
    )


def _windows_max(
    x: GraphTensor,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    full: list[tuple[int, int]],
    fill: float = -math.inf,
) -> GraphTensor:
    """Max over the pooling windows of x, its padding (`full`, extra included) reading
    `fill`."""
    source = x if x.dtype.is_float else x.cast(float32)
    windows = sliding_windows(source, kernel, strides, dilations, full, fill)
    return windows.max(tuple(range(x.ndim, x.ndim + len(kernel)))).cast(x.dtype)


def _average_pool(ctx: NodeContext) -> GraphTensor:
    x = as_float(ctx.tensor(0))
    kernel, strides, dilations, pairs, extra = _pool_setup(ctx, x)
    dims = len(kernel)
    axes = tuple(range(x.ndim, x.ndim + dims))
    full = [(b, e + x_) for (b, e), x_ in zip(pairs, extra, strict=True)]
    sums = sliding_windows(x, kernel, strides, dilations, full).sum(axes)
    include = ctx.attr("count_include_pad", 0)
    if not any(extra) and (include or all(p == (0, 0) for p in pairs)):
        return sums / float(math.prod(kernel))
    ones = x.graph.constant(1.0, x.dtype).expand(x.view.shape)
    if include:
        ones = _pad_spatial(ones, pairs, 1.0)
        full = [(0, x_) for x_ in extra]
    counts = sliding_windows(ones, kernel, strides, dilations, full).sum(axes)
    return sums / counts


def _lp_pool(ctx: NodeContext) -> GraphTensor:
    x = as_float(ctx.tensor(0))
    p = ctx.attr("p", 2)
    kernel, strides, dilations, pairs, extra = _pool_setup(ctx, x)
    full = [(b, e + x_) for (b, e), x_ in zip(pairs, extra, strict=True)]
    windows = sliding_windows(x.abs().pow(p), kernel, strides, dilations, full)
    return windows.sum(tuple(range(x.ndim, x.ndim + len(kernel)))).pow(1.0 / p)


def _global(kind: str) -> Rule:
    def rule(ctx: NodeContext) -> GraphTensor:
        x = ctx.tensor(0)
        axes = tuple(range(2, x.ndim))
        if kind == "max":
            return x.max(axes, keepdim=True)
        if kind == "lp":
            p = ctx.attr("p", 2)
            return x.abs().pow(p).sum(axes, keepdim=True).pow(1.0 / p)
        return x.mean(axes, keepdim=True)

    return rule


# ---------------------------------------------------------------- normalisations
def _channel(t: GraphTensor, rank: int) -> GraphTensor:
    """A per-channel (C,) parameter shaped to broadcast over (N, C, *spatial)."""
    return t.reshape((t.view.shape[0],) + (1,) * (rank - 2))


def _batch_norm(ctx: NodeContext) -> list[GraphTensor]:
    x, scale, bias, mean, var = (ctx.tensor(i) for i in range(5))
    eps = ctx.attr("epsilon", 1e-5)
    rank = x.ndim
    training = ctx.attr("training_mode", 0) or (
        ctx.opset < 14 and len(ctx.node.output) > 1 and any(ctx.node.output[1:])
    )
    if not training:
        inv = (_channel(var, rank) + eps).sqrt().reciprocal()
        return [(x - _channel(mean, rank)) * inv * _channel(scale, rank) + _channel(bias, rank)]
    axes = (0, *range(2, rank))
    batch_mean = x.mean(axes)
    centered = x - _channel(batch_mean, rank)
    batch_var = (centered * centered).mean(axes)
    y = centered * (_channel(batch_var, rank) + eps).sqrt().reciprocal() * _channel(scale, rank)
    y = y + _channel(bias, rank)
    momentum = ctx.attr("momentum", 0.9)
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_var = var * momentum + batch_var * (1 - momentum)
    return [y, running_mean, running_var]


def _layer_norm(ctx: NodeContext) -> list[GraphTensor]:
    x = ctx.tensor(0)
    scale, bias = ctx.tensor(1), ctx.optional(2)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    eps = ctx.attr("epsilon", 1e-5)
    source = as_float(x)
    axes = tuple(range(axis, x.ndim))
    mean = source.mean(axes, keepdim=True)
    centered = source - mean
    inv_std = ((centered * centered).mean(axes, keepdim=True) + eps).sqrt().reciprocal()
    y = centered * inv_std * scale
    if bias is not None:
        y = y + bias
    return [y.cast(x.dtype), mean, inv_std]


def _group_norm(ctx: NodeContext) -> GraphTensor:
    x, scale, bias = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    groups = ctx.attr("num_groups")
    eps = ctx.attr("epsilon", 1e-5)
    n, c = x.view.shape[:2]
    rest = tuple(x.view.shape[2:])
    grouped = as_float(x).reshape((n, groups, -1))
    normalized = grouped.layer_norm(-1, eps).reshape((n, c, *rest))
    if ctx.opset < 21 and scale.view.shape[0] != c:  # per-group parameters (opset 18)
        per = c // groups
        scale = scale.reshape((groups, 1)).expand((groups, per)).reshape((c,))
        bias = bias.reshape((groups, 1)).expand((groups, per)).reshape((c,))
    return (normalized * _channel(scale, x.ndim) + _channel(bias, x.ndim)).cast(x.dtype)


def _instance_norm(ctx: NodeContext) -> GraphTensor:
    x, scale, bias = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    eps = ctx.attr("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    normalized = as_float(x).layer_norm(axes, eps)
    return (normalized * _channel(scale, x.ndim) + _channel(bias, x.ndim)).cast(x.dtype)


def _rms_norm(ctx: NodeContext) -> GraphTensor:
    x, scale = ctx.tensor(0), ctx.tensor(1)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    eps = ctx.attr("epsilon", 1e-5)
    source = as_float(x)
    axes = tuple(range(axis, x.ndim))
    return (source.std_norm(axes, eps) * scale).cast(x.dtype)


def _lp_norm(ctx: NodeContext) -> GraphTensor:
    x = as_float(ctx.tensor(0))
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    zero = norm.eq(0)
    return x * (norm + zero).reciprocal() * (1 - zero)


def _lrn(ctx: NodeContext) -> GraphTensor:
    x = as_float(ctx.tensor(0))
    size = ctx.attr("size")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    squares = (x * x).transpose(1, -1)
    padded = squares.pad([None] * (x.ndim - 1) + [((size - 1) // 2, size // 2)])
    window = padded.pool_last_dim(size).sum(-1).transpose(1, -1)
    return x * ((window * (alpha / size) + bias).pow(-beta))


RULES: dict[str, Rule] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "LpPool": _lp_pool,
    "GlobalAveragePool": _global("mean"),
    "GlobalMaxPool": _global("max"),
    "GlobalLpPool": _global("lp"),
    "BatchNormalization": _batch_norm,
    "LayerNormalization": _layer_norm,
    "GroupNormalization": _group_norm,
    "InstanceNormalization": _instance_norm,
    "RMSNormalization": _rms_norm,
    "LpNormalization": _lp_norm,
    "LRN": _lrn,
}
_ = concat

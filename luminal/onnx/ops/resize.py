"""Resize and Upsample, one axis at a time.

Interpolation is separable, and the output size, scales and roi are known at load, so
the source taps and their weights along each resized axis are computed here in numpy,
following ONNX's reference (`onnx.reference.ops.op_resize`) step for step. In the
graph an axis costs one gather of its taps (edge-clamped indices, shape (out, taps))
and one weighted sum over the taps; nearest needs only the gather (exact, whatever
the values, NaN and inf included).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import select, take
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
Coefficients = Callable[[float, float], np.ndarray]


# ---------------------------------------------------------------- taps (numpy, at load)
def _nearest(nearest_mode: str) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if nearest_mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if nearest_mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if nearest_mode == "floor":
            return np.array([1.0, 0.0])
        if nearest_mode == "ceil":
            return np.array([0.0, 1.0])
        raise ValueError(f"nearest_mode {nearest_mode!r}")

    return coefficients


def _linear(antialias: bool) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        weights = np.clip(1 - np.abs(args), 0, 1)
        return weights / weights.sum()

    return coefficients


def _cubic(a: float, antialias: bool) -> Coefficients:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([kernel(d) for d in (ratio + 1, ratio, 1 - ratio, 2 - ratio)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        weights = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return weights / weights.sum()

    return coefficients


def _source_positions(
    mode: str, out_size: int, in_size: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each output index's position in the input (coordinate_transformation_mode), and
    for tf_crop_and_resize which positions fall outside it."""
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        span = roi[1] - roi[0]
        x = (
            np.full(out_size, span * (in_size - 1) / 2)
            if width == 1
            else y * span * (in_size - 1) / (width - 1)
        )
        x = x + roi[0] * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"coordinate_transformation_mode {mode!r}")
    return x, outside


def axis_taps(
    coefficients: Coefficients,
    transform: str,
    in_size: int,
    out_size: int,
    scale: float,
    roi: tuple[float, float],
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(indices (out, taps) clamped into the input, weights (out, taps), outside mask)
    for one axis, as the reference's _interpolate_1d_along_axis computes them."""
    x, outside = _source_positions(transform, out_size, in_size, scale, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    weights = np.stack([np.asarray(coefficients(float(r), scale), np.float64) for r in ratios])
    taps = weights.shape[1]
    pad = math.ceil(taps / 2)
    padded = x + pad
    base = np.floor(padded).astype(np.int64)
    fraction = padded - base
    if taps % 2 == 0:
        offset = np.where(fraction == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        low = -((taps - 1) // 2)
        offset = np.where(fraction <= 0.5, low, low + 1)
    indices = (base + offset)[:, None] + np.arange(taps)[None, :] - pad
    if exclude_outside:
        weights = np.where((indices < 0) | (indices >= in_size), 0.0, weights)
        total = weights.sum(-1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(indices, 0, in_size - 1).astype(np.int32), weights, outside


# ---------------------------------------------------------------- sizes
def _plan(ctx: NodeContext, x: GraphTensor) -> tuple[list[int], list[float], list[int], list]:
    """(resized axes, scale per axis, output size per axis, roi pair per axis)."""
    rank = x.ndim
    shape = [int(d.as_int()) for d in x.view.shape]
    axes = [a % rank for a in (ctx.attr("axes") or range(rank))]
    if ctx.node.op_type == "Upsample" or ctx.opset < 11:
        scales = _upsample_scales(ctx)
        sizes = [int(math.floor(s * n)) for s, n in zip(scales, shape, strict=True)]
        return list(range(rank)), scales, sizes, [(0.0, 1.0)] * rank
    scales = [1.0] * rank
    sizes = list(shape)
    if ctx.has(3) and ctx.static(3, "sizes").size:
        wanted = [int(v) for v in ctx.static(3, "sizes").reshape(-1)]
        ratios = [wanted[i] / shape[a] for i, a in enumerate(axes)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for i, a in enumerate(axes):
                scales[a], sizes[a] = ratios[i], wanted[i]
        else:
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                scales[a], sizes[a] = common, int(common * shape[a] + 0.5)
    elif ctx.has(2) and ctx.static(2, "scales").size:
        given = [float(v) for v in ctx.static(2, "scales").reshape(-1)]
        for i, a in enumerate(axes):
            scales[a], sizes[a] = given[i], int(given[i] * shape[a])
    else:
        raise ctx.invalid("one of scales and sizes is required")
    rois = [(0.0, 1.0)] * rank
    if ctx.has(1) and ctx.static(1, "roi").size:
        roi = [float(v) for v in ctx.static(1, "roi").reshape(-1)]
        for i, a in enumerate(axes):
            rois[a] = (roi[i], roi[len(axes) + i])
    return axes, scales, sizes, rois


def _upsample_scales(ctx: NodeContext) -> list[float]:
    if ctx.attr("scales") is not None:
        return [float(s) for s in ctx.attr("scales")]
    return [float(s) for s in ctx.static(1, "scales").reshape(-1)]


def _coefficients(ctx: NodeContext, mode: str) -> tuple[Coefficients, str]:
    """The tap weights for `mode` and the coordinate transformation (Upsample and
    Resize-10 are asymmetric, nearest rounding down)."""
    legacy = ctx.node.op_type == "Upsample" or ctx.opset < 11
    transform = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    antialias = bool(ctx.attr("antialias", 0))
    if mode == "nearest":
        return _nearest("floor" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")), (
            transform
        )
    if mode in ("linear", "bilinear", "trilinear"):
        return _linear(antialias), transform
    if mode in ("cubic", "bicubic"):
        return _cubic(float(ctx.attr("cubic_coeff_a", -0.75)), antialias), transform
    raise ctx.unsupported(f"mode {mode!r}")


# ---------------------------------------------------------------- graph
def _resize_axis(
    ctx: NodeContext,
    x: GraphTensor,
    axis: int,
    indices: np.ndarray,
    weights: np.ndarray,
) -> GraphTensor:
    chosen = np.abs(weights - 1.0) < 1e-12
    if np.all(chosen.sum(-1) == 1) and np.all((weights == 0) | chosen):
        picked = indices[np.arange(len(indices)), chosen.argmax(-1)].astype(np.int32)
        return take(x, ctx.lift(picked, f"{ctx.node.output[0]}_rows{axis}"), axis)
    rows = take(x, ctx.lift(indices, f"{ctx.node.output[0]}_taps{axis}"), axis)
    shape = (*weights.shape, *([1] * (x.ndim - axis - 1)))
    coefficients = ctx.lift(weights.astype(np.float32).reshape(shape), f"{ctx.node.output[0]}_w")
    return (rows * coefficients.cast(rows.dtype)).sum(axis + 1)


def _resize(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "nearest")
    coefficients, transform = _coefficients(ctx, mode)
    axes, scales, sizes, rois = _plan(ctx, x)
    source = x if (mode == "nearest" or x.dtype.is_float) else x.cast("float32")
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))
    for axis in axes:
        n = int(source.view.shape[axis].as_int())
        identity = math.isclose(scales[axis], 1.0) and sizes[axis] == n
        if identity and rois[axis] == (0.0, 1.0):
            continue
        indices, weights, outside = axis_taps(
            coefficients,
            transform,
            n,
            sizes[axis],
            scales[axis],
            rois[axis],
            bool(ctx.attr("exclude_outside", 0)),
        )
        source = _resize_axis(ctx, source, axis, indices, weights)
        if outside is not None and outside.any():
            shape = [1] * source.ndim
            shape[axis] = sizes[axis]
            mask = ctx.lift(outside.reshape(shape), f"{ctx.node.output[0]}_outside{axis}")
            fill = ctx.graph.constant(extrapolation, source.dtype)
            source = select(mask, fill, source)
    return source if source.dtype == x.dtype else _round_back(source, x)


def _round_back(value: GraphTensor, like: GraphTensor) -> GraphTensor:
    """An integer input's interpolated values, rounded to nearest as the reference's
    saturate_cast does, in the input's dtype."""
    from luminal.onnx.ops.common import round_half_even

    return round_half_even(value).cast(like.dtype)


RULES: dict[str, Rule] = {"Resize": _resize, "Upsample": _resize}

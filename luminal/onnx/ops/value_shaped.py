"""Ops whose output shape depends on input values (NonZero, Unique,
NonMaxSuppression) and seeded training-mode Dropout.

A luminal graph's shapes follow from its inputs' shapes, never from their values, so
these ops are computed when the model loads, from inputs known then (constants,
initializers, or graph inputs passed with `load(..., constants=...)`). The backend does
that by itself: it re-imports the model with such inputs as constants, once per distinct
value. Given a run-time value, `ctx.static` raises `NeedsConstantInput` naming the input.
"""

from __future__ import annotations

import numpy as np

from luminal.dtype import bool_
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import full
from luminal.shape.expr import Expr
from luminal.tensor import GraphTensor


def _nonzero(ctx: NodeContext) -> np.ndarray:
    x = np.asarray(ctx.static(0, "data (NonZero's output size depends on it)"))
    return np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64)[: x.ndim]


def _unique(ctx: NodeContext) -> list[np.ndarray]:
    """Y, indices (first occurrence), inverse_indices and counts, sorted or in order of
    first occurrence; along `axis` the unique items are slices."""
    x = np.asarray(ctx.static(0, "X (Unique's output size depends on it)"))
    axis = ctx.attr("axis")
    if axis is not None:
        axis = int(axis) % x.ndim
    flat = x if axis is not None else x.reshape(-1)
    y, first, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=axis or 0)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [y, *(a.astype(np.int64) for a in (first, inverse, counts))]


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """(n, 4) boxes as (y_min, x_min, y_max, x_max), from corners given in either order
    or (center_point_box=1) as (x_center, y_center, width, height)."""
    if center:
        x, y, w, h = boxes.T
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    low = [np.minimum(y1, y2), np.minimum(x1, x2)]
    return np.stack([*low, np.maximum(y1, y2), np.maximum(x1, x2)], axis=1)


def _suppresses(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    """Whether box `b` overlaps `a` by an IoU above the threshold (onnxruntime's test:
    no overlap, an empty box or an empty union never suppresses)."""
    height = min(a[2], b[2]) - max(a[0], b[0])
    width = min(a[3], b[3]) - max(a[1], b[1])
    if height <= 0 or width <= 0:
        return False
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    if area_a <= 0 or area_b <= 0:
        return False
    inter = height * width
    union = area_a + area_b - inter
    return bool(union > 0 and inter / union > threshold)


def _scalar(ctx: NodeContext, index: int, what: str, default: float) -> float:
    if not ctx.has(index):
        return default
    return float(np.asarray(ctx.static(index, what)).reshape(-1)[0])


def _nms(ctx: NodeContext) -> np.ndarray:
    """Greedy per (batch, class): highest score first (the lower index on ties), a box
    kept unless it overlaps a kept one by more than iou_threshold."""
    boxes = np.asarray(ctx.static(0, "boxes"), dtype=np.float64)
    scores = np.asarray(ctx.static(1, "scores"), dtype=np.float64)
    limit = int(_scalar(ctx, 2, "max_output_boxes_per_class", 0))
    iou = _scalar(ctx, 3, "iou_threshold", 0.0)
    floor = _scalar(ctx, 4, "score_threshold", -np.inf)
    selected: list[tuple[int, int, int]] = []
    for batch in range(scores.shape[0]):
        corners = _corners(boxes[batch], bool(ctx.attr("center_point_box", 0)))
        for cls in range(scores.shape[1]):
            row = scores[batch, cls]
            kept: list[int] = []
            for box in np.argsort(-row, kind="stable"):
                if len(kept) >= limit or row[box] <= floor:
                    break
                if not any(_suppresses(corners[k], corners[box], iou) for k in kept):
                    kept.append(int(box))
            selected += [(batch, cls, k) for k in kept]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


def _dropout(ctx: NodeContext) -> list[GraphTensor]:
    """Inference Dropout is the identity. In training mode ONNX's seeded op draws its
    keep mask as numpy's RandomState(seed).uniform(0, 1, shape) >= ratio at every run, a
    function of the seed, the shape and the ratio: fixed at load, the same at every run
    (as the reference reseeds). Unseeded training Dropout would need fresh masks."""
    training = ctx.has(2) and bool(np.asarray(ctx.static(2, "training_mode")).reshape(-1)[0])
    ratio = _scalar(ctx, 1, "ratio", 0.5)
    x = ctx.tensor(0)
    if not training or ratio == 0:
        return [x, full(ctx.graph, True, x.view.shape, bool_)]
    if ctx.attr("seed") is None:
        raise ctx.unsupported("Dropout in training mode without a seed (fresh random masks)")
    shape = [d.as_int() if isinstance(d, Expr) else int(d) for d in x.view.shape]
    if None in shape:
        raise ctx.unsupported("seeded training Dropout needs a known input shape")
    keep = np.random.RandomState(int(ctx.attr("seed"))).uniform(0, 1.0, tuple(shape)) >= ratio
    scale = np.float32(1 / (1 - ratio)) if ratio < 1 else np.float32(0)
    y = x * ctx.lift(keep.astype(np.float32), "dropout_mask") * float(scale)
    return [y, ctx.lift(keep, "dropout_keep")]


RULES = {
    "NonZero": _nonzero,
    "Unique": _unique,
    "NonMaxSuppression": _nms,
    "Dropout": _dropout,
}

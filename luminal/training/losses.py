"""Loss functions as graph ops, with torch.nn.functional's names, formulas and reductions.

Every loss takes `reduction="mean" | "sum" | "none"` (kl_div also "batchmean"). Class
scores follow torch's layout: (N, C), (N, C, d1, ...) with classes on axis 1, or (C,).
Integer (int32) targets are class indices, float targets are probabilities. There is no
select primitive, so branches (Huber, ignored targets, log 0) are blended with 0/1 masks
built so that the unused branch stays finite. See docs/training.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from luminal.dtype import float32
from luminal.errors import DTypeError, LuminalError, ShapeError, format_shape

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

REDUCTIONS = ("mean", "sum", "none")
LossFn = TypeVar("LossFn", bound=Callable[..., Any])


def _atomic(loss: LossFn) -> LossFn:
    """All or nothing: a loss that raises leaves no nodes behind."""

    @functools.wraps(loss)
    def wrapper(input: GraphTensor, *args: Any, **kwargs: Any) -> Any:
        with input.graph.atomic():
            return loss(input, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------- plumbing
def _reduce(loss: GraphTensor, reduction: str, name: str) -> GraphTensor:
    if reduction == "mean":
        return loss.mean() if loss.ndim else loss
    if reduction == "sum":
        return loss.sum() if loss.ndim else loss
    if reduction == "none":
        return loss
    raise LuminalError(f"{name}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


def _check_reduction(reduction: str, name: str, extra: tuple[str, ...] = ()) -> None:
    if reduction not in REDUCTIONS + extra:
        raise LuminalError(
            f"{name}: reduction must be one of {REDUCTIONS + extra}, got {reduction!r}"
        )


def _pair(input: GraphTensor, target: GraphTensor, name: str) -> tuple[GraphTensor, GraphTensor]:
    """Both as float32, of the same shape (ShapeError naming the loss otherwise)."""
    if tuple(input.view.shape) != tuple(target.view.shape):
        raise ShapeError(
            f"{name}: input of shape {format_shape(input.view.shape)} and target of shape "
            f"{format_shape(target.view.shape)} must have the same shape"
        )
    return input.cast(float32), target.cast(float32)


def _as_tensor(graph: Any, value: Any, name: str) -> GraphTensor:
    """A weight given as a GraphTensor, or as data (a list or array) made a graph input."""
    from luminal.tensor import GraphTensor

    if isinstance(value, GraphTensor):
        return value.cast(float32)
    array = np.asarray(value, dtype=np.float32)
    return graph.tensor(array.shape, dtype=float32, name=name).set(array)


def _class_axis(input: GraphTensor, name: str) -> int:
    if input.ndim == 0:
        raise ShapeError(f"{name}: input must have a class dim, got a scalar")
    return 1 if input.ndim >= 2 else 0


def _along(vector: GraphTensor, ndim: int, axis: int) -> GraphTensor:
    """A (C,) vector shaped to broadcast along `axis` of an `ndim`-dim tensor."""
    shape = [1] * ndim
    shape[axis] = vector.view.shape[0]
    return vector.reshape(shape)


def _one_hot(input: GraphTensor, target: GraphTensor, axis: int, name: str) -> GraphTensor:
    """0/1 float32, input's shape: 1 where the class on `axis` equals the target. An
    index outside [0, C) (ignore_index=-100) selects nothing."""
    expected = tuple(d for i, d in enumerate(input.view.shape) if i != axis)
    if tuple(target.view.shape) != expected:
        raise ShapeError(
            f"{name}: class-index target of shape {format_shape(target.view.shape)} does not "
            f"fit input of shape {format_shape(input.view.shape)} (expected "
            f"{format_shape(expected)})"
        )
    classes = _along(input.graph.arange(input.view.shape[axis]), input.ndim, axis)
    return target.unsqueeze(axis).eq(classes).cast(float32)


def _is_index_target(target: GraphTensor, name: str) -> bool:
    if target.dtype.is_float:
        return False
    if target.dtype.value in ("int32",):
        return True
    raise DTypeError(f"{name}: target must be int32 class indices or float probabilities")


# ---------------------------------------------------------------- regression
@_atomic
def mse_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean squared error (torch.nn.functional.mse_loss)."""
    x, y = _pair(input, target, "mse_loss")
    diff = x - y
    return _reduce(diff * diff, reduction, "mse_loss")


@_atomic
def rmse_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """sqrt(mse_loss(input, target, reduction)); with "none", |input - target|."""
    return mse_loss(input, target, reduction).sqrt()


@_atomic
def l1_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean absolute error (torch.nn.functional.l1_loss)."""
    x, y = _pair(input, target, "l1_loss")
    return _reduce((x - y).abs(), reduction, "l1_loss")


@_atomic
def huber_loss(
    input: GraphTensor, target: GraphTensor, reduction: str = "mean", delta: float = 1.0
) -> GraphTensor:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), as one expression:
    with c = min(|d|, delta), 0.5 c^2 + delta (|d| - c)."""
    if delta <= 0:
        raise LuminalError(f"huber_loss: delta must be positive, got {delta}")
    x, y = _pair(input, target, "huber_loss")
    magnitude = (x - y).abs()
    inner = magnitude.minimum(delta)
    loss = inner * inner * 0.5 + (magnitude - inner) * delta
    return _reduce(loss, reduction, "huber_loss")


@_atomic
def smooth_l1_loss(
    input: GraphTensor, target: GraphTensor, reduction: str = "mean", beta: float = 1.0
) -> GraphTensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (huber_loss / beta); beta=0
    is the L1 loss, as in torch."""
    if beta < 0:
        raise LuminalError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    if beta == 0:
        return l1_loss(input, target, reduction)
    x, y = _pair(input, target, "smooth_l1_loss")
    magnitude = (x - y).abs()
    inner = magnitude.minimum(beta)
    loss = inner * inner * (0.5 / beta) + (magnitude - inner)
    return _reduce(loss, reduction, "smooth_l1_loss")


# ---------------------------------------------------------------- classification
@_atomic
def cross_entropy(
    input: GraphTensor,
    target: GraphTensor,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> GraphTensor:
    """torch.nn.functional.cross_entropy on logits: int32 class indices (with
    ignore_index and per-class `weight`; "mean" divides by the total weight of the
    counted targets) or float class probabilities (same shape as input); label smoothing
    mixes in the uniform distribution exactly as torch does."""
    name = "cross_entropy"
    _check_reduction(reduction, name)
    if not 0.0 <= label_smoothing <= 1.0:
        raise LuminalError(f"{name}: label_smoothing must be in [0, 1], got {label_smoothing}")
    axis = _class_axis(input, name)
    classes = input.view.shape[axis]
    logp = input.cast(float32).log_softmax(axis)
    w = (
        None
        if weight is None
        else _along(_as_tensor(input.graph, weight, "weight"), logp.ndim, axis)
    )
    if not _is_index_target(target, name):
        probs = _pair(input, target, name)[1]
        if label_smoothing > 0:
            probs = probs * (1.0 - label_smoothing) + _scalar_div(input, label_smoothing, classes)
        terms = logp * probs if w is None else logp * probs * w
        per_item = -terms.sum(axis)
        if reduction == "mean":
            return per_item.mean() if per_item.ndim else per_item
        return _reduce(per_item, reduction, name)
    hot = _one_hot(logp, target, axis, name)
    kept = target.ne(ignore_index).cast(float32)
    weight_t = kept if w is None else (hot * w).sum(axis) * kept
    nll = -(logp * hot).sum(axis) * weight_t
    denominator = weight_t.sum() if weight_t.ndim else weight_t
    loss = _reduce_weighted(nll, reduction, denominator)
    if label_smoothing <= 0:
        return loss
    smooth = -(logp if w is None else logp * w).sum(axis) * kept
    smooth = _reduce_weighted(smooth, reduction, denominator)
    return loss * (1.0 - label_smoothing) + smooth * _scalar_div(input, label_smoothing, classes)


def _reduce_weighted(loss: GraphTensor, reduction: str, denominator: GraphTensor) -> GraphTensor:
    if reduction == "none":
        return loss
    total = loss.sum() if loss.ndim else loss
    return total / denominator if reduction == "mean" else total


def _scalar_div(input: GraphTensor, value: float, count: Any) -> Any:
    """value / count for a class count that may be symbolic."""
    known = count.as_int()
    if known is not None:
        return value / known
    return input.graph.constant(count, float32).reciprocal() * value


@_atomic
def kl_div(
    input: GraphTensor,
    target: GraphTensor,
    reduction: str = "mean",
    log_target: bool = False,
    axis: int = -1,
) -> GraphTensor:
    """torch.nn.functional.kl_div(log_softmax(input, axis), target): input holds logits,
    target probabilities (log-probabilities with log_target). Pointwise
    target (log target - log q), 0 where target is 0; "batchmean" divides the sum by
    the batch size (dim 0), "mean" by the element count, as in torch."""
    name = "kl_div"
    _check_reduction(reduction, name, ("batchmean",))
    logq, y = _pair(input, target, name)
    logq = logq.log_softmax(axis)
    # xlogy(y, y) as y log(y + [y == 0]): log 1 = 0 where y == 0, so 0 * finite
    pointwise = y.exp() * (y - logq) if log_target else y * (y + y.eq(0)).log() - y * logq
    if reduction == "batchmean":
        total = pointwise.sum()
        return total if pointwise.ndim == 0 else total / _count(pointwise, 0)
    return _reduce(pointwise, reduction, name)


def _count(tensor: GraphTensor, axis: int) -> Any:
    size = tensor.view.shape[axis]
    known = size.as_int()
    return float(known) if known is not None else tensor.graph.constant(size, float32)


@_atomic
def binary_cross_entropy_with_logits(
    input: GraphTensor,
    target: GraphTensor,
    weight: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> GraphTensor:
    """torch's stable form: (1 - y) x - (1 + (pos_weight - 1) y) log_sigmoid(x), with
    log_sigmoid(x) = min(x, 0) - log(1 + exp(-|x|)) (never exp of a large number)."""
    name = "binary_cross_entropy_with_logits"
    _check_reduction(reduction, name)
    x, y = _pair(input, target, name)
    log_sigmoid = x.minimum(0) - ((-x.abs()).exp() + 1.0).log()
    if pos_weight is not None:
        pw = (
            _as_tensor(x.graph, pos_weight, "pos_weight")
            if not _is_number(pos_weight)
            else pos_weight
        )
        log_sigmoid = log_sigmoid * ((pw - 1.0) * y + 1.0)
    loss = (1.0 - y) * x - log_sigmoid
    if weight is not None:
        loss = loss * (_as_tensor(x.graph, weight, "weight") if not _is_number(weight) else weight)
    return _reduce(loss, reduction, name)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@_atomic
def focal_loss(
    input: GraphTensor,
    target: GraphTensor,
    gamma: float = 2.0,
    alpha: float | Sequence[float] | GraphTensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> GraphTensor:
    """Multi-class focal loss (Lin et al.): -alpha_t (1 - p_t)^gamma log p_t with p_t the
    softmax probability of the target class (int32 indices, classes on axis 1). `alpha`
    is one factor or one per class; "mean" averages over the targets not ignored."""
    name = "focal_loss"
    _check_reduction(reduction, name)
    if gamma < 0:
        raise LuminalError(f"{name}: gamma must be non-negative, got {gamma}")
    if not _is_index_target(target, name):
        raise DTypeError(f"{name}: target must be int32 class indices")
    axis = _class_axis(input, name)
    logp = input.cast(float32).log_softmax(axis)
    hot = _one_hot(logp, target, axis, name)
    logp_t = (logp * hot).sum(axis)
    kept = target.ne(ignore_index).cast(float32)
    loss = -((1.0 - logp_t.exp()) ** gamma) * logp_t * kept
    if alpha is not None:
        if _is_number(alpha):
            loss = loss * float(alpha)  # type: ignore[arg-type]
        else:
            per_class = _along(_as_tensor(input.graph, alpha, "alpha"), logp.ndim, axis)
            loss = loss * (hot * per_class).sum(axis)
    if reduction == "mean":
        return _reduce_weighted(loss, reduction, kept.sum() if kept.ndim else kept)
    return _reduce(loss, reduction, name)


@_atomic
def sigmoid_focal_loss(
    input: GraphTensor,
    target: GraphTensor,
    alpha: float = 0.25,
    gamma: float = 2.0,
    reduction: str = "mean",
) -> GraphTensor:
    """Binary focal loss, torchvision.ops.sigmoid_focal_loss's formula: BCE-with-logits
    times (1 - p_t)^gamma, times alpha_t = alpha y + (1 - alpha)(1 - y) when alpha >= 0.
    (torchvision defaults to reduction="none"; here "mean", like the other losses.)"""
    name = "sigmoid_focal_loss"
    _check_reduction(reduction, name)
    x, y = _pair(input, target, name)
    p = x.sigmoid()
    ce = binary_cross_entropy_with_logits(x, y, reduction="none")
    p_t = p * y + (1.0 - p) * (1.0 - y)
    loss = ce * (1.0 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (y * alpha + (1.0 - y) * (1.0 - alpha))
    return _reduce(loss, reduction, name)


# the names the project's brief uses
mse = mse_loss
rmse = rmse_loss
mae = mae_loss = l1_loss
huber = huber_loss
smooth_l1 = smooth_l1_loss
binary_focal_loss = sigmoid_focal_loss

__all__ = [
    "binary_cross_entropy_with_logits",
    "binary_focal_loss",
    "cross_entropy",
    "focal_loss",
    "huber",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "mae",
    "mae_loss",
    "mse",
    "mse_loss",
    "rmse",
    "rmse_loss",
    "sigmoid_focal_loss",
    "smooth_l1",
    "smooth_l1_loss",
]

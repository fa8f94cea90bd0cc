"""Losses against torch.nn.functional (and torchvision's focal formula), every reduction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.training import losses

REDUCTIONS = ["mean", "sum", "none"]
ATOL = 1e-5


def run(fn, *arrays):
    cx = lm.Graph()
    tensors = [cx.tensor(a.shape, dtype=str(a.dtype)).set(a) for a in arrays]
    out = fn(*tensors).retrieve()
    cx.execute()
    return out.numpy()


def check(ours, theirs):
    expected = theirs.detach().numpy()
    assert ours.shape == expected.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 5)) * 3).astype(np.float32)
    y = rng.standard_normal((6, 5)).astype(np.float32)
    return x, y


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (losses.mse_loss, lambda a, b, r: F.mse_loss(a, b, reduction=r)),
        (losses.l1_loss, lambda a, b, r: F.l1_loss(a, b, reduction=r)),
        (losses.mae, lambda a, b, r: F.l1_loss(a, b, reduction=r)),
        (
            lambda a, b, r: losses.huber_loss(a, b, r),
            lambda a, b, r: F.huber_loss(a, b, reduction=r),
        ),
        (
            lambda a, b, r: losses.huber_loss(a, b, r, delta=0.4),
            lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=0.4),
        ),
        (
            lambda a, b, r: losses.smooth_l1_loss(a, b, r, beta=2.5),
            lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=2.5),
        ),
        (
            lambda a, b, r: losses.smooth_l1_loss(a, b, r, beta=0.0),
            lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0),
        ),
        (losses.rmse_loss, lambda a, b, r: F.mse_loss(a, b, reduction=r).sqrt()),
    ],
)
def test_regression_losses(data, ours, theirs, reduction):
    x, y = data
    result = run(lambda a, b: ours(a, b, reduction), x, y)
    check(result, theirs(torch.tensor(x), torch.tensor(y), reduction))


def _class_data(shape, classes, seed=1):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(shape) * 2).astype(np.float32)
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = rng.integers(0, classes, target_shape).astype(np.int32)
    probs = rng.random(shape).astype(np.float32)
    probs /= probs.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)
    return logits, target, probs


CE_OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"weight": [1.0, 2.0, 0.5, 3.0, 1.5]},
    {"ignore_index": 2},
    {"weight": [1.0, 2.0, 0.5, 3.0, 1.5], "ignore_index": 0, "label_smoothing": 0.2},
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("options", CE_OPTIONS)
@pytest.mark.parametrize("shape", [(8, 5), (4, 5, 3), (5,)])
def test_cross_entropy_class_indices(shape, options, reduction):
    logits, target, _ = _class_data(shape, 5)
    if len(shape) > 1:
        target.flat[[0, 3]] = [2, 0]  # ignored targets occur
    result = run(
        lambda a, b: losses.cross_entropy(a, b, reduction=reduction, **options), logits, target
    )
    torch_options = dict(options)
    if "weight" in options:
        torch_options["weight"] = torch.tensor(options["weight"])
    expected = F.cross_entropy(
        torch.tensor(logits), torch.tensor(target).long(), reduction=reduction, **torch_options
    )
    check(result, expected)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "options", [{}, {"label_smoothing": 0.15}, {"weight": [1.0, 2.0, 0.5, 3.0]}]
)
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 2)])
def test_cross_entropy_probability_targets(shape, options, reduction):
    logits, _, probs = _class_data(shape, 4)
    result = run(
        lambda a, b: losses.cross_entropy(a, b, reduction=reduction, **options), logits, probs
    )
    torch_options = dict(options)
    if "weight" in options:
        torch_options["weight"] = torch.tensor(options["weight"])
    expected = F.cross_entropy(
        torch.tensor(logits), torch.tensor(probs), reduction=reduction, **torch_options
    )
    check(result, expected)


def test_cross_entropy_weight_as_graph_tensor():
    logits, target, _ = _class_data((8, 5), 5)
    weight = np.array([1.0, 2.0, 0.5, 3.0, 1.5], np.float32)
    result = run(lambda a, b, w: losses.cross_entropy(a, b, weight=w), logits, target, weight)
    expected = F.cross_entropy(
        torch.tensor(logits), torch.tensor(target).long(), weight=torch.tensor(weight)
    )
    check(result, expected)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")
@pytest.mark.parametrize("reduction", [*REDUCTIONS, "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    logits, _, probs = _class_data((6, 5), 5)
    probs[0, 1] = 0.0  # xlogy(0, 0) = 0
    target = np.log(probs + 1e-3).astype(np.float32) if log_target else probs
    result = run(
        lambda a, b: losses.kl_div(a, b, reduction=reduction, log_target=log_target),
        logits,
        target,
    )
    expected = F.kl_div(
        F.log_softmax(torch.tensor(logits), -1),
        torch.tensor(target),
        reduction=reduction,
        log_target=log_target,
    )
    check(result, expected)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "options",
    [{}, {"pos_weight": [1.0, 3.0, 0.5, 2.0]}, {"weight": [0.5, 1.0, 2.0, 1.0], "pos_weight": 2.0}],
)
def test_binary_cross_entropy_with_logits(options, reduction):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 4)) * 30).astype(np.float32)  # large logits stay stable
    y = rng.random((5, 4)).astype(np.float32)
    y[0] = [0, 1, 0, 1]
    result = run(
        lambda a, b: losses.binary_cross_entropy_with_logits(a, b, reduction=reduction, **options),
        x,
        y,
    )
    torch_options = {k: torch.tensor(v) for k, v in options.items()}
    expected = F.binary_cross_entropy_with_logits(
        torch.tensor(x), torch.tensor(y), reduction=reduction, **torch_options
    )
    check(result, expected)


def torch_focal(logits, target, gamma, alpha, reduction, ignore_index=-100):
    ce = F.cross_entropy(logits, target, reduction="none", ignore_index=ignore_index)
    loss = (1 - torch.exp(-ce)) ** gamma * ce
    if alpha is not None:
        factor = torch.tensor(alpha)[target.clamp(min=0)] if isinstance(alpha, list) else alpha
        loss = loss * factor
    kept = target != ignore_index
    if reduction == "mean":
        return loss.sum() / kept.sum()
    return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    ("gamma", "alpha", "ignore_index"),
    [(2.0, None, -100), (0.0, 0.25, -100), (1.5, [0.25, 0.5, 1.0, 2.0, 0.75], 3)],
)
@pytest.mark.parametrize("shape", [(8, 5), (3, 5, 2)])
def test_focal_loss(shape, gamma, alpha, ignore_index, reduction):
    logits, target, _ = _class_data(shape, 5)
    target.flat[0] = 3
    result = run(
        lambda a, b: losses.focal_loss(a, b, gamma, alpha, reduction, ignore_index), logits, target
    )
    expected = torch_focal(
        torch.tensor(logits), torch.tensor(target).long(), gamma, alpha, reduction, ignore_index
    )
    check(result, expected)


def torchvision_sigmoid_focal_loss(inputs, targets, alpha, gamma, reduction):
    """torchvision.ops.sigmoid_focal_loss, line for line."""
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(("alpha", "gamma"), [(0.25, 2.0), (-1.0, 1.5), (0.6, 0.0)])
def test_sigmoid_focal_loss(alpha, gamma, reduction):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 3)) * 3).astype(np.float32)
    y = (rng.random((6, 3)) > 0.5).astype(np.float32)
    result = run(lambda a, b: losses.sigmoid_focal_loss(a, b, alpha, gamma, reduction), x, y)
    check(
        result,
        torchvision_sigmoid_focal_loss(torch.tensor(x), torch.tensor(y), alpha, gamma, reduction),
    )


def test_default_binary_focal_is_torchvision_defaults():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((10,)) * 2).astype(np.float32)
    y = (rng.random((10,)) > 0.3).astype(np.float32)
    result = run(losses.binary_focal_loss, x, y)
    check(
        result, torchvision_sigmoid_focal_loss(torch.tensor(x), torch.tensor(y), 0.25, 2.0, "mean")
    )


def test_errors_name_the_loss():
    cx = lm.Graph()
    a, b = cx.tensor((2, 3)), cx.tensor((3, 2))
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"mse_loss: input of shape \(2, 3\)"):
        losses.mse_loss(a, b)
    with pytest.raises(lm.LuminalError, match="reduction"):
        losses.l1_loss(a, a, reduction="avg")
    with pytest.raises(lm.ShapeError, match="class-index target"):
        losses.cross_entropy(a, cx.tensor((3,), dtype=lm.int32))
    with pytest.raises(lm.LuminalError, match="batchmean"):
        losses.cross_entropy(a, cx.tensor((2,), dtype=lm.int32), reduction="batchmean")
    assert cx.num_nodes == nodes + 2  # the two inputs made for the int32 targets

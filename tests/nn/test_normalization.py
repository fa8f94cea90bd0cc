"""BatchNorm1d/2d and GroupNorm against torch.nn with copied weights: eval and training
forward, gradients through batch statistics, running statistics carried across runs
(3 steps, reference runtime and compiled), momentum=None, no affine / no running
statistics, buffers in the state dict but not in parameters(), errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch
from tests.nn.conftest import assert_output_and_grads_match, input_and_parameter_grads

ATOL, RTOL = 1e-5, 1e-3
MODULES = {
    1: (lm.nn.BatchNorm1d, torch.nn.BatchNorm1d),
    2: (lm.nn.BatchNorm2d, torch.nn.BatchNorm2d),
}


def _pair(dims: int, channels: int, **kwargs):
    """A torch BatchNorm with random affine parameters and statistics, and ours loaded
    from its state dict."""
    ours_cls, torch_cls = MODULES[dims]
    torch.manual_seed(0)
    reference = torch_cls(channels, **kwargs)
    with torch.no_grad():
        if reference.affine:
            reference.weight.uniform_(0.5, 1.5)
            reference.bias.uniform_(-1, 1)
        if reference.track_running_stats:
            reference.running_mean.uniform_(-1, 1)
            reference.running_var.uniform_(0.5, 2)
    cx = lm.Graph()
    layer = ours_cls(cx, channels, **kwargs)
    layer.load_state_dict(reference.state_dict())
    return cx, layer, reference


SHAPES = {1: [(6, 3), (4, 3, 5)], 2: [(3, 4, 5, 6)]}


@pytest.mark.parametrize("dims,shape", [(d, s) for d in SHAPES for s in SHAPES[d]])
def test_eval_forward_and_gradients(rng, dims, shape):
    cx, layer, reference = _pair(dims, shape[1])
    data = rng.standard_normal(shape).astype(np.float32)
    x = cx.tensor(shape).set(data)
    y = layer(x).retrieve()
    grads = input_and_parameter_grads(x, layer, (y * y).sum())
    cx.execute()
    reference.eval()
    assert_output_and_grads_match(y, grads, reference, data, lambda ty: (ty * ty).sum())


@pytest.mark.parametrize("dims,shape", [(1, (6, 3)), (2, (3, 4, 5, 6))])
def test_training_forward_gradients_and_three_steps_of_running_stats(rng, dims, shape):
    cx, layer, reference = _pair(dims, shape[1], momentum=0.2)
    layer.train()
    reference.train()
    x = cx.tensor(shape)
    y = layer(x).retrieve()
    weights = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    loss = (y * cx.tensor(shape).set(weights.numpy())).sum()
    grads = input_and_parameter_grads(x, layer, loss)
    for _ in range(3):
        data = rng.standard_normal(shape).astype(np.float32) * 2 + 0.5
        x.set(data)
        cx.execute()
        assert_output_and_grads_match(y, grads, reference, data, lambda ty: (ty * weights).sum())
    _assert_same_state(layer, reference)


def _assert_same_state(layer: lm.nn.Module, reference: torch.nn.Module) -> None:
    ours, theirs = layer.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value.numpy(), atol=1e-6, rtol=1e-5, err_msg=name)


def test_running_stats_carry_in_the_compiled_graph(rng):
    shape = (4, 3, 5, 5)
    cx, layer, reference = _pair(2, 3)
    layer.train()
    reference.train()
    x = cx.tensor(shape).set(np.zeros(shape, np.float32))
    y = layer(x).retrieve()
    cx.compile(lm.CPUCompiler())
    for _ in range(3):
        data = rng.standard_normal(shape).astype(np.float32) + 1.0
        x.set(data)
        cx.execute()
        assert_matches_torch(y.numpy(), reference(torch.from_numpy(data)), atol=ATOL, rtol=RTOL)
    _assert_same_state(layer, reference)
    assert int(layer.state_dict()["num_batches_tracked"]) == 3


def test_momentum_none_is_the_cumulative_average(rng):
    shape = (5, 3)
    cx, layer, reference = _pair(1, 3, momentum=None)
    layer.train()
    reference.train()
    x = cx.tensor(shape)
    layer(x).retrieve()
    for _ in range(3):
        data = rng.standard_normal(shape).astype(np.float32)
        x.set(data)
        cx.execute()
        reference(torch.from_numpy(data))
    _assert_same_state(layer, reference)


@pytest.mark.parametrize("kwargs", [dict(affine=False), dict(track_running_stats=False)])
def test_without_affine_or_running_stats(rng, kwargs):
    shape = (4, 3, 2, 3)
    cx, layer, reference = _pair(2, 3, **kwargs)
    data = rng.standard_normal(shape).astype(np.float32)
    y = layer(cx.tensor(shape).set(data)).retrieve()
    cx.execute()
    reference.eval()  # without running statistics, eval mode still uses the batch's
    assert_matches_torch(y.numpy(), reference(torch.from_numpy(data)), atol=ATOL, rtol=RTOL)
    assert layer.state_dict().keys() == reference.state_dict().keys()


def test_buffers_are_in_the_state_dict_not_in_parameters():
    cx = lm.Graph()
    layer = lm.nn.BatchNorm2d(cx, 4)
    names = [name for name, _ in layer.named_parameters()]
    assert names == ["weight", "bias"]
    assert [name for name, _ in layer.named_buffers()] == [
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    assert list(layer.state_dict()) == list(torch.nn.BatchNorm2d(4).state_dict())
    assert layer.state_dict()["num_batches_tracked"].dtype == np.int32


def test_train_and_eval_switch_submodules():
    cx = lm.Graph()
    model = lm.nn.Sequential(cx, lm.nn.Conv2d(cx, 2, 2, 1), lm.nn.BatchNorm2d(cx, 2))
    assert not model[1].training  # luminal modules start in eval mode
    assert model.train() is model and model[1].training
    model.eval()
    assert not model[0].training and not model[1].training


def test_errors_name_the_layer():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="BatchNorm2d\\(4\\).*3 channels"):
        lm.nn.BatchNorm2d(cx, 4)(cx.tensor((2, 3, 4, 4)))
    with pytest.raises(lm.ShapeError, match="BatchNorm2d: expected 4-D"):
        lm.nn.BatchNorm2d(cx, 4)(cx.tensor((2, 4)))
    with pytest.raises(lm.ShapeError, match="more than 1 value per channel"):
        lm.nn.BatchNorm1d(cx, 4).train()(cx.tensor((1, 4)))
    with pytest.raises(lm.ShapeError, match="divisible by num_groups"):
        lm.nn.GroupNorm(cx, 3, 4)
    with pytest.raises(lm.LuminalError, match="momentum"):
        lm.nn.BatchNorm1d(cx, 4, momentum=2.0)
    x = cx.tensor((2, 4)).set(np.ones((2, 4), np.float32))  # the graph still works
    y = lm.nn.BatchNorm1d(cx, 4)(x).retrieve()
    cx.execute()
    np.testing.assert_allclose(y.numpy(), np.ones((2, 4)) / np.sqrt(1 + 1e-5), rtol=1e-6)


@pytest.mark.parametrize(
    "groups,channels,shape", [(2, 4, (3, 4, 5, 2)), (1, 3, (2, 3, 7)), (3, 3, (2, 3))]
)
def test_group_norm_forward_and_gradients(rng, groups, channels, shape):
    torch.manual_seed(0)
    reference = torch.nn.GroupNorm(groups, channels)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-1, 1)
    cx = lm.Graph()
    layer = lm.nn.GroupNorm(cx, groups, channels)
    layer.load_state_dict(reference.state_dict())
    data = rng.standard_normal(shape).astype(np.float32)
    x = cx.tensor(shape).set(data)
    y = layer(x).retrieve()
    grads = input_and_parameter_grads(x, layer, (y * y * y).sum())
    cx.execute()
    assert_output_and_grads_match(y, grads, reference, data, lambda ty: (ty**3).sum())


def test_a_train_step_carries_statistics_and_dropout_steps(rng):
    cx = lm.Graph()
    nn = lm.nn
    model = nn.Sequential(
        cx, nn.Conv2d(cx, 1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(cx, 4), nn.ReLU(),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(cx, 64, 3),
    ).train()  # fmt: skip
    x, y = cx.tensor((16, 1, 4, 4)), cx.tensor((16,), lm.int32)
    loss = lm.training.losses.cross_entropy(model(x), y)
    optimizer = lm.training.Adam(model.parameters(), lr=0.05)
    step = lm.training.TrainStep(loss, [x, y], optimizer, compiler=None)  # reference runtime
    data = rng.standard_normal((16, 1, 4, 4)).astype(np.float32)
    labels = (data.reshape(16, -1).sum(1) > 0).astype(np.int32) + (data[:, 0, 0, 0] > 1)
    losses = [step(data, labels) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
    assert int(model[1].state_dict()["num_batches_tracked"]) == 20
    assert lm.nn.random_state(cx).steps == 20
    running = model[1].state_dict()["running_var"]
    assert np.all(running > 0) and not np.allclose(running, 1)

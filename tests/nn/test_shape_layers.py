"""Flatten, Unflatten and Identity: a PyTorch LeNet written as one Sequential loads
torch's state dict and matches its forward and gradients; Unflatten with -1 and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn as tnn

import luminal as lm
from tests.conftest import assert_matches_torch


def test_lenet_as_one_sequential_matches_torch(rng):
    torch.manual_seed(0)
    reference = tnn.Sequential(
        tnn.Conv2d(1, 6, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Conv2d(6, 16, 5), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
        tnn.Linear(400, 120), tnn.ReLU(), tnn.Identity(), tnn.Linear(120, 84), tnn.ReLU(),
        tnn.Linear(84, 10),
    )  # fmt: skip
    nn = lm.nn
    cx = lm.Graph()
    model = nn.Sequential(
        cx, nn.Conv2d(cx, 1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(cx, 6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(cx, 400, 120), nn.ReLU(), nn.Identity(), nn.Linear(cx, 120, 84), nn.ReLU(),
        nn.Linear(cx, 84, 10),
    )  # fmt: skip
    model.load_state_dict(reference.state_dict())
    data = rng.standard_normal((3, 1, 28, 28)).astype(np.float32)
    y = model(cx.tensor(data.shape).set(data)).retrieve()
    grads = cx.compile(lm.training.Autograd(model.parameters(), y.square().sum()))
    for g in grads:
        g.retrieve()
    cx.execute()
    ty = reference(torch.from_numpy(data))
    assert_matches_torch(y.numpy(), ty, atol=1e-5, rtol=1e-3)
    expected = torch.autograd.grad(ty.square().sum(), list(reference.parameters()))
    for ours, theirs in zip(grads, expected, strict=True):
        assert_matches_torch(ours.numpy(), theirs, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    "flatten,unflatten",
    [((1, -1), (1, (3, 20))), ((0, 1), (0, (-1, 3))), ((2, 3), (-1, (5, -1)))],
)
def test_flatten_and_unflatten_match_torch(rng, flatten, unflatten):
    data = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(data.shape).set(data)
    flat = lm.nn.Flatten(*flatten)(x)
    y = lm.nn.Unflatten(*unflatten)(flat).retrieve()
    cx.execute()
    expected = tnn.Unflatten(*unflatten)(tnn.Flatten(*flatten)(torch.from_numpy(data)))
    assert_matches_torch(y.numpy(), expected, atol=0, rtol=0)


def test_identity_ignores_arguments_and_unflatten_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 6))
    assert lm.nn.Identity(54, unused="x")(x) is x
    with pytest.raises(lm.ShapeError, match="cannot be split into \\(4, 2\\)"):
        lm.nn.Unflatten(1, (4, 2))(x)
    with pytest.raises(lm.ShapeError, match="cannot be split"):
        lm.nn.Unflatten(1, (-1, -1))(x)
    assert lm.nn.Unflatten(1, (2, -1))(x).shape == (2, 2, 3)

"""Helpers shared by the layer tests: a layer's output and gradients against torch.nn."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

import luminal as lm
from tests.conftest import assert_matches_torch


def input_and_parameter_grads(
    x: lm.GraphTensor, layer: lm.nn.Module, loss: lm.GraphTensor
) -> list[lm.GraphTensor]:
    """The retrieved gradients of `loss` by `x`, then by each of `layer`'s parameters
    (torch's `parameters()` order, so they zip with `torch.autograd.grad`'s)."""
    grads = x.graph.compile(lm.training.Autograd([x, *layer.parameters()], loss))
    for grad in grads:
        grad.retrieve()
    return grads


def assert_output_and_grads_match(
    y: lm.GraphTensor,
    grads: list[lm.GraphTensor],
    reference: torch.nn.Module,
    data: np.ndarray,
    loss: Callable[[torch.Tensor], torch.Tensor],
    atol: float = 1e-5,
    rtol: float = 1e-3,
    grad_atol: float = 1e-4,
) -> None:
    """Our executed output `y` and `grads` (by the input, then by each parameter) equal
    torch's for `reference` applied to `data` with the same `loss`."""
    tx = torch.from_numpy(data).requires_grad_()
    ty = reference(tx)
    assert_matches_torch(y.numpy(), ty, atol=atol, rtol=rtol)
    expected = torch.autograd.grad(loss(ty), [tx, *reference.parameters()])
    for ours, theirs in zip(grads, expected, strict=True):
        assert_matches_torch(ours.numpy(), theirs, atol=grad_atol, rtol=rtol)

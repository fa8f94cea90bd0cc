"""ConvTranspose1d/2d against torch.nn with copied weights: stride, padding,
output_padding, groups (depthwise too), dilation, no bias, large kernels, unbatched
input; forward and gradients of every input and parameter; compiled; errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from tests.nn.conftest import assert_output_and_grads_match, input_and_parameter_grads

MODULES = {
    1: (lm.nn.ConvTranspose1d, torch.nn.ConvTranspose1d),
    2: (lm.nn.ConvTranspose2d, torch.nn.ConvTranspose2d),
}


def _check(dims: int, input_shape: tuple[int, ...], rng, compiled: bool = False, **kwargs):
    ours_cls, torch_cls = MODULES[dims]
    torch.manual_seed(0)
    reference = torch_cls(**kwargs)
    cx = lm.Graph()
    layer = ours_cls(cx, **kwargs)
    layer.load_state_dict(reference.state_dict())
    data = rng.standard_normal(input_shape).astype(np.float32)
    x = cx.tensor(input_shape).set(data)
    y = layer(x).retrieve()
    grads = input_and_parameter_grads(x, layer, (y * y).sum())
    if compiled:
        cx.compile(lm.CPUCompiler())
    cx.execute()
    assert_output_and_grads_match(y, grads, reference, data, lambda ty: (ty * ty).sum())


CASES_2D = [
    dict(in_channels=3, out_channels=4, kernel_size=3),
    dict(in_channels=3, out_channels=4, kernel_size=3, stride=2),
    dict(in_channels=3, out_channels=2, kernel_size=2, stride=2),  # the U-Net upsampler
    dict(in_channels=3, out_channels=4, kernel_size=4, stride=2, padding=1, bias=False),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 3), padding=(1, 0),
         output_padding=(1, 2), groups=2),
    dict(in_channels=2, out_channels=2, kernel_size=3, stride=2, padding=2, dilation=2,
         output_padding=1),
    dict(in_channels=2, out_channels=2, kernel_size=3, dilation=3, output_padding=2),
    dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, stride=2, padding=1,
         output_padding=1),  # depthwise
    dict(in_channels=2, out_channels=3, kernel_size=(9, 1), stride=(2, 1), padding=(1, 0)),
]  # fmt: skip


@pytest.mark.parametrize(
    "kwargs", CASES_2D, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items())
)
def test_conv_transpose2d_matches_torch(rng, kwargs):
    _check(2, (2, kwargs["in_channels"], 5, 4), rng, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(in_channels=3, out_channels=4, kernel_size=3),
        dict(in_channels=4, out_channels=2, kernel_size=5, stride=3, padding=2,
             output_padding=2, groups=2),
        dict(in_channels=2, out_channels=3, kernel_size=2, stride=2, dilation=2, bias=False),
    ],
)  # fmt: skip
def test_conv_transpose1d_matches_torch(rng, kwargs):
    _check(1, (3, kwargs["in_channels"], 7), rng, **kwargs)


def test_unbatched_input_and_the_compiled_graph(rng):
    _check(2, (3, 4, 5), rng, in_channels=3, out_channels=2, kernel_size=3, stride=2)
    _check(2, (1, 3, 4, 5), rng, compiled=True, in_channels=3, out_channels=2, kernel_size=3,
           stride=2, padding=1, output_padding=1)  # fmt: skip


def test_state_dict_names_and_shapes_match_torch():
    reference = torch.nn.ConvTranspose2d(4, 6, (3, 2), groups=2)
    layer = lm.nn.ConvTranspose2d(lm.Graph(), 4, 6, (3, 2), groups=2)
    ours = layer.state_dict()
    assert {k: v.shape for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in reference.state_dict().items()
    }


def test_errors():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="output_padding .* smaller than stride"):
        lm.nn.ConvTranspose2d(cx, 2, 2, 3, stride=2, output_padding=2)(cx.tensor((1, 2, 4, 4)))
    with pytest.raises(lm.ShapeError, match="3 channels, weight .* expects 2"):
        lm.nn.ConvTranspose2d(cx, 2, 2, 3)(cx.tensor((1, 3, 4, 4)))
    with pytest.raises(lm.ShapeError, match="divisible by groups"):
        lm.nn.ConvTranspose2d(cx, 3, 2, 3, groups=2)
    with pytest.raises(lm.ShapeError, match="empty output"):
        lm.nn.ConvTranspose1d(cx, 1, 1, 1, padding=1)(cx.tensor((1, 1, 1)))

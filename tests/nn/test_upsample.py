"""interpolate / Upsample against torch.nn.functional.interpolate: nearest (integer and
fractional factors, explicit sizes, downsampling), linear/bilinear with align_corners
both ways; forward and input gradients; symbolic sizes for integer nearest; errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch

CASES = [
    dict(scale_factor=2),
    dict(scale_factor=(3, 1)),
    dict(size=(8, 11)),
    dict(size=(3, 4)),
    dict(scale_factor=1.7),
    dict(scale_factor=2, mode="bilinear", align_corners=False),
    dict(scale_factor=2, mode="bilinear", align_corners=True),
    dict(size=(9, 4), mode="bilinear", align_corners=False),
    dict(size=(9, 4), mode="bilinear", align_corners=True),
    dict(scale_factor=(1.5, 2.3), mode="bilinear"),
    dict(scale_factor=0.6, mode="bilinear", recompute_scale_factor=True),
    dict(size=(1, 1), mode="bilinear", align_corners=True),
]


def _check(rng, shape, kwargs, compiled=False):
    data = rng.standard_normal(shape).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(shape).set(data)
    y = lm.nn.functional.interpolate(x, **kwargs).retrieve()
    grad = cx.compile(lm.training.Autograd([x], (y * y * y).sum()))[0].retrieve()
    if compiled:
        cx.compile(lm.CPUCompiler())
    cx.execute()
    tx = torch.from_numpy(data).requires_grad_()
    ty = torch.nn.functional.interpolate(tx, **kwargs)
    assert_matches_torch(y.numpy(), ty, atol=1e-6, rtol=1e-5)
    (expected,) = torch.autograd.grad((ty**3).sum(), [tx])
    assert_matches_torch(grad.numpy(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kwargs", CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_interpolate_2d_matches_torch(rng, kwargs):
    _check(rng, (2, 3, 5, 7), kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [dict(scale_factor=3), dict(size=5, mode="linear", align_corners=True),
     dict(scale_factor=2.5, mode="linear")],
)  # fmt: skip
def test_interpolate_1d_matches_torch(rng, kwargs):
    _check(rng, (2, 3, 6), kwargs)


def test_compiled_bilinear_and_nearest(rng):
    _check(rng, (1, 2, 4, 6), dict(scale_factor=2, mode="bilinear"), compiled=True)
    _check(rng, (1, 2, 4, 6), dict(scale_factor=2), compiled=True)


def test_upsample_module_and_symbolic_sizes(rng):
    data = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(("batch", 3, "h", "w")).set(data)
    y = lm.nn.Upsample(scale_factor=2)(x).retrieve()
    assert repr(lm.nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2, mode='nearest')"
    cx.execute()
    expected = torch.nn.Upsample(scale_factor=2)(torch.from_numpy(data))
    assert_matches_torch(y.numpy(), expected, atol=0, rtol=0)
    half_known = cx.tensor((1, 3, 4, "w"))
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError, match="symbolic spatial sizes need mode 'nearest'"):
        lm.nn.functional.interpolate(half_known, scale_factor=2, mode="bilinear")
    assert cx.num_nodes == nodes  # the first dim's matmul is rolled back


def test_errors():
    cx = lm.Graph()
    x = cx.tensor((1, 2, 4, 4))
    with pytest.raises(lm.LuminalError, match="exactly one of size and scale_factor"):
        lm.nn.functional.interpolate(x)
    with pytest.raises(lm.ShapeError, match="needs a 3-D input"):
        lm.nn.functional.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(lm.LuminalError, match="mode must be one of"):
        lm.nn.Upsample(scale_factor=2, mode="bicubic")
    with pytest.raises(lm.LuminalError, match="align_corners only applies"):
        lm.nn.functional.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(lm.ShapeError, match="size must have 2 entries"):
        lm.nn.functional.interpolate(x, size=(2, 3, 4))

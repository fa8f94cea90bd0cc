"""FoldChannelScale: a per-channel scale after a contraction moves onto the weight
(inference BatchNorm into the convolution before it). The folded graph gives the same
values (random convolutions: strides, groups, batch sizes), the scale is applied to the
weight, and nothing is folded where it is not valid or does not pay."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from luminal import ops
from luminal.compiler.fold import FoldChannelScale
from tests.conftest import assert_matches_torch


def _folded_weights(cx: lm.Graph) -> int:
    """Contractions whose product reads a Mul (a weight times a scale)."""
    found = 0
    for node in cx.nodes.values():
        if isinstance(node.op, ops.SumReduce):
            product = cx.nodes[node.inputs[0].source]
            if isinstance(product.op, ops.Mul):
                found += any(isinstance(cx.nodes[e.source].op, ops.Mul) for e in product.inputs)
    return found


def _conv_bn(rng, batch=2, cin=4, cout=6, kernel=3, stride=1, groups=1, size=7):
    """A Conv2d(bias=False) + eval BatchNorm2d + SiLU, torch's and ours, same weights."""
    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        torch.nn.BatchNorm2d(cout),
        torch.nn.SiLU(),
    ).eval()
    with torch.no_grad():
        bn = reference[1]
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.2, 3)
    cx = lm.Graph()
    model = lm.nn.Sequential(
        cx,
        lm.nn.Conv2d(cx, cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        lm.nn.BatchNorm2d(cx, cout),
        lm.nn.SiLU(),
    )
    model.load_state_dict(reference.state_dict())
    data = rng.standard_normal((batch, cin, size, size)).astype(np.float32)
    y = model(cx.tensor(data.shape).set(data)).retrieve()
    return cx, y, reference(torch.from_numpy(data))


def test_batchnorm_folds_into_the_convolution(rng):
    cx, y, expected = _conv_bn(rng)
    cx.execute()
    before = y.numpy()
    cx.compile(FoldChannelScale())
    assert _folded_weights(cx) == 1
    cx.execute()
    np.testing.assert_allclose(y.numpy(), before, rtol=1e-5, atol=1e-6)
    assert_matches_torch(y.numpy(), expected, atol=1e-5, rtol=1e-4)


def test_generic_and_cpu_compilers_fold(rng):
    cx, y, expected = _conv_bn(rng, groups=2)
    cx.compile(lm.GenericCompiler())
    assert _folded_weights(cx) == 1
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert_matches_torch(y.numpy(), expected, atol=1e-5, rtol=1e-4)


@given(
    batch=st.integers(1, 2),
    groups=st.sampled_from([1, 2]),
    kernel=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    size=st.integers(3, 6),
)
def test_folding_keeps_values(batch, groups, kernel, stride, size):
    cx, y, expected = _conv_bn(
        np.random.default_rng(size), batch, 4, 6, kernel, stride, groups, size
    )
    cx.compile(FoldChannelScale())
    weight_size = 6 * (4 // groups) * kernel * kernel
    assert _folded_weights(cx) == (weight_size < expected.numel())  # only where it pays
    cx.execute()
    assert_matches_torch(y.numpy(), expected, atol=1e-5, rtol=1e-4)


def test_linear_without_bias_and_a_per_column_scale(rng):
    cx = lm.Graph()
    x = cx.tensor((16, 8)).set(rng.standard_normal((16, 8)).astype(np.float32))
    w = cx.tensor((8, 4)).set(rng.standard_normal((8, 4)).astype(np.float32))
    s = cx.tensor((4,)).set(rng.standard_normal(4).astype(np.float32))
    y = ((x @ w) * s).retrieve()
    cx.execute()
    before = y.numpy()
    cx.compile(FoldChannelScale())
    assert _folded_weights(cx) == 1
    cx.execute()
    np.testing.assert_allclose(y.numpy(), before, rtol=1e-5, atol=1e-6)


def test_nothing_folds_where_it_is_invalid_or_does_not_pay(rng):
    cx = lm.Graph()
    x = cx.tensor((16, 8)).set(rng.standard_normal((16, 8)).astype(np.float32))
    w = cx.tensor((8, 4)).set(rng.standard_normal((8, 4)).astype(np.float32))
    out = x @ w
    rows = cx.tensor((16, 1)).set(rng.standard_normal((16, 1)).astype(np.float32))
    outputs = [
        (x @ w) * rows,  # a per-row scale varies where the weight is broadcast
        out * out.sum(0),  # the scale depends on the contraction itself
        (x @ w) * 3.0,  # a constant scalar
        (x @ w).square(),  # the scale is the contraction itself
        (x[:1] @ cx.tensor((8, 64)).set(np.ones((8, 64), np.float32)))
        * cx.tensor((64,)).set(np.ones(64, np.float32)),  # the weight outgrows the output
    ]
    for t in outputs:
        t.retrieve()
    cx.execute()
    before = [t.numpy() for t in outputs]
    cx.compile(FoldChannelScale())
    assert _folded_weights(cx) == 0
    cx.execute()
    for t, expected in zip(outputs, before, strict=True):
        np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6)

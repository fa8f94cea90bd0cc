"""Max, average and adaptive average pooling against torch.nn: kernels, strides,
paddings, dilations, ceil_mode, count_include_pad, uneven adaptive windows, symbolic
batch sizes, graph size and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch, uniform

ATOL, RTOL = 1e-5, 1e-3


def _check(ours, theirs, x: np.ndarray) -> None:
    cx = lm.Graph()
    out = ours(cx.tensor(x.shape).set(x)).retrieve()
    cx.execute()
    assert_matches_torch(out.numpy(), theirs(torch.from_numpy(x)), atol=ATOL, rtol=RTOL)


def _ids(kwargs: dict) -> str:
    return ",".join(f"{a}={b}" for a, b in kwargs.items())


# ---------------------------------------------------------------- max pooling
MAX2D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1)),
    dict(kernel_size=2, dilation=2),
    dict(kernel_size=(2, 3), stride=2, padding=(1, 0), dilation=(3, 1)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=3, ceil_mode=True),
]


@pytest.mark.parametrize("kwargs", MAX2D_CASES, ids=_ids)
@pytest.mark.parametrize("size", [(7, 9), (8, 10)])
def test_maxpool2d(rng, kwargs, size):
    _check(lm.nn.MaxPool2d(**kwargs), torch.nn.MaxPool2d(**kwargs), uniform(rng, (2, 3, *size)))


def test_maxpool_padding_reads_minus_infinity(rng):
    """Padding never wins a max, even when every real value is very negative."""
    x = uniform(rng, (2, 3, 7, 7), -1e30, -1e29)
    kwargs = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    _check(lm.nn.MaxPool2d(**kwargs), torch.nn.MaxPool2d(**kwargs), x)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=3),
        dict(kernel_size=4, stride=3, padding=2),
        dict(kernel_size=3, stride=2, dilation=2, padding=1, ceil_mode=True),
    ],
    ids=_ids,
)
def test_maxpool1d(rng, kwargs):
    _check(lm.nn.MaxPool1d(**kwargs), torch.nn.MaxPool1d(**kwargs), uniform(rng, (2, 3, 14)))


def test_maxpool3d(rng):
    kwargs = dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0))
    _check(lm.nn.MaxPool3d(**kwargs), torch.nn.MaxPool3d(**kwargs), uniform(rng, (2, 2, 4, 7, 6)))


def test_maxpool_unbatched_and_graph_first(rng):
    """(C, H, W) input works, and the graph may be passed first like other modules."""
    cx = lm.Graph()
    x = uniform(rng, (3, 6, 6))
    out = lm.nn.MaxPool2d(cx, 2)(cx.tensor(x.shape).set(x)).retrieve()
    cx.execute()
    assert_matches_torch(out.numpy(), torch.nn.MaxPool2d(2)(torch.from_numpy(x)), ATOL, RTOL)


@pytest.mark.parametrize(
    "kwargs",
    [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)],
    ids=_ids,
)
def test_maxpool_of_relu_pools_first(rng, kwargs):
    """max_pool(relu(y)) is built as relu(max_pool(y)): the same values (windows whose
    values are all negative give 0, NaN propagates) and gradients as torch's
    max_pool(relu(y)); the relu's max reduces over the pooled shape, not the input's."""
    x = uniform(rng, (2, 3, 8, 8))
    x[0, 0, :4, :4] = -np.abs(x[0, 0, :4, :4])  # all-negative windows
    x[1, 2, 5, 5] = np.nan
    pool = torch.nn.MaxPool2d(**kwargs)
    _check(lambda t: lm.nn.MaxPool2d(**kwargs)(t.relu()), lambda t: pool(torch.relu(t)), x)

    x[1, 2, 5, 5] = 0.5
    cx = lm.Graph()
    y = cx.tensor(x.shape).set(x)
    out = lm.nn.MaxPool2d(**kwargs)(y.relu())
    (grad,) = cx.compile(lm.training.Autograd([y], (out * out).sum()))
    grad.retrieve()
    cx.execute()
    t = torch.from_numpy(x).requires_grad_()
    (pool(torch.relu(t)) ** 2).sum().backward()
    np.testing.assert_allclose(grad.numpy(), t.grad.numpy(), atol=ATOL, rtol=RTOL)
    assert relu_shapes(cx, out) == [tuple(out.view.shape)]


def relu_shapes(cx: lm.Graph, out: lm.GraphTensor) -> list[tuple]:
    """The shapes of the relus among the nodes `out` reads (the unpooled relu has no
    reader): relu is a max over the masked (y, 0) pair, a trailing axis of 2."""
    return [
        tuple(n.shape)
        for n in map(cx.nodes.get, cx.topological_order([out.node_id]))
        if isinstance(n.op, lm.ops.MaxReduce)
        and tuple(n.inputs[0].view.shape)[-1:] == (2,)
        and n.inputs[0].view.mask is not None
    ]


# ---------------------------------------------------------------- average pooling
AVG2D_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=2, stride=2, divisor_override=3),
]


@pytest.mark.parametrize("kwargs", AVG2D_CASES, ids=_ids)
@pytest.mark.parametrize("size", [(7, 9), (8, 10)])
def test_avgpool2d(rng, kwargs, size):
    _check(lm.nn.AvgPool2d(**kwargs), torch.nn.AvgPool2d(**kwargs), uniform(rng, (2, 3, *size)))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=3),
        dict(kernel_size=4, stride=3, padding=2, count_include_pad=False),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    ],
    ids=_ids,
)
def test_avgpool1d(rng, kwargs):
    _check(lm.nn.AvgPool1d(**kwargs), torch.nn.AvgPool1d(**kwargs), uniform(rng, (2, 3, 14)))


def test_avgpool3d(rng):
    kwargs = dict(kernel_size=2, stride=(1, 2, 2), padding=1, count_include_pad=False)
    _check(lm.nn.AvgPool3d(**kwargs), torch.nn.AvgPool3d(**kwargs), uniform(rng, (2, 2, 4, 5, 6)))


# ---------------------------------------------------------------- adaptive average pooling
@pytest.mark.parametrize(
    ("size", "output_size"),
    [
        ((8, 8), 4),  # divisible: reshape + mean
        ((6, 6), 1),  # global average pooling
        ((7, 7), 7),  # identity
        ((7, 7), 3),  # uneven windows
        ((5, 5), (2, 3)),
        ((7, 9), (3, 4)),
        ((8, 9), (4, 2)),  # divisible along one dim only
        ((7, 9), (None, 4)),  # None keeps a dim
        ((3, 4), (5, 6)),  # larger than the input: overlapping windows
    ],
)
def test_adaptive_avgpool2d(rng, size, output_size):
    _check(
        lm.nn.AdaptiveAvgPool2d(output_size),
        torch.nn.AdaptiveAvgPool2d(output_size),
        uniform(rng, (2, 3, *size)),
    )


def test_adaptive_avgpool1d_and_3d(rng):
    x = uniform(rng, (2, 3, 11))
    _check(lm.nn.AdaptiveAvgPool1d(4), torch.nn.AdaptiveAvgPool1d(4), x)
    x = uniform(rng, (2, 2, 5, 6, 7))
    _check(lm.nn.AdaptiveAvgPool3d((2, 3, 3)), torch.nn.AdaptiveAvgPool3d((2, 3, 3)), x)


def test_adaptive_node_count_independent_of_size():
    """Uneven windows cost one averaging matrix per dim, not one op per output."""

    def nodes(size: int) -> int:
        cx = lm.Graph()
        x = cx.tensor((2, 3, size, size))
        before = cx.num_nodes
        lm.nn.AdaptiveAvgPool2d(3)(x)
        return cx.num_nodes - before

    assert nodes(7) == nodes(31) <= 12


# ---------------------------------------------------------------- symbolic batch
def test_symbolic_batch_two_sizes(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", 3, 9, 8))
    maxed = lm.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)(x).retrieve()
    averaged = lm.nn.AvgPool2d(3, 2, 1, count_include_pad=False)(x).retrieve()
    adaptive = lm.nn.AdaptiveAvgPool2d((2, 3))(x).retrieve()
    for batch in (1, 4):
        data = uniform(rng, (batch, 3, 9, 8))
        x.set(data)
        cx.execute()
        t = torch.from_numpy(data)
        expected = torch.nn.functional.max_pool2d(t, 3, 2, 1, ceil_mode=True)
        assert_matches_torch(maxed.numpy(), expected, ATOL, RTOL)
        expected = torch.nn.functional.avg_pool2d(t, 3, 2, 1, count_include_pad=False)
        assert_matches_torch(averaged.numpy(), expected, ATOL, RTOL)
        expected = torch.nn.functional.adaptive_avg_pool2d(t, (2, 3))
        assert_matches_torch(adaptive.numpy(), expected, ATOL, RTOL)


# ---------------------------------------------------------------- errors
def test_errors():
    cx = lm.Graph()
    x = cx.tensor((1, 2, 6, 6))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match="MaxPool2d.*half"):
        lm.nn.MaxPool2d(2, padding=2)(x)
    with pytest.raises(lm.ShapeError, match="AvgPool2d.*expected input"):
        lm.nn.AvgPool2d(2)(cx.tensor((6, 6)))
    with pytest.raises(lm.ShapeError, match="smaller than the window"):
        lm.nn.MaxPool2d(7)(x)
    with pytest.raises(lm.ShapeError, match="output_size"):
        lm.nn.AdaptiveAvgPool2d((2, 0))(x)
    with pytest.raises(lm.LuminalError, match="return_indices"):
        lm.nn.MaxPool2d(2, return_indices=True)
    assert cx.num_nodes == before + 1  # only the rejected 2-D input

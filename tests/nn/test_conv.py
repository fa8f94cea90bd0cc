"""Conv1d/2d/3d against torch.nn with copied weights: strides, paddings ("same" and
"valid" included), dilations, groups (depthwise too), bias, stacks of layers, a LeNet,
symbolic batch sizes, graph size and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.nn.layers import ReLU  # exported as lm.nn.ReLU by the layers module
from tests.conftest import assert_matches_torch, uniform

ATOL, RTOL = 1e-5, 1e-3

CONVS = {1: (lm.nn.Conv1d, torch.nn.Conv1d), 2: (lm.nn.Conv2d, torch.nn.Conv2d)}
CONVS[3] = (lm.nn.Conv3d, torch.nn.Conv3d)


def _run_module(cx: lm.Graph, module, x: np.ndarray) -> np.ndarray:
    tensor = cx.tensor(x.shape).set(x)
    out = module(tensor).retrieve()
    cx.execute()
    return out.numpy()


def _check_conv(dims: int, input_shape: tuple[int, ...], rng, **kwargs) -> None:
    ours_cls, torch_cls = CONVS[dims]
    torch.manual_seed(0)
    reference = torch_cls(**kwargs)
    cx = lm.Graph()
    layer = ours_cls(cx, **kwargs)
    layer.load_state_dict(reference.state_dict())
    x = uniform(rng, input_shape)
    ours = _run_module(cx, layer, x)
    assert_matches_torch(ours, reference(torch.from_numpy(x)), atol=ATOL, rtol=RTOL)


CONV2D_CASES = [
    dict(in_channels=3, out_channels=4, kernel_size=3),
    dict(in_channels=3, out_channels=4, kernel_size=3, stride=2),
    dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
    dict(in_channels=3, out_channels=4, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
    dict(in_channels=3, out_channels=5, kernel_size=(1, 4), padding=(0, 2), bias=False),
    dict(in_channels=3, out_channels=4, kernel_size=3, padding="same"),
    dict(in_channels=3, out_channels=4, kernel_size=(4, 2), padding="same", dilation=(1, 3)),
    dict(in_channels=3, out_channels=4, kernel_size=3, padding="valid"),
    dict(in_channels=3, out_channels=4, kernel_size=3, dilation=2),
    dict(in_channels=3, out_channels=4, kernel_size=3, dilation=(2, 1), stride=2, padding=2),
    dict(in_channels=4, out_channels=6, kernel_size=3, groups=2, padding=1),
    dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, padding=1),  # depthwise
    dict(in_channels=4, out_channels=8, kernel_size=(2, 3), groups=4, stride=(1, 2), bias=False),
    dict(in_channels=6, out_channels=3, kernel_size=1),  # pointwise
    dict(in_channels=2, out_channels=3, kernel_size=5, stride=3, padding=2),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize(
    "kwargs", CONV2D_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items())
)
def test_conv2d_matches_torch(rng, kwargs):
    _check_conv(2, (2, kwargs["in_channels"], 9, 8), rng, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(in_channels=3, out_channels=4, kernel_size=3),
        dict(in_channels=3, out_channels=5, kernel_size=4, stride=2, padding=2, bias=False),
        dict(in_channels=2, out_channels=4, kernel_size=3, padding="same", dilation=3),
        dict(in_channels=4, out_channels=4, kernel_size=5, groups=4, padding=2),
        dict(in_channels=4, out_channels=2, kernel_size=2, groups=2, dilation=2, stride=3),
    ],
)
def test_conv1d_matches_torch(rng, kwargs):
    _check_conv(1, (3, kwargs["in_channels"], 13), rng, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(in_channels=2, out_channels=3, kernel_size=2),
        dict(in_channels=2, out_channels=4, kernel_size=(2, 3, 1), stride=(1, 2, 1), padding=1),
        dict(in_channels=2, out_channels=2, kernel_size=3, padding="same", groups=2),
        dict(in_channels=4, out_channels=2, kernel_size=(1, 2, 2), dilation=(1, 2, 1), groups=2),
    ],
)
def test_conv3d_matches_torch(rng, kwargs):
    _check_conv(3, (2, kwargs["in_channels"], 4, 6, 5), rng, **kwargs)


def test_unbatched_input(rng):
    """(C, H, W) input gives (out, H', W'), as in PyTorch."""
    _check_conv(2, (3, 7, 6), rng, in_channels=3, out_channels=2, kernel_size=3, padding=1)


def test_functional_conv(rng):
    """conv() takes plain tensors: the number of spatial dims follows the weight."""
    x, w, b = uniform(rng, (2, 4, 6, 7)), uniform(rng, (6, 2, 3, 2)), uniform(rng, (6,))
    cx = lm.Graph()
    tx, tw, tb = (cx.tensor(a.shape).set(a) for a in (x, w, b))
    out = lm.nn.conv(tx, tw, tb, stride=(2, 1), padding=(1, 0), dilation=1, groups=2).retrieve()
    cx.execute()
    expected = torch.nn.functional.conv2d(
        *(torch.from_numpy(a) for a in (x, w, b)), stride=(2, 1), padding=(1, 0), groups=2
    )
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_parameter_names_and_shapes():
    cx = lm.Graph()
    ours = lm.nn.Conv2d(cx, 4, 6, (3, 2), groups=2)
    theirs = torch.nn.Conv2d(4, 6, (3, 2), groups=2)
    shapes = {name: tuple(p.shape) for name, p in ours.named_parameters()}
    assert shapes == {name: tuple(p.shape) for name, p in theirs.state_dict().items()}
    assert [name for name, _ in lm.nn.Conv1d(cx, 2, 3, 3, bias=False).named_parameters()] == [
        "weight"
    ]


# ---------------------------------------------------------------- stacks
def _check_stack(ours, theirs, x: np.ndarray, cx: lm.Graph) -> None:
    ours.load_state_dict(theirs.state_dict())
    assert_matches_torch(_run_module(cx, ours, x), theirs(torch.from_numpy(x)), ATOL, RTOL)


def test_two_stacked_convs(rng):
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)
    )
    cx = lm.Graph()
    ours = lm.nn.Sequential(
        cx, lm.nn.Conv2d(cx, 3, 8, 3, padding=1), ReLU(), lm.nn.Conv2d(cx, 8, 4, 3, stride=2)
    )
    _check_stack(ours, theirs, uniform(rng, (2, 3, 12, 11)), cx)


def test_three_stacked_convs_with_groups(rng):
    torch.manual_seed(2)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, padding="same"),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
        torch.nn.Conv2d(8, 6, 1, groups=2),
    )
    cx = lm.Graph()
    ours = lm.nn.Sequential(
        cx,
        lm.nn.Conv2d(cx, 4, 8, 3, padding="same"),
        lm.nn.Conv2d(cx, 8, 8, 3, padding=1, groups=8),
        lm.nn.Conv2d(cx, 8, 6, 1, groups=2),
    )
    _check_stack(ours, theirs, uniform(rng, (2, 4, 10, 9)), cx)


def test_conv_then_maxpool(rng):
    torch.manual_seed(3)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1)
    )
    cx = lm.Graph()
    ours = lm.nn.Sequential(
        cx, lm.nn.Conv2d(cx, 3, 5, 3, padding=1), lm.nn.MaxPool2d(3, stride=2, padding=1)
    )
    _check_stack(ours, theirs, uniform(rng, (2, 3, 11, 10)), cx)


def test_conv_then_avgpool(rng):
    torch.manual_seed(4)
    theirs = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3), torch.nn.AvgPool1d(2))
    cx = lm.Graph()
    ours = lm.nn.Sequential(cx, lm.nn.Conv1d(cx, 3, 4, 3), lm.nn.AvgPool1d(2))
    _check_stack(ours, theirs, uniform(rng, (3, 3, 15)), cx)
    torch.manual_seed(5)
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.AvgPool2d(2, padding=1))
    cx = lm.Graph()
    ours = lm.nn.Sequential(cx, lm.nn.Conv2d(cx, 2, 4, 3), lm.nn.AvgPool2d(2, padding=1))
    _check_stack(ours, theirs, uniform(rng, (2, 2, 9, 8)), cx)


def test_lenet(rng):
    """Conv(1,6,5,p=2) -> ReLU -> MaxPool(2) -> Conv(6,16,5) -> ReLU -> MaxPool(2) -> flatten
    -> matmul on 1x28x28 images, against PyTorch."""
    torch.manual_seed(6)
    features = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
    )
    head = torch.nn.Linear(16 * 5 * 5, 10)
    cx = lm.Graph()
    ours = lm.nn.Sequential(
        cx,
        lm.nn.Conv2d(cx, 1, 6, 5, padding=2),
        ReLU(),
        lm.nn.MaxPool2d(2),
        lm.nn.Conv2d(cx, 6, 16, 5),
        ReLU(),
        lm.nn.MaxPool2d(2),
    )
    ours.load_state_dict(features.state_dict())
    weight = cx.tensor((10, 400)).set(head.weight.detach().numpy())
    bias = cx.tensor((10,)).set(head.bias.detach().numpy())
    images = uniform(rng, (4, 1, 28, 28), 0.0, 1.0)
    x = cx.tensor(images.shape).set(images)
    logits = (ours(x).flatten(1) @ weight.T + bias).retrieve()
    cx.execute()
    expected = head(features(torch.from_numpy(images)).flatten(1))
    assert_matches_torch(logits.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_symbolic_batch_two_sizes(rng):
    """One graph with a symbolic batch runs at two batch sizes."""
    torch.manual_seed(7)
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, groups=1),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 4, 3, groups=4, padding="same"),
    )
    cx = lm.Graph()
    ours = lm.nn.Sequential(
        cx,
        lm.nn.Conv2d(cx, 3, 4, 3, padding=1),
        lm.nn.MaxPool2d(2),
        lm.nn.Conv2d(cx, 4, 4, 3, groups=4, padding="same"),
    )
    ours.load_state_dict(theirs.state_dict())
    x = cx.tensor(("batch", 3, 8, 10))
    out = ours(x).retrieve()
    assert str(out.shape[0]) == "batch" and out.shape[1:] == (4, 4, 5)
    for batch in (1, 3):
        data = uniform(rng, (batch, 3, 8, 10))
        x.set(data)
        cx.execute()
        assert_matches_torch(out.numpy(), theirs(torch.from_numpy(data)), ATOL, RTOL)


# ---------------------------------------------------------------- graph size
def _conv_nodes(size: int, **kwargs) -> int:
    cx = lm.Graph()
    x = cx.tensor((2, 4, size, size))
    before = cx.num_nodes
    lm.nn.Conv2d(cx, 4, 8, 3, **kwargs)(x)
    return cx.num_nodes - before


@pytest.mark.parametrize("kwargs", [{}, {"padding": 1, "groups": 2}, {"bias": False}])
def test_node_count_is_small_and_independent_of_size(kwargs):
    """No per-output-position ops: parameters, one window copy, the matmul, the bias."""
    small, large = _conv_nodes(8, **kwargs), _conv_nodes(64, **kwargs)
    assert small == large
    assert small <= 10


# ---------------------------------------------------------------- errors
def test_errors_name_the_layer_and_leave_graph_usable(rng):
    cx = lm.Graph()
    layer = lm.nn.Conv2d(cx, 3, 4, 3)
    x = cx.tensor((2, 5, 8, 8))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"Conv2d.*5 channels.*expects 3"):
        layer(x)
    with pytest.raises(lm.ShapeError, match=r"Conv2d.*expected input"):
        layer(cx.tensor((8, 8)))
    small = cx.tensor((1, 3, 2, 2))
    with pytest.raises(lm.ShapeError, match="smaller than the dilated kernel"):
        layer(small)
    assert cx.num_nodes == before + 2  # only the two new inputs
    good = uniform(rng, (1, 3, 5, 5))
    y = layer(cx.tensor(good.shape).set(good)).retrieve()
    cx.execute()
    assert y.numpy().shape == (1, 4, 3, 3)


def test_constructor_errors():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="stride 1"):
        lm.nn.Conv2d(cx, 3, 4, 3, stride=2, padding="same")
    with pytest.raises(lm.ShapeError, match="divisible by groups"):
        lm.nn.Conv2d(cx, 3, 4, 3, groups=2)
    with pytest.raises(lm.ShapeError, match="kernel_size"):
        lm.nn.Conv2d(cx, 3, 4, (3, 3, 3))
    with pytest.raises(lm.ShapeError, match="padding"):
        lm.nn.Conv1d(cx, 3, 4, 3, padding="full")
    with pytest.raises(lm.LuminalError, match="padding_mode"):
        lm.nn.Conv1d(cx, 3, 4, 3, padding_mode="reflect")

"""Winograd F(4x4, 3x3) and F(2x2, 3x3) convolutions (luminal.nn.winograd) against
torch's conv2d: odd, non-square and tile-sized inputs, padding 0 and 1, batches, bias,
unbatched input, the reference runtime and the CPU compiler, gradients through it, the
"auto" choice, errors, and the error at ResNet scale against float64."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from luminal.nn.conv import conv
from luminal.nn.winograd import F2, F4
from tests.conftest import assert_matches_torch, uniform
from tests.nn.conftest import assert_output_and_grads_match, input_and_parameter_grads

ATOL, RTOL = 1e-4, 1e-3
CONV_MODULE = importlib.import_module("luminal.nn.conv")  # luminal.nn.conv is the function

CASES = [  # (input shape, out channels, padding, bias)
    ((2, 5, 9, 11), 7, 1, True),
    ((1, 3, 7, 7), 4, 0, False),
    ((3, 8, 16, 16), 6, 1, True),  # whole tiles: nothing to crop
    ((2, 4, 6, 13), 3, 0, True),  # non-square, 4 x 11 output
    ((1, 2, 3, 3), 2, 0, True),  # a single 1x1 output
    ((4, 10, 10), 5, 1, True),  # unbatched
]


def _winograd_tiles(graph: lm.Graph) -> list[int]:
    """The input tile side (alpha) of each Winograd convolution in the graph, from its
    input transform kron(B^T, B^T) (alpha^2 x alpha^2)."""
    return [
        int(round(node.shape[0].as_int() ** 0.5))
        for node in graph.nodes.values()
        if isinstance(node.op, ops.Input) and node.op.label.split("#")[0] == "winograd_BT"
    ]


def _winograd_nodes(graph: lm.Graph) -> int:
    """How many Winograd transform matrices the graph holds (3 per Winograd conv)."""
    return sum(
        isinstance(node.op, ops.Input) and node.op.label.startswith("winograd_")
        for node in graph.nodes.values()
    )


@pytest.mark.parametrize("transforms", [F4, F2], ids=["F4", "F2"])
@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}->{c[1]},p{c[2]},b{c[3]}")
def test_forward_matches_torch(rng, monkeypatch, case, compiled, transforms):
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: transforms)
    shape, out_channels, padding, bias = case
    channels = shape[-3]
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(channels, out_channels, 3, padding=padding, bias=bias)
    cx = lm.Graph()
    layer = lm.nn.Conv2d(
        cx, channels, out_channels, 3, padding=padding, bias=bias, algorithm="winograd"
    )
    layer.load_state_dict(reference.state_dict())
    x = uniform(rng, shape)
    y = layer(cx.tensor(shape).set(x)).retrieve()
    assert _winograd_tiles(cx) == [transforms.alpha]
    if compiled:
        cx.compile(lm.CPUCompiler())
        # the transforms and products run as one fused kernel (compiler/winograd.py;
        # tests/compiler/test_winograd_fusion.py has the unfused path)
        names = [k.name for segment in cx.compiled.segments for k in segment.kernels]
        assert sum("winograd" in name for name in names) == 1
        assert not any("constmat" in name for name in names)
    cx.execute()
    assert_matches_torch(y.numpy(), reference(torch.from_numpy(x)), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "cpu"])
def test_gradients_match_torch(rng, compiled):
    """F(2x2) here (9 tiles of 4x4 are too few for F(4x4))."""
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(3, 4, 3, padding=1)
    cx = lm.Graph()
    layer = lm.nn.Conv2d(cx, 3, 4, 3, padding=1, algorithm="winograd")
    layer.load_state_dict(reference.state_dict())
    data = uniform(rng, (2, 3, 7, 9))
    x = cx.tensor(data.shape).set(data)
    y = layer(x).retrieve()
    grads = input_and_parameter_grads(x, layer, (y * y).sum())
    if compiled:
        cx.compile(lm.CPUCompiler())
        # the backward pass reads the transformed input and the products: the CPU
        # compiler's Winograd fusion (compiler/winograd.py) leaves such a graph unfused
        assert not any(isinstance(n.op, ops.WinogradConv) for n in cx.nodes.values())
        names = [k.name for segment in cx.compiled.segments for k in segment.kernels]
        assert sum("constmat" in name for name in names) >= 2
    cx.execute()
    assert_output_and_grads_match(
        y, grads, reference, data, lambda t: (t * t).sum(), atol=ATOL, grad_atol=1e-3
    )


def test_auto_picks_winograd_only_where_worthwhile(rng):
    cx = lm.Graph()
    conv(cx.tensor((3, 128, 16, 16)), cx.tensor((128, 128, 3, 3)), padding=1)  # 16 tiles
    conv(cx.tensor((3, 128, 7, 7)), cx.tensor((128, 128, 3, 3)), padding=1)  # 4, or 16 of 2x2
    conv(cx.tensor(("n", 128, 7, 7)), cx.tensor((128, 128, 3, 3)), padding=1)  # batch unknown
    # F(4x4) on 7x7 maps (both cover 8x8) once the batch holds 16 to 48 of its tiles
    conv(cx.tensor((8, 128, 7, 7)), cx.tensor((128, 128, 3, 3)), padding=1)  # 32
    conv(cx.tensor((4, 128, 7, 7)), cx.tensor((128, 128, 3, 3)), padding=1)  # 16
    conv(cx.tensor((13, 128, 7, 7)), cx.tensor((128, 128, 3, 3)), padding=1)  # 52: F(2x2)
    conv(cx.tensor((3, 128, 10, 10)), cx.tensor((128, 128, 3, 3)), padding=1)  # 12 vs 10
    assert _winograd_tiles(cx) == [F4.alpha, F2.alpha, F2.alpha] + [F4.alpha] * 2 + [F2.alpha] * 2
    for x_shape, w_shape, kwargs in [
        ((8, 128, 5, 5), (128, 128, 3, 3), dict(padding=1)),  # 9 tiles of 2x2
        ((2, 128, 16, 16), (128, 128, 3, 3), dict(padding=1)),  # 32 tiles in the batch
        ((128, 16, 16), (128, 128, 3, 3), dict(padding=1)),  # unbatched: 16 tiles
        ((4, 32, 16, 16), (128, 32, 3, 3), dict(padding=1)),  # few input channels
        ((4, 128, 16, 16), (32, 128, 3, 3), dict(padding=1)),  # few output channels
        ((4, 128, 16, 16), (128, 128, 3, 3), dict(padding=1, stride=2)),
        ((4, 128, 16, 16), (128, 128, 3, 3), dict(padding=1, algorithm="im2col")),
        ((4, 128, 16, 16), (128, 128, 5, 5), dict(padding=2)),
    ]:
        cx = lm.Graph()
        conv(cx.tensor(x_shape), cx.tensor(w_shape), **kwargs)
        assert _winograd_nodes(cx) == 0, (x_shape, kwargs)


def test_symbolic_batch_and_gpu_rendering(rng):
    """One compiled graph serves batches of 1 and 3; the GPU backends render it."""
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(5, 6, 3, padding=1)
    cx = lm.Graph()
    layer = lm.nn.Conv2d(cx, 5, 6, 3, padding=1, algorithm="winograd")
    layer.load_state_dict(reference.state_dict())
    x = cx.tensor(("batch", 5, 9, 9))
    y = layer(x).retrieve()
    for compiler in (lm.CUDACompiler(), lm.OpenCLCompiler(), lm.MetalCompiler()):
        assert compiler.render(cx)
    cx.compile(lm.CPUCompiler())
    for batch in (1, 3):
        data = uniform(rng, (batch, 5, 9, 9))
        x.set(data)
        cx.execute()
        assert_matches_torch(y.numpy(), reference(torch.from_numpy(data)), atol=ATOL, rtol=RTOL)


def test_half_precision_stays_on_im2col():
    cx = lm.Graph()
    x = cx.tensor((1, 128, 16, 16), dtype=lm.float16)
    w = cx.tensor((128, 128, 3, 3), dtype=lm.float16)
    assert conv(x, w, padding=1).dtype == lm.float16
    assert _winograd_nodes(cx) == 0
    with pytest.raises(lm.ShapeError, match="float32"):
        conv(x, w, padding=1, algorithm="winograd")


def test_onnx_conv_takes_winograd_and_equals_onnxruntime(rng):
    """ONNX Conv is imported with algorithm="auto": a 128-channel 3x3 convolution with
    ReLU on 16x16 runs as Winograd and equals onnxruntime within atol 1e-4, rtol 1e-3."""
    import onnxruntime as ort

    from tests.onnx.export import export_onnx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU())
    x = rng.standard_normal((3, 128, 16, 16)).astype(np.float32)  # 48 tiles
    onnx_model = export_onnx(model, (torch.from_numpy(x),), ["images"], {})
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(onnx_model, cx)
    assert _winograd_tiles(cx) == [F4.alpha]
    inputs["images"].set(x)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"images": x})
    (ours,) = [t.numpy() for t in outputs.values()]
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stride=2), "stride"),
        (dict(dilation=2), "dilation"),
        (dict(groups=2), "groups"),
    ],
)
def test_winograd_where_it_cannot_apply_is_an_error(kwargs, message):
    cx = lm.Graph()
    x = cx.tensor((1, 4, 8, 8))
    w = cx.tensor((4, 4 // kwargs.get("groups", 1), 3, 3))
    with pytest.raises(lm.ShapeError, match=message):
        conv(x, w, algorithm="winograd", **kwargs)
    with pytest.raises(lm.ShapeError, match="kernel"):
        conv(x, cx.tensor((4, 4, 5, 5)), algorithm="winograd")
    with pytest.raises(lm.LuminalError, match="algorithm"):
        conv(x, cx.tensor((4, 4, 3, 3)), algorithm="fft")
    with pytest.raises(lm.LuminalError, match="algorithm"):
        lm.nn.Conv1d(cx, 4, 4, 3, algorithm="direct")
    assert "algorithm='winograd'" in repr(lm.nn.Conv2d(cx, 4, 4, 3, algorithm="winograd"))
    nodes = cx.num_nodes
    for module, args in ((lm.nn.Conv1d, (3,)), (lm.nn.Conv3d, (3,)), (lm.nn.Conv2d, (3, 2))):
        with pytest.raises(lm.ShapeError, match="algorithm='winograd' cannot apply"):
            module(cx, 4, 4, *args, algorithm="winograd")  # refused when built, not called
    assert cx.num_nodes == nodes
    assert "algorithm" not in repr(lm.nn.Conv2d(cx, 4, 4, 3))


@pytest.mark.parametrize("size, transforms, bound", [(14, F4, 5e-6), (7, F2, 1e-6)])
def test_error_at_resnet_scale_is_within_the_documented_bound(size, transforms, bound):
    """256 -> 256 channels, He-initialised weights, ResNet-18's 14x14 (F(4x4)) and 7x7
    (F(2x2)) maps: Winograd's error against a float64 convolution stays within
    docs/layers.md's bounds (of the largest output: F(4x4) 5e-6, 2.7e-6 measured; F(2x2)
    1e-6, 4.3e-7 measured) and within 10x im2col's (4.3e-7 and 4.7e-7)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 256, size, size)).astype(np.float32)
    w = (rng.standard_normal((256, 256, 3, 3)) * math.sqrt(2 / (9 * 256))).astype(np.float32)
    exact = torch.nn.functional.conv2d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1
    ).numpy()
    errors = {}
    for algorithm in ("winograd", "im2col"):
        cx = lm.Graph()
        y = conv(cx.tensor(x.shape).set(x), cx.tensor(w.shape).set(w), padding=1,
                 algorithm=algorithm).retrieve()  # fmt: skip
        if algorithm == "winograd":
            assert _winograd_tiles(cx) == [transforms.alpha]
        cx.compile(lm.CPUCompiler())
        cx.execute()
        errors[algorithm] = np.abs(y.numpy() - exact).max() / np.abs(exact).max()
    assert errors["winograd"] < bound, errors
    assert errors["winograd"] < 10 * errors["im2col"], errors

"""Quantized ops against onnxruntime, on cases the node suite leaves out: quotients on
rounding ties, per-axis and blocked int8 scales, int16, per-column zero points in
MatMulInteger, grouped QLinearConv with per-channel weight scales; and `divide`, the
correctly rounded quotient quantization relies on."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import luminal as lm
from luminal.onnx.backend import LuminalBackend
from luminal.onnx.ops.common import divide


def _check(node: onnx.NodeProto, feeds: dict, outputs: int = 1, opset: int = 21) -> None:
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outs = [
        helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in node.output[:outputs]
    ]
    graph = helper.make_graph([node], "case", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    ours = LuminalBackend.prepare(model).run(feeds)
    for a, b in zip(ours, expected, strict=True):
        assert a.dtype == b.dtype
        if a.dtype.kind in "iu":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_divide_is_correctly_rounded() -> None:
    """On the reference runtime (compiled, the CPU backend contracts multiply-adds and
    the correction is not exact: see docs/onnx.md)."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(20000) * 10.0 ** rng.integers(-6, 6, 20000)).astype(np.float32)
    b = (rng.standard_normal(20000) * 10.0 ** rng.integers(-6, 6, 20000)).astype(np.float32)
    cx = lm.Graph()
    x, y = cx.tensor((a.size,)), cx.tensor((b.size,))
    x.set(a)
    y.set(b)
    out = divide(x, y).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), a / b)


@pytest.mark.parametrize("kind", [np.uint8, np.int8, np.int16])
def test_quantize_ties_per_axis(kind: type) -> None:
    rng = np.random.default_rng(12)
    scale = np.array([0.019607844, 0.1, 0.37], np.float32)
    steps = rng.integers(-300, 300, (4, 3, 5)) + 0.5  # every quotient near a tie
    x = (steps * scale.reshape(1, 3, 1)).astype(np.float32)
    info = np.iinfo(kind)
    zero = np.array([0, 3, -2 if info.min < 0 else 7], kind)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    _check(node, {"x": x, "s": scale, "z": zero})
    back = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    q = rng.integers(info.min, info.max, (4, 3, 5)).astype(kind)
    _check(back, {"q": q, "s": scale, "z": zero})


def test_quantize_blocked_int8() -> None:
    rng = np.random.default_rng(13)
    x = rng.standard_normal((3, 10)).astype(np.float32) * 4
    scale = rng.uniform(0.01, 0.1, (3, 3)).astype(np.float32)
    zero = rng.integers(-5, 5, (3, 3)).astype(np.int8)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=4)
    _check(node, {"x": x, "s": scale, "z": zero})


def test_matmul_integer_column_zero_points() -> None:
    rng = np.random.default_rng(14)
    feeds = {
        "a": rng.integers(0, 255, (2, 5, 7)).astype(np.uint8),
        "b": rng.integers(-128, 127, (7, 4)).astype(np.int8),
        "az": np.array(12, np.uint8),
        "bz": rng.integers(-10, 10, (4,)).astype(np.int8),
    }
    _check(helper.make_node("MatMulInteger", list(feeds), ["y"]), feeds)


def test_qlinear_conv_grouped_per_channel() -> None:
    rng = np.random.default_rng(15)
    feeds = {
        "x": rng.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8),
        "xs": np.array(0.05, np.float32),
        "xz": np.array(128, np.uint8),
        "w": rng.integers(-100, 100, (6, 2, 3, 3)).astype(np.int8),
        "ws": rng.uniform(0.001, 0.01, (6,)).astype(np.float32),
        "wz": np.zeros((6,), np.int8),
        "ys": np.array(0.2, np.float32),
        "yz": np.array(100, np.uint8),
        "b": rng.integers(-500, 500, (6,)).astype(np.int32),
    }
    node = helper.make_node("QLinearConv", list(feeds), ["y"], group=2, pads=[1, 1, 1, 1])
    _check(node, feeds)

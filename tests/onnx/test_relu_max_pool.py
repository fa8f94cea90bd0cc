"""Relu -> MaxPool imported from ONNX is built as relu(max_pool(y)) with zero padding
(luminal.nn.pooling.relu_input): the same outputs as onnxruntime (all-negative windows,
padded borders; NaN is left out: onnxruntime's MaxPool skips it, luminal's propagates it
as torch's does, tested in tests/nn/test_pooling.py), the relu reduces over the pooled
shape (or is part of the CPU compiler's fused pool), and a MaxPool that also returns
Indices keeps pooling the relu's output (its indices are of that output)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import luminal as lm
from luminal.compiler.max_pool import PaddedMaxPool
from luminal.custom import CustomKernel
from tests.nn.test_pooling import relu_shapes


def _model(pool: onnx.NodeProto, shape: tuple[int, ...], outputs: list[str]) -> onnx.ModelProto:
    relu = helper.make_node("Relu", ["x"], ["r"])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    graph = helper.make_graph([relu, pool], "relu_pool", inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> tuple[list[np.ndarray], lm.Graph, list]:
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(model, cx)
    inputs["x"].set(x)
    outs = [t.retrieve() for t in outputs.values()]
    cx.compile(lm.CPUCompiler())
    cx.execute()
    return [t.numpy() for t in outs], cx, outs


def _input() -> np.ndarray:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    x[0, 0, :4, :4] = -np.abs(x[0, 0, :4, :4])  # all-negative windows, at the padded corner
    return x


@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [0, 0, 0, 0]])
def test_relu_then_max_pool_matches_onnxruntime(pads: list[int]) -> None:
    pool = helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=pads)
    model = _model(pool, (2, 3, 9, 9), ["y"])
    x = _input()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    (ours,), cx, (out,) = _run(model, x)
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=0)
    assert relu_shapes(cx, out) + _fused_relus(cx, out) == [tuple(out.view.shape)]


def _fused_relus(cx: lm.Graph, out: lm.GraphTensor) -> list[tuple]:
    """The shapes of the padded pools the CPU compiler fused with their relu
    (`compiler/max_pool.py`) among the nodes `out` reads."""
    return [
        tuple(n.shape)
        for n in map(cx.nodes.get, cx.topological_order([out.node_id]))
        if isinstance(n.op, CustomKernel)
        and isinstance(n.op.reference, PaddedMaxPool)
        and n.op.reference.relu
    ]


def test_relu_then_max_pool_with_indices_matches_onnxruntime() -> None:
    pool = helper.make_node(
        "MaxPool", ["r"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    model = _model(pool, (2, 3, 9, 9), ["y", "i"])
    x = _input()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})
    ours, _, _ = _run(model, x)
    for a, b in zip(ours, expected, strict=True):
        np.testing.assert_array_equal(a, b)

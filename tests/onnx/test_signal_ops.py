"""DFT and STFT against ONNX's reference on cases the node suite leaves out: a
dft_length that pads or truncates, complex input with onesided output, an inverse
onesided transform of odd length, and STFT of a batch of complex signals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from luminal.onnx.backend import LuminalBackend


def _check(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int = 20) -> None:
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    out = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "case", infos, out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    ours = LuminalBackend.prepare(model).run(feeds)[0]
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("length", "parts", "inverse", "onesided"),
    [
        (12, 1, 0, 0),
        (6, 2, 0, 1),
        (9, 2, 1, 0),
        (9, 2, 1, 1),
        (16, 2, 1, 1),
        (5, 1, 0, 1),
    ],
)
def test_dft_lengths_and_sides(length: int, parts: int, inverse: int, onesided: int) -> None:
    rng = np.random.default_rng(length * 10 + parts)
    feeds = {
        "x": rng.standard_normal((2, 8, 3, parts)).astype(np.float32),
        "n": np.array(length, np.int64),
        "axis": np.array(1, np.int64),
    }
    node = helper.make_node("DFT", ["x", "n", "axis"], ["Y"], inverse=inverse, onesided=onesided)
    _check(node, feeds)


def test_stft_complex_batch() -> None:
    rng = np.random.default_rng(7)
    feeds = {
        "signal": rng.standard_normal((3, 40, 2)).astype(np.float32),
        "step": np.array(6, np.int64),
        "window": np.hanning(10).astype(np.float32),
    }
    node = helper.make_node("STFT", ["signal", "step", "window"], ["Y"], onesided=0)
    _check(node, feeds, opset=17)

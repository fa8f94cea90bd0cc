"""Ops whose output shape depends on input values (NonZero, Unique, NonMaxSuppression)
and seeded training Dropout, against onnxruntime or ONNX's reference: computed at load
from inputs given as constants, the backend re-importing per distinct value."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
from luminal.onnx.backend import LuminalBackend
from luminal.onnx.errors import NeedsConstantInput


def _model(nodes: list, feeds: dict[str, np.ndarray], outputs: list[str], opset: int = 21):
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    graph = helper.make_graph(nodes, "case", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same(ours, expected) -> None:
    for a, b in zip(ours, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_nonzero_of_computed_mask_reimports_per_value() -> None:
    """NonZero(x > 0): the data itself fixes the output size; each distinct x gets its
    own graph, kept, so going back to an earlier value imports nothing new."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Constant", [], ["zero"], value_float=0.0),
        helper.make_node("Greater", ["x", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["y"]),
    ]
    first = rng.standard_normal((3, 5)).astype(np.float32)
    model = _model(nodes, {"x": first}, ["y"])
    rep = LuminalBackend.prepare(model)
    values = [first, rng.standard_normal((3, 5)).astype(np.float32), first]
    for x in values:
        _same(rep.run({"x": x}), _onnxruntime(model, {"x": x}))
    assert len(rep.specialised) == 2


def test_load_takes_the_data_of_nonzero_as_a_constant() -> None:
    x = np.array([[0, 2, 0], [1, 0, 3]], np.int64)
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"])
    with pytest.raises(NeedsConstantInput, match="'x'"):
        lm.onnx.load(model, lm.Graph())
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(model, cx, constants={"x": x})
    assert not inputs
    cx.execute()
    np.testing.assert_array_equal(outputs["y"].numpy(), np.array(np.nonzero(x)))


@pytest.mark.parametrize("sort", [0, 1])
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_unique_matches_onnxruntime(sort: int, axis: int | None) -> None:
    x = np.random.default_rng(1).integers(0, 3, (4, 6)).astype(np.float32)
    x[:, 4] = x[:, 1]  # a repeated column for the axis cases
    attrs = {"sorted": sort} if axis is None else {"sorted": sort, "axis": axis}
    outputs = ["y", "indices", "inverse", "counts"]
    model = _model([helper.make_node("Unique", ["x"], outputs, **attrs)], {"x": x}, outputs)
    _same(LuminalBackend.prepare(model).run({"x": x}), _onnxruntime(model, {"x": x}))


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_onnxruntime(center: int) -> None:
    rng = np.random.default_rng(2)
    corner = rng.uniform(0, 8, (2, 12, 2))
    size = rng.uniform(0.5, 4, (2, 12, 2))
    if center:
        boxes = np.concatenate([corner, size], -1)
    else:  # corners in either order (y2 < y1 is allowed)
        boxes = np.concatenate([corner + size, corner], -1)
    feeds = {
        "boxes": boxes.astype(np.float32),
        "scores": rng.uniform(0, 1, (2, 3, 12)).astype(np.float32),
        "limit": np.array([4], np.int64),
        "iou": np.array([0.3], np.float32),
        "floor": np.array([0.2], np.float32),
    }
    node = helper.make_node("NonMaxSuppression", list(feeds), ["selected"], center_point_box=center)
    model = _model([node], feeds, ["selected"])
    _same(LuminalBackend.prepare(model).run(feeds), _onnxruntime(model, feeds))


@pytest.mark.parametrize("ratio", [0.25, 0.6])
def test_seeded_training_dropout_matches_the_reference(ratio: float) -> None:
    """ONNX's reference reseeds numpy's RandomState(seed) at every run, so a seeded
    training Dropout's mask is a function of seed, shape and ratio."""
    feeds = {
        "x": np.random.default_rng(3).standard_normal((4, 7)).astype(np.float32),
        "ratio": np.array(ratio, np.float32),
        "training": np.array(True),
    }
    node = helper.make_node("Dropout", list(feeds), ["y", "mask"], seed=7)
    model = _model([node], feeds, ["y", "mask"])
    expected = ReferenceEvaluator(model).run(None, feeds)
    ours = LuminalBackend.prepare(model, compiler=lm.CPUCompiler()).run(feeds)
    _same(ours, expected)
    assert 0 < expected[1].sum() < expected[1].size

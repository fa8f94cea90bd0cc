"""Op rules against onnxruntime where ONNX's node suite leaves a case out: recurrent
layers with sequence_lens and every direction, Resize on a larger image, TopK with k
near the axis length, a run-time If, and int32 bitwise ops over the whole range."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import luminal as lm
from luminal.onnx.backend import LuminalBackend


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], outputs: list[str], opset=22):
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items()
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    graph = helper.make_graph([node], "case", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], compiled: bool = False):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    compiler = lm.CPUCompiler() if compiled else None
    ours = LuminalBackend.prepare(model, compiler=compiler).run(feeds)
    for a, b in zip(ours, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lens(op: str, direction: str) -> None:
    rng = np.random.default_rng(0)
    seq, batch, size, hidden = 5, 3, 4, 6
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {
        "X": rng.standard_normal((seq, batch, size)).astype(np.float32),
        "W": rng.standard_normal((dirs, gates * hidden, size)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5,
        "lens": np.array([5, 2, 3], np.int32),
        "h0": rng.standard_normal((dirs, batch, hidden)).astype(np.float32),
    }
    names = ["X", "W", "R", "B", "lens", "h0"]
    outputs = ["Y", "Y_h"]
    attributes: dict = {"hidden_size": hidden, "direction": direction}
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
        feeds["P"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32)
        names += ["c0", "P"]
        outputs.append("Y_c")
    if op == "GRU":
        attributes["linear_before_reset"] = 1
    node = helper.make_node(op, names, outputs, **attributes)
    _check(_model(node, feeds, outputs), feeds, compiled=direction == "bidirectional")


@pytest.mark.parametrize(
    ("mode", "transform"),
    [("nearest", "asymmetric"), ("linear", "half_pixel"), ("cubic", "pytorch_half_pixel")],
)
def test_resize_image(mode: str, transform: str) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 17, 23)).astype(np.float32)
    scales = np.array([1, 1, 1.7, 0.6], np.float32)
    node = helper.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode=transform,
    )
    model = _model(node, {"x": x}, ["y"])
    model.graph.initializer.append(onnx.numpy_helper.from_array(scales, "scales"))
    _check(model, {"x": x}, compiled=mode == "linear")


def test_top_k_most_of_the_axis() -> None:
    x = np.random.default_rng(2).integers(-5, 5, (4, 9)).astype(np.float32)
    k = np.array([7], np.int64)
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=0)
    model = _model(node, {"x": x}, ["values", "indices"])
    model.graph.initializer.append(onnx.numpy_helper.from_array(k, "k"))
    _check(model, {"x": x}, compiled=True)


def test_if_decided_at_run_time_selects_a_branch() -> None:
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)
    x = np.array([1.0, -2.0, np.inf], np.float32)
    model = _model(node, {"c": np.array(True), "x": x}, ["y"])
    rep = LuminalBackend.prepare(model)
    assert rep.constant_names == []  # a graph input decides: no re-import per value
    for flag in (True, False, True):
        (y,) = rep.run({"c": np.array(flag), "x": x})
        np.testing.assert_array_equal(y, x * x if flag else -x)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_whole_int32_range(op: str) -> None:
    rng = np.random.default_rng(3)
    info = np.iinfo(np.int32)
    a = rng.integers(info.min, info.max, (64,), dtype=np.int64, endpoint=True).astype(np.int32)
    b = rng.integers(info.min, info.max, (64,), dtype=np.int64, endpoint=True).astype(np.int32)
    a[:4], b[:4] = [info.min, info.max, -1, 0], [info.min, -1, info.max, info.min]
    node = helper.make_node(op, ["a", "b"], ["y"])
    feeds = {"a": a, "b": b}
    _check(_model(node, feeds, ["y"]), feeds, compiled=op == "BitwiseAnd")


def test_det_pivots_and_singular_matrices() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5, 5)).astype(np.float32)
    x[1, 0, 0] = 0.0  # needs a row swap
    x[2, 3] = x[2, 1] * 2.0  # singular
    x[3] = np.eye(5, dtype=np.float32)[[1, 0, 2, 4, 3]]  # a permutation: det 1
    x[4, :, 2] = 0.0  # a zero column
    model = _model(helper.make_node("Det", ["x"], ["y"]), {"x": x}, ["y"])
    (ours,) = LuminalBackend.prepare(model).run({"x": x})
    np.testing.assert_allclose(ours, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.array(0.0, np.float32), np.array(-np.inf, np.float32)),  # an attention mask
        (np.full((1, 1, 1), np.nan, np.float32), np.array(2.5, np.float32)),  # rank 3
        (np.array(7, np.int64), np.array(-3, np.int64)),
    ],
)
def test_where_between_two_known_scalars(a: np.ndarray, b: np.ndarray, compiled: bool) -> None:
    """Where(c, a, b) with a and b initializers indexes the table [b, a]: exact values
    (inf and NaN kept), the broadcast shape and type as onnxruntime's."""
    condition = np.random.default_rng(4).uniform(0, 1, (2, 3)) < 0.5
    inits = [onnx.numpy_helper.from_array(a, "a"), onnx.numpy_helper.from_array(b, "b")]
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "a", "b"], ["y"])],
        "where",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, (2, 3))],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"c": condition})
    compiler = lm.CPUCompiler() if compiled else None
    (ours,) = LuminalBackend.prepare(model, compiler=compiler).run({"c": condition})
    assert ours.shape == expected.shape and ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)

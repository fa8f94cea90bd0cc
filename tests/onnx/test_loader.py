"""lm.onnx.load: symbolic dims, folded shape arithmetic, external data, and errors that
name the node and leave the graph as it was."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import luminal as lm
from luminal import ops
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.onnx import OnnxImportError, UnsupportedOpError
from luminal.onnx.backend import LuminalBackend
from luminal.onnx.errors import NeedsConstantInput


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def flatten_model() -> onnx.ModelProto:
    """y = relu(x).reshape(Shape(x)[0], -1) @ w: the exporter's shape pattern."""
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(8, 1) / 8, "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0))),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="project"),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])
    return make_model(nodes, [x], [y], inits)


def expected_flatten(x: np.ndarray) -> np.ndarray:
    w = np.arange(8, dtype=np.float32).reshape(8, 1) / 8
    return np.maximum(x, 0).reshape(len(x), -1) @ w


def test_symbolic_batch_and_folded_shape_subgraph() -> None:
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(flatten_model(), cx)
    assert str(inputs["x"].shape[0]) == "batch"
    kinds = {type(node.op).__name__ for node in cx.nodes.values()}
    # Shape -> Gather -> Concat folded into the reshape: only x and the weight are inputs
    labels = sorted(node.op.label for node in cx.nodes.values() if isinstance(node.op, ops.Input))
    assert labels == ["w", "x"], (labels, kinds)
    for batch in (3, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 2)).astype(np.float32)
        inputs["x"].set(x)
        cx.execute()
        np.testing.assert_allclose(outputs["y"].numpy(), expected_flatten(x), rtol=1e-5)


def test_external_data(tmp_path) -> None:
    model = flatten_model()
    path = tmp_path / "model.onnx"
    onnx.save_model(
        model, path, save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(path, cx)
    x = np.ones((2, 4, 2), np.float32)
    inputs["x"].set(x)
    cx.execute()
    np.testing.assert_allclose(outputs["y"].numpy(), expected_flatten(x), rtol=1e-6)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(OnnxImportError, match="external data"):
        lm.onnx.load(path, lm.Graph())


def _graph_with_work() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    a = cx.tensor((2,), name="a")
    out = (a * 2.0).retrieve()
    return cx, a, out


def _still_works(cx: lm.Graph, a: lm.GraphTensor, out: lm.GraphTensor, nodes: int) -> None:
    assert cx.num_nodes == nodes
    a.set(np.array([1.0, -2.0], np.float32))
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), [2.0, -4.0])


def test_unsupported_op_names_op_domain_opset_and_node() -> None:
    cx, a, out = _graph_with_work()
    nodes = cx.num_nodes
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("NoSuchOp", ["r"], ["y"], name="mystery", domain="com.example"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(UnsupportedOpError) as info:
        lm.onnx.load(model, cx)
    text = str(info.value)
    for part in ("NoSuchOp", "com.example", "opset 3", "mystery"):
        assert part in text
    _still_works(cx, a, out, nodes)


def test_failure_while_building_rolls_back() -> None:
    """The Relu is added before the Reshape fails; the import removes it again."""
    cx, a, out = _graph_with_work()
    nodes = cx.num_nodes
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Reshape", ["r", "shape"], ["y"], name="bad_reshape"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([4, 2], np.int64), "shape")],
    )
    with pytest.raises(ShapeError, match="bad_reshape"):
        lm.onnx.load(model, cx)
    _still_works(cx, a, out, nodes)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "missing"])
def test_corrupt_files_raise_luminal_errors(tmp_path, damage: str) -> None:
    good = flatten_model().SerializeToString()
    path = tmp_path / "model.onnx"
    if damage == "garbage":
        path.write_bytes(b"\x08\xff\xff\xff not a protobuf" * 8)
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    cx, a, out = _graph_with_work()
    nodes = cx.num_nodes
    with pytest.raises(LuminalError):
        lm.onnx.load(path, cx)
    _still_works(cx, a, out, nodes)


def test_shape_from_an_input_needs_its_value() -> None:
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    with pytest.raises(NeedsConstantInput, match="constants"):
        lm.onnx.load(model, lm.Graph())
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(model, cx, constants={"shape": np.array([3, 2])})
    assert list(inputs) == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs["x"].set(x)
    cx.execute()
    np.testing.assert_array_equal(outputs["y"].numpy(), x.reshape(3, 2))
    # the backend specialises on the value and re-imports when it changes
    rep = LuminalBackend.prepare(model)
    np.testing.assert_array_equal(rep.run([x, np.array([3, 2])])[0], x.reshape(3, 2))
    np.testing.assert_array_equal(rep.run([x, np.array([6, 1])])[0], x.reshape(6, 1))


def test_int64_outside_int32_is_rejected_and_next_run_is_correct() -> None:
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
    )
    rep = LuminalBackend.prepare(model)
    with pytest.raises(DTypeError, match="int32"):
        rep.run([np.array([1, 2**40], np.int64)])
    (result,) = rep.run([np.array([3, -4], np.int64)])
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, [6, -8])

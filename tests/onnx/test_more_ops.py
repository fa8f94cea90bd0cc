"""TfIdfVectorizer (IDF/TFIDF weights, 1-D input, skips), MaxPool's Indices and
MaxUnpool, and TensorScatter against onnxruntime or ONNX's reference, beyond the node
suite's cases."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from luminal.onnx.backend import LuminalBackend


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], outputs: int, opset: int):
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outs = [
        helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
        for name in node.output[:outputs]
    ]
    graph = helper.make_graph([node], "case", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _check(node, feeds, outputs: int = 1, opset: int = 22, reference: bool = False) -> None:
    model = _model(node, feeds, outputs, opset)
    if reference:
        expected = ReferenceEvaluator(model).run(None, feeds)
    else:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        expected = session.run(None, feeds)
    ours = LuminalBackend.prepare(model).run(feeds)
    for a, b in zip(ours, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("shape", [(14,), (3, 9)])
def test_tfidf_weights_and_skips(mode: str, shape: tuple) -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(1, 5, shape).astype(np.int32)
    node = helper.make_node(
        "TfIdfVectorizer",
        ["x"],
        ["Y"],
        mode=mode,
        min_gram_length=1,
        max_gram_length=3,
        max_skip_count=2,
        ngram_counts=[0, 3, 9],
        ngram_indexes=[5, 0, 3, 1, 6, 2, 4, 7],
        pool_int64s=[2, 3, 4, 1, 2, 2, 3, 4, 4, 1, 2, 3],
        weights=[0.5, 2.0, 1.5, 3.0, 0.25, 1.0, 4.0, 2.5],
    )
    _check(node, {"x": x}, opset=9)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "pads"),
    [((2, 3, 7, 6), [3, 2], [1, 2], [1, 0, 1, 1]), ((1, 2, 4, 5, 3), [2, 2, 2], [1, 2, 1], None)],
)
def test_max_pool_indices(order: int, shape: tuple, kernel: list, strides: list, pads) -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(-4, 4, shape).astype(np.float32)  # ties: the first maximum wins
    extra = {"pads": pads} if pads else {}
    node = helper.make_node(
        "MaxPool",
        ["x"],
        ["Y", "I"],
        kernel_shape=kernel,
        strides=strides,
        storage_order=order,
        **extra,
    )
    _check(node, {"x": x}, outputs=2)


def test_max_unpool_overlapping_windows() -> None:
    """Overlapping windows pick one element twice: it is written once, not summed."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["Y", "I"], kernel_shape=[3, 3], strides=[1, 1])
    model = _model(pool, {"x": x}, 2, 22).SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    values, indices = session.run(None, {"x": x})
    feeds = {"values": values, "indices": indices}
    node = helper.make_node(
        "MaxUnpool", ["values", "indices"], ["Z"], kernel_shape=[3, 3], strides=[1, 1]
    )
    _check(node, feeds)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1])
def test_tensor_scatter(mode: str, axis: int) -> None:
    rng = np.random.default_rng(9)
    past = rng.standard_normal((3, 7, 2, 4)).astype(np.float32)
    if axis == -2:
        past = past.transpose(0, 2, 1, 3).copy()  # (3, 2, 7, 4)
    update_shape = list(past.shape)
    update_shape[axis] = 3
    feeds = {
        "past": past,
        "update": rng.standard_normal(update_shape).astype(np.float32),
        "where": np.array([0, 4, 6] if mode == "circular" else [0, 4, 2], np.int64),
    }
    node = helper.make_node("TensorScatter", list(feeds), ["Y"], mode=mode, axis=axis)
    _check(node, feeds, opset=24, reference=True)


def _bitcast_model(kind: int, to: int, n: int) -> onnx.ModelProto:
    node = helper.make_node("BitCast", ["x"], ["y"], to=to)
    graph = helper.make_graph(
        [node],
        "bitcast",
        [helper.make_tensor_value_info("x", kind, [n])],
        [helper.make_tensor_value_info("y", to, [n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


@pytest.mark.parametrize("compiled", [False, True])
def test_bitcast_float_int_every_class(compiled: bool) -> None:
    """Normals, subnormals, +-0, +-inf, the largest and smallest magnitudes and NaN
    (the quiet NaN, whose bits numpy gives) reinterpret exactly both ways."""
    import luminal as lm

    rng = np.random.default_rng(10)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1e-45,
            -1e-45,
            1.1754942e-38,
            1.1754944e-38,
            3.4028235e38,
            -3.4028235e38,
            1.0,
            -2.5,
            0.1,
        ],
        np.float32,
    )
    floats = np.concatenate([special, rng.standard_normal(200).astype(np.float32) * 1e3])
    bits = rng.integers(-(2**31), 2**31, 400, dtype=np.int64).astype(np.int32)
    bits = bits[~np.isnan(bits.view(np.float32))]  # a NaN's payload is not kept
    compiler = lm.CPUCompiler() if compiled else None
    to_int = LuminalBackend.prepare(_bitcast_model(1, 6, floats.size), compiler=compiler)
    np.testing.assert_array_equal(to_int.run([floats])[0], floats.view(np.int32))
    to_float = LuminalBackend.prepare(_bitcast_model(6, 1, bits.size), compiler=compiler)
    np.testing.assert_array_equal(to_float.run([bits])[0].view(np.int32), bits)


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("ii->i", [(4, 4)]),
        ("ii", [(3, 3)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("iji->j", [(3, 5, 3)]),
        ("ij,jj->i", [(2, 4), (4, 4)]),
        ("iii->i", [(3, 3, 3)]),
    ],
)
def test_einsum_diagonals(equation: str, shapes: list) -> None:
    rng = np.random.default_rng(17)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    node = helper.make_node("Einsum", list(feeds), ["Y"], equation=equation)
    model = _model(node, feeds, 1, 12)
    ours = LuminalBackend.prepare(model).run(feeds)[0]
    np.testing.assert_allclose(ours, np.einsum(equation, *feeds.values()), rtol=1e-5, atol=1e-6)

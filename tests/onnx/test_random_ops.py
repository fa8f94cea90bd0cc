"""Seeded random ops against ONNX's reference evaluator, which draws from a fresh
numpy RandomState(seed) at every run: the same bits, reference and compiled."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
from luminal.onnx.backend import LuminalBackend
from luminal.onnx.errors import UnsupportedOpError


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], out_type: int) -> onnx.ModelProto:
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    out = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([node], "case", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return model


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **prepare: object) -> np.ndarray:
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    (ours,) = LuminalBackend.prepare(model, **prepare).run(feeds)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    if expected.dtype == np.float64:  # computed as float32 (docs/onnx.md), rounded once
        expected = expected.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(ours, expected)
    return ours


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("RandomUniform", {"low": -2.0, "high": 3.0}),
        ("RandomNormal", {"mean": 1.5, "scale": 0.25}),
        ("RandomUniform", {"dtype": TensorProto.FLOAT16}),
    ],
)
def test_seeded_generators_match_the_reference(op: str, attrs: dict) -> None:
    node = helper.make_node(op, [], ["y"], seed=5.0, shape=[3, 4], **attrs)
    out_type = attrs.get("dtype", TensorProto.FLOAT)
    values = _check(_model(node, {}, out_type), {})
    assert len(np.unique(values)) == values.size  # draws, not a constant fill


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike"])
def test_seeded_like_generators_take_the_shape_and_type_of_their_input(op: str) -> None:
    feeds = {"x": np.zeros((2, 3, 5), np.float32)}
    node = helper.make_node(op, ["x"], ["y"], seed=11.0)
    _check(_model(node, feeds, TensorProto.FLOAT), feeds)
    node = helper.make_node(op, ["x"], ["y"], seed=11.0, dtype=TensorProto.DOUBLE)
    _check(_model(node, feeds, TensorProto.DOUBLE), feeds)


@pytest.mark.parametrize("compiled", [False, True])
def test_seeded_bernoulli_draws_at_every_run_as_the_reference(compiled: bool) -> None:
    """Run-time probabilities: the reference reseeds at every run, so one p always gives
    one output, and a different p a different draw (p == 0 and p == 1 are certain)."""
    rng = np.random.default_rng(2)
    p = rng.uniform(0, 1, (4, 50)).astype(np.float32)
    p[0, :5], p[1, :5] = 0.0, 1.0
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0)
    model = _model(node, {"p": p}, TensorProto.FLOAT)
    prepare = {"compiler": lm.CPUCompiler()} if compiled else {}
    rep = LuminalBackend.prepare(model, **prepare)
    for probabilities in [p, rng.uniform(0, 1, (4, 50)).astype(np.float32), p]:
        (ours,) = rep.run({"p": probabilities})
        (expected,) = ReferenceEvaluator(model).run(None, {"p": probabilities})
        np.testing.assert_array_equal(ours, expected)
    (ours,) = rep.run({"p": p})
    assert not ours[0, :5].any() and ours[1, :5].all()


def test_seeded_bernoulli_output_type_and_constant_probabilities() -> None:
    p = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=9.0, dtype=TensorProto.INT32)
    _check(_model(node, {"p": p}, TensorProto.INT32), {"p": p})
    constant = helper.make_tensor("p", TensorProto.FLOAT, p.shape, p.reshape(-1))
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["p"], value=constant), node],
        "case",
        [],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    _check(model, {})


@pytest.mark.parametrize("op", ["RandomUniform", "RandomNormalLike", "Bernoulli"])
def test_unseeded_random_ops_are_rejected(op: str) -> None:
    feeds = {} if op == "RandomUniform" else {"x": np.full((2, 2), 0.5, np.float32)}
    attrs = {"shape": [2, 2]} if op == "RandomUniform" else {}
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    with pytest.raises(UnsupportedOpError, match="unseeded"):
        LuminalBackend.prepare(_model(node, feeds, TensorProto.FLOAT))


def test_bernoulli_clamps_probabilities_outside_the_unit_interval() -> None:
    """ONNX defines p in [0, 1] only (the reference raises elsewhere): luminal clamps,
    and NaN draws 0, so the draw equals the reference's on the clamped probabilities."""
    p = np.array([-0.5, 1.5, np.nan, 0.3, -2.0, 7.0, 0.9, np.nan], np.float32)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=4.0)
    model = _model(node, {"p": p}, TensorProto.FLOAT)
    (ours,) = LuminalBackend.prepare(model).run({"p": p})
    clamped = np.nan_to_num(p, nan=0.0).clip(0, 1)
    (expected,) = ReferenceEvaluator(model).run(None, {"p": clamped})
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(ours[[0, 1, 2, 4, 5, 7]], [0, 1, 0, 0, 1, 0])

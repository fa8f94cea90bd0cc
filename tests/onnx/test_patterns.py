"""Exporter patterns rewritten at import (luminal/onnx/patterns.py): the rewrite fires
on PyTorch's NaN-guarded attention and equals onnxruntime on the inputs where the guard
matters (a row masked everywhere, NaN in V, a NaN score)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import luminal as lm
from luminal import ops
from luminal.onnx import patterns
from luminal.onnx.backend import LuminalBackend


def _attention(zero: float = 0.0) -> onnx.ModelProto:
    """softmax(q k^T / sqrt(8) + Where(mask, 0, -inf)) with SDPA's export guard, times v
    (the scale split as sqrt on q and on k, as PyTorch exports it)."""
    floats = [("q", (2, 3, 4, 8)), ("k", (2, 3, 8, 5)), ("v", (2, 3, 5, 6))]
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in floats]
    infos.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, (2, 1, 4, 5)))
    constants = {
        "zero": np.array(0.0, np.float32),
        "ninf": np.array(-np.inf, np.float32),
        "guard": np.array(zero, np.float32),
        "root_scale": np.array(8**-0.25, np.float32),
    }
    nodes = [
        helper.make_node("Constant", [], [n], value=numpy_helper.from_array(v, n))
        for n, v in constants.items()
    ]
    nodes += [
        helper.make_node("Mul", ["q", "root_scale"], ["q_scaled"]),  # as SDPA exports
        helper.make_node("Mul", ["root_scale", "k"], ["k_scaled"]),
        helper.make_node("MatMul", ["q_scaled", "k_scaled"], ["scores"]),
        helper.make_node("Where", ["mask", "zero", "ninf"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "guard", "p"], ["w"]),
        helper.make_node("MatMul", ["w", "v"], ["out"]),
    ]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "attention", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {
        "q": rng.standard_normal((2, 3, 4, 8)).astype(np.float32),
        "k": rng.standard_normal((2, 3, 8, 5)).astype(np.float32),
        "v": rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
        "mask": rng.uniform(0, 1, (2, 1, 4, 5)) < 0.7,
    }
    feeds["mask"][0, 0, 1] = False  # query row 1 of batch 0 sees no key: NaN -> 0
    feeds["mask"][1, 0, 2] = True
    feeds["v"][1, 2, 3, 4] = np.nan  # a NaN value stays NaN where its weight is finite
    feeds["q"][1, 1, 3, 0] = np.nan  # a NaN score: the whole row is 0
    return feeds


def test_guarded_attention_is_rewritten() -> None:
    nodes = patterns.rewrite(_attention().graph, 17)
    kinds = [n.op_type for n in nodes]
    assert "NanRowsZeroMatMul" in kinds and "IsNaN" not in kinds
    assert kinds.count("Where") == 1  # the mask's select stays
    (scores,) = [n for n in nodes if n.op_type == "MatMul"]
    assert list(scores.input) == ["q", "k"]  # the two sqrt scales moved onto the scores
    (scale,) = [n for n in nodes if n.op_type == "Mul"]
    assert scale.output[0] == "scores"


def test_a_nonzero_guard_is_not_rewritten() -> None:
    """Where(IsNaN(P), c, P) @ V with c != 0 is not 0 on NaN rows: left as it is."""
    kinds = [n.op_type for n in patterns.rewrite(_attention(zero=1.0).graph, 17)]
    assert "NanRowsZeroMatMul" not in kinds


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_rewritten_attention_equals_onnxruntime(compiled: bool) -> None:
    model, feeds = _attention(), _feeds()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, feeds)
    assert (expected[0, :, 1] == 0).all() and (expected[1, 1, 3] == 0).all()
    assert np.isnan(expected[1, 2, :, 4]).any()
    compiler = lm.CPUCompiler() if compiled else None
    rep = LuminalBackend.prepare(model, compiler=compiler)
    (ours,) = rep.run(feeds)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    if compiled:  # P is read by the product alone, so the attention fuses
        assert any(isinstance(n.op, ops.FusedAttention) for n in rep.graph.nodes.values())


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_a_masked_row_times_an_infinite_value_is_nan_as_in_onnxruntime() -> None:
    """A row of zeros times V is NaN in a column of V holding inf (0 * inf): the replaced
    row is that product, not a row of zeros."""
    model, feeds = _attention(), _feeds()
    feeds["mask"][1, 0, 0] = False  # batch 1, query 0 sees no key
    feeds["v"][1, 0, 2, 1] = np.inf
    (expected,) = _onnxruntime(model, feeds)
    assert np.isnan(expected[1, 0, 0, 1])
    (ours,) = LuminalBackend.prepare(model).run(feeds)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_a_rank_three_scale_keeps_its_broadcast_rank() -> None:
    """MatMul(Mul(q, a), k) with a of shape (1, 1, 1): ONNX broadcasts to rank 3."""
    floats = TensorProto.FLOAT
    infos = [
        helper.make_tensor_value_info("q", floats, (3, 4)),
        helper.make_tensor_value_info("k", floats, (4, 5)),
    ]
    scale = numpy_helper.from_array(np.full((1, 1, 1), 0.5, np.float32), "a")
    nodes = [
        helper.make_node("Constant", [], ["a"], value=scale),
        helper.make_node("Mul", ["q", "a"], ["qs"]),
        helper.make_node("MatMul", ["qs", "k"], ["out"]),
    ]
    out = helper.make_tensor_value_info("out", floats, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", infos, [out]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    rng = np.random.default_rng(0)
    feeds = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in (("q", (3, 4)), ("k", (4, 5)))
    }
    (expected,) = _onnxruntime(model, feeds)
    (ours,) = LuminalBackend.prepare(model).run(feeds)
    assert ours.shape == expected.shape == (1, 3, 5)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_a_scale_read_inside_an_if_branch_is_not_dropped() -> None:
    """An If branch reading the scaled value by name counts as a reader: the Mul stays."""
    floats = TensorProto.FLOAT
    infos = [
        helper.make_tensor_value_info("q", floats, (3, 4)),
        helper.make_tensor_value_info("k", floats, (4, 5)),
        helper.make_tensor_value_info("c", TensorProto.BOOL, ()),
    ]

    def branch(name: str) -> onnx.GraphProto:
        body_out = [helper.make_tensor_value_info(name, floats, (3, 4))]
        return helper.make_graph([helper.make_node("Identity", ["qs"], [name])], name, [], body_out)

    nodes = [
        helper.make_node(
            "Constant", [], ["a"], value=numpy_helper.from_array(np.array(0.5, np.float32), "a")
        ),
        helper.make_node("Mul", ["q", "a"], ["qs"]),
        helper.make_node("MatMul", ["qs", "k"], ["out"]),
        helper.make_node("If", ["c"], ["side"], then_branch=branch("t"), else_branch=branch("e")),
    ]
    outs = [helper.make_tensor_value_info(n, floats, None) for n in ("out", "side")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", infos, outs), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    rng = np.random.default_rng(0)
    feeds = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in (("q", (3, 4)), ("k", (4, 5)))
    }
    feeds["c"] = np.array(True)
    expected = _onnxruntime(model, feeds)
    ours = LuminalBackend.prepare(model).run(feeds)
    for got, want in zip(ours, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_nan_in_every_column_of_v_keeps_finite_rows_nan_and_masked_rows_too(
    compiled: bool,
) -> None:
    """The rows replaced are the product's all-NaN rows: with a NaN in every column of V a
    finite row of P gives such a row too (NaN * weight), and so does the replacement (0 *
    NaN); an inf in one column keeps finite rows inf there (where weighted) and the masked
    row NaN."""
    model, feeds = _attention(), _feeds()
    feeds["mask"][1, 0, 0] = False  # batch 1, query 0 sees no key
    feeds["v"][1, 0, np.arange(6) % 5, np.arange(6)] = np.nan
    feeds["v"][1, 1, np.arange(6) % 5, np.arange(6)] = np.nan
    feeds["v"][1, 1, 4, 5] = np.inf
    feeds["v"][1, 1, 0, 5] = 1.0  # column 5 of head 1: inf, no NaN
    (expected,) = _onnxruntime(model, feeds)
    assert np.isnan(expected[1, 0]).all()
    assert np.isnan(expected[1, 1, 0]).all() and not np.isnan(expected[1, 1, 1:, 5]).all()
    compiler = lm.CPUCompiler() if compiled else None
    (ours,) = LuminalBackend.prepare(model, compiler=compiler).run(feeds)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)

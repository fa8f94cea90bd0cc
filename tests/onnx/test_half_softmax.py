"""float16/bfloat16 Softmax as ONNX defines it: its function body (ReduceMax, Sub, Exp,
ReduceSum, Div) with every value in the input's type. Checked against ONNX's reference
evaluator (which computes in numpy float16) and, where that evaluator adds roundings of
its own (numpy sums a non-contiguous float16 axis, and every bfloat16 axis, in the
narrow type; it ignores opset 11's 2-D coercion), against the body evaluated in float64
with those roundings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
from luminal.onnx.backend import LuminalBackend

TYPES = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}


def _model(elem: int, shape: tuple[int, ...], axis: int, opset: int) -> onnx.ModelProto:
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node],
        "softmax",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _body(x: np.ndarray, axis: int, opset: int) -> np.ndarray:
    """ONNX's Softmax body in float64, each of its values rounded to x's type."""
    shape, narrow = x.shape, x.dtype
    z = x.astype(np.float64)
    if opset < 13:  # the input is seen as 2-D, split at `axis`
        z, axis = z.reshape(int(np.prod(shape[:axis])), -1), 1

    def rounded(t: np.ndarray) -> np.ndarray:
        return t.astype(narrow).astype(np.float64)

    exps = rounded(np.exp(rounded(z - z.max(axis, keepdims=True))))
    return (exps / rounded(exps.sum(axis, keepdims=True))).reshape(shape).astype(narrow)


def _x(elem: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((6, 40, 33)) * 3).astype(TYPES[elem])


@pytest.mark.parametrize("compiled", [False, True])
def test_float16_softmax_equals_the_reference(compiled: bool) -> None:
    x = _x(TensorProto.FLOAT16, 1)
    model = _model(TensorProto.FLOAT16, x.shape, -1, 13)
    prepare = {"compiler": lm.CPUCompiler()} if compiled else {}
    (ours,) = LuminalBackend.prepare(model, **prepare).run({"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert ours.dtype == np.float16
    np.testing.assert_array_equal(ours, expected)
    rounded_once = (np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))).astype(np.float64)
    rounded_once = (rounded_once / rounded_once.sum(-1, keepdims=True)).astype(np.float16)
    assert not np.array_equal(ours, rounded_once)  # the roundings are what is tested


@pytest.mark.parametrize("elem", list(TYPES))
@pytest.mark.parametrize(("axis", "opset"), [(-1, 13), (0, 13), (1, 11)])
def test_half_softmax_rounds_where_the_function_body_does(elem: int, axis: int, opset: int) -> None:
    """Equal to the body's roundings but for a float32 sum's last bit: at most 0.1 % of
    the values, each by one step of the type."""
    x = _x(elem, 2 + axis + opset)
    (ours,) = LuminalBackend.prepare(_model(elem, x.shape, axis, opset)).run({"x": x})
    expected = _body(x, axis, opset)
    assert ours.dtype == expected.dtype
    ours64, expected64 = ours.astype(np.float64), expected.astype(np.float64)
    differ = ours64 != expected64
    assert differ.mean() <= 1e-3
    step = float(ml_dtypes.finfo(expected.dtype).eps) * np.abs(expected64)  # >= one ulp
    assert (np.abs(ours64 - expected64)[differ] <= step[differ]).all()

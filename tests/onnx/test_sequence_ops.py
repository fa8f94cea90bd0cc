"""Sequence values: ops the node suite does not cover (SequenceErase, SequenceAt from
the end, ConcatFromSequence with a new axis) against ONNX's reference, reference
runtime and compiled; a sequence input re-imported when its length changes; and the
one sequence case the harness cannot compare, checked element by element."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
from luminal.onnx.backend import LuminalBackend


def _model() -> onnx.ModelProto:
    """seq (input) -> insert x at 1 -> erase the last -> at(-1) + concat(new axis)."""
    seq_type = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("Constant", [], ["one"], value_int=1),
        helper.make_node("Constant", [], ["last"], value_int=-1),
        helper.make_node("SequenceInsert", ["seq", "x", "one"], ["s1"]),
        helper.make_node("SequenceErase", ["s1"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "last"], ["tail"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["stacked"], axis=1, new_axis=1),
        helper.make_node("SequenceLength", ["s2"], ["count"]),
    ]
    graph = helper.make_graph(
        nodes,
        "seq",
        [seq_type, helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("tail", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("stacked", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("count", TensorProto.INT64, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("compiled", [False, True])
def test_sequence_ops_and_length_changes(compiled: bool) -> None:
    rng = np.random.default_rng(16)
    model = _model()
    rep = LuminalBackend.prepare(model, compiler=lm.CPUCompiler() if compiled else None)
    for length in (3, 5):  # a new length re-imports the model
        feeds = {
            "seq": [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(length)],
            "x": rng.standard_normal((2, 3)).astype(np.float32),
        }
        expected = ReferenceEvaluator(model).run(None, feeds)
        ours = rep.run(feeds)
        for a, b in zip(ours, expected, strict=True):
            np.testing.assert_array_equal(a, b)
            assert np.asarray(a).dtype == np.asarray(b).dtype


def test_loop_sequence_the_harness_cannot_compare() -> None:
    """test_loop16_seq_none is excluded only because onnx's Runner cannot compare a
    sequence starting with a 0-d tensor; its outputs match element by element."""
    from tests.onnx.test_node_suite import NODE_CASES  # loaded once per session

    case = NODE_CASES["test_loop16_seq_none"]
    for inputs, expected in case.data_sets:
        ours = LuminalBackend.prepare(case.model).run(inputs)
        assert len(ours[0]) == len(expected[0])
        for a, b in zip(ours[0], expected[0], strict=True):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype

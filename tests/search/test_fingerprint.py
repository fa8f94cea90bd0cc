"""The search cache's key: opaque Function ops are told apart by their label."""

import numpy as np

import luminal as lm
from luminal import ops
from luminal.search.fingerprint import graph_fingerprint


def _graph_with_function(label: str) -> lm.Graph:
    cx = lm.Graph()
    x = cx.tensor((4,))
    negated = cx.add_node(ops.Function(label, np.negative), [x], x.shape, lm.float32)
    (negated * 2.0).retrieve()
    return cx


def test_function_label_is_part_of_the_fingerprint() -> None:
    negate = graph_fingerprint(_graph_with_function("negate"))
    assert negate == graph_fingerprint(_graph_with_function("negate"))
    assert negate != graph_fingerprint(_graph_with_function("reciprocal"))

"""Graph.carry: state moved from one successful execute() to the next, in the reference
runtime and compiled; a failed run moves nothing; a rolled-back op leaves no carry."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm


def _accumulator() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    x = cx.tensor((3,)).set(np.ones(3, np.float32))
    total = cx.tensor((3,), name="total").set(np.zeros(3, np.float32))
    new = total + x
    cx.carry(total, new)
    return cx, x, total, new


@pytest.mark.parametrize("compiled", [False, True])
def test_state_carries_between_runs(compiled):
    cx, x, total, new = _accumulator()
    if compiled:
        cx.compile(lm.CPUCompiler())
    for step in range(1, 4):
        x.set(np.full(3, step, np.float32))
        cx.execute()
    np.testing.assert_array_equal(total.numpy(), np.full(3, 6.0))
    np.testing.assert_array_equal(new.numpy(), np.full(3, 6.0))


def test_a_failed_run_carries_nothing():
    cx, x, total, _ = _accumulator()
    cx.execute()
    index = cx.tensor((1,), lm.int32).set(np.array([5], np.int32))
    cx.tensor((2, 3)).set(np.ones((2, 3), np.float32)).gather(index).retrieve()
    with pytest.raises(lm.ExecutionError):
        cx.execute()
    np.testing.assert_array_equal(total.numpy(), np.ones(3))
    index.set(np.array([1], np.int32))
    cx.execute()
    np.testing.assert_array_equal(total.numpy(), np.full(3, 2.0))


def test_errors_and_rollback():
    cx, x, total, _ = _accumulator()
    with pytest.raises(lm.GraphError, match="must be a graph input"):
        cx.carry(x + 1, x)
    with pytest.raises(lm.ShapeError, match="next value"):
        cx.carry(total, x.sum())
    with pytest.raises(lm.ShapeError), cx.atomic():
        cx.carry(total, total * 2)
        x.reshape((4,))
    assert len(cx.carries) == 1
    cx.execute()
    np.testing.assert_array_equal(total.numpy(), np.ones(3))

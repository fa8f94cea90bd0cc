"""Constants in the e-graph are the runtime's numbers: float scalars fold as float32
computes them (16777217.0 is 16777216 there), int32 scalars are not folded (egglog
computes in f64, where 2**31 - 1 + 1 does not wrap: the folded constant overflowed
int32), and -0.0 keeps its sign (egglog took it for 0.0: 1 / -0.0 became +inf)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.egraph import EGraphCompiler


def _fold(a: float, b: float, op: str, dtype: lm.DType) -> tuple[np.ndarray, np.ndarray, int]:
    """(reference result, result after the algebra rules, nodes left)."""
    cx = lm.Graph()
    p, q = cx.constant(a, dtype), cx.constant(b, dtype)
    y = (p + q if op == "add" else p * q).retrieve()
    cx.execute()
    before = y.numpy().copy()
    cx.compile(EGraphCompiler(rulesets=("algebra",)))
    cx.execute()
    return before, y.numpy(), cx.num_nodes


@pytest.mark.parametrize(
    "a, b, op", [(2**31 - 1, 1, "add"), (65536, 65537, "mul"), (-(2**31), -1, "mul")]
)
def test_int32_constants_wrap_as_at_run_time(a, b, op) -> None:
    before, after, _ = _fold(a, b, op, lm.int32)
    expected = np.array(a, np.int64) + b if op == "add" else np.array(a, np.int64) * b
    wrapped = ((expected + 2**31) % 2**32 - 2**31).astype(np.int32)
    np.testing.assert_array_equal(before, wrapped)
    np.testing.assert_array_equal(after, wrapped)


@pytest.mark.parametrize(
    "a, b, op", [(0.1, 0.2, "add"), (1.5, -2.25, "mul"), (16777217.0, 3.0, "mul")]
)
def test_float32_constants_fold_to_the_runtime_value(a, b, op) -> None:
    before, after, nodes = _fold(a, b, op, lm.float32)
    np.testing.assert_array_equal(after, before)
    assert nodes == 1


def test_negative_zero_keeps_its_sign_next_to_a_zero() -> None:
    cx = lm.Graph()
    x = cx.tensor((2,)).set(np.array([1.0, 2.0], np.float32))
    shifted = (x + cx.constant(0.0)).retrieve()
    scaled = (x * cx.constant(-0.0).reciprocal()).retrieve()
    cx.compile(EGraphCompiler(rulesets=("algebra",)))
    cx.execute()
    np.testing.assert_array_equal(shifted.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(scaled.numpy(), [-np.inf, -np.inf])

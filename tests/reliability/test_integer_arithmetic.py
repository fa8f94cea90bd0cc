"""Exact int32 arithmetic (issue 11 leftovers): `//` and `%` equal numpy's over the whole
int32 range in both runtimes (there is no integer-divide primitive: `//` is a float32
estimate corrected with exact integer arithmetic), and int32 sums wrap modulo 2**32 as
numpy's do, including the generated C's loop, unrolled and multi-axis reductions."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm

INT_MIN = int(np.iinfo(np.int32).min)
INT_MAX = int(np.iinfo(np.int32).max)
PAIRS = 48  # (numerator, divisor) pairs per run

EDGES = sorted(
    {0, 1, -1, 2, -2, 3, -3, 7, INT_MIN, INT_MIN + 1, INT_MAX, INT_MAX - 1}
    | {sign * (1 << k) + delta for k in range(31) for sign in (1, -1) for delta in (-1, 0, 1)}
    - {2**31}
)
int32s = st.one_of(st.integers(INT_MIN, INT_MAX), st.sampled_from(EDGES), st.integers(-300, 300))


def _wrap(value: int) -> int:
    """A Python int as int32 (modulo 2**32, as numpy's int32 arithmetic)."""
    return (value + 2**31) % 2**32 - 2**31


def _python_floor_div_mod(a: int, b: int) -> tuple[int, int]:
    """numpy's int32 results from Python's exact // and %: x // 0 == x % 0 == 0 and
    INT_MIN // -1 wraps to INT_MIN."""
    if b == 0:
        return 0, 0
    return _wrap(a // b), a % b


def _division_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list[lm.GraphTensor]]:
    cx = lm.Graph()
    a = cx.tensor((PAIRS,), dtype=lm.int32)
    b = cx.tensor((PAIRS,), dtype=lm.int32)
    return cx, a, b, [(a // b).retrieve(), (a % b).retrieve()]


@pytest.fixture(scope="module")
def division_runtimes() -> list[tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list]]:
    """The same graph twice: run by the reference runtime and compiled for the CPU."""
    reference = _division_graph()
    compiled = _division_graph()
    rng = np.random.default_rng(0)
    compiled[1].set(rng.integers(INT_MIN, INT_MAX, PAIRS, dtype=np.int32, endpoint=True))
    compiled[2].set(rng.integers(INT_MIN, INT_MAX, PAIRS, dtype=np.int32, endpoint=True))
    compiled[0].compile(lm.CPUCompiler())
    return [reference, compiled]


def _run_division(runtime: tuple, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    cx, ta, tb, outputs = runtime
    ta.set(a)
    tb.set(b)
    cx.execute()
    return tuple(o.numpy() for o in outputs)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(int32s, int32s), min_size=PAIRS, max_size=PAIRS))
def test_int32_floor_division_and_modulo_equal_numpy_over_the_whole_range(
    division_runtimes: list, pairs: list[tuple[int, int]]
) -> None:
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    with np.errstate(all="ignore"):
        quotient, remainder = np.floor_divide(a, b), np.mod(a, b)
    for runtime in division_runtimes:
        got_quotient, got_remainder = _run_division(runtime, a, b)
        np.testing.assert_array_equal(got_quotient, quotient)
        np.testing.assert_array_equal(got_remainder, remainder)


# (numerator, divisor): float32 alone gets each of these wrong, or C would trap
EDGE_TABLE = [
    (INT_MIN, 3),  # -715827883 (float32 alone gave a positive number)
    (INT_MIN, -3),
    (INT_MIN, -1),  # INT_MIN (2**31 wraps), as numpy
    (INT_MIN, 1),
    (INT_MIN, 0),
    (INT_MIN, INT_MIN),
    (INT_MIN, INT_MAX),
    (INT_MAX, INT_MIN),
    (INT_MAX, -2),  # the exact multiple a - a % b (2**31) does not fit int32
    (INT_MAX, 2),
    (INT_MAX, -1),
    (INT_MAX, 1),
    (INT_MAX, INT_MAX),
    (INT_MIN + 1, -1),
    (INT_MIN + 1, 2),
    (INT_MAX - 63, 1),  # rounds to 2**31 in float32
    (-1, INT_MIN),
    (1, INT_MIN),
    (-1, INT_MAX),
    (1, -INT_MAX),
    (0, 0),
    (7, 0),
    (-7, 2),
    (7, -2),
    (2**24 + 1, 3),
    (2**24 + 1, -1),
    (-(2**30) - 1, 2**16 + 1),
    (2**31 - 2**7 - 1, 2**7 + 1),
    (123456789, -7),
    (-2147483000, 46341),
    (2147483000, -46340),
]


def test_edge_case_table_in_both_runtimes_against_python_integers() -> None:
    """A fixed table whose oracle is Python's exact integer // and %, not numpy; two runs
    with the table reversed, so the second run is right too."""
    a = np.array([p[0] for p in EDGE_TABLE], np.int32)
    b = np.array([p[1] for p in EDGE_TABLE], np.int32)
    expected = [_python_floor_div_mod(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    assert expected[0] == (-715827883, 1) and expected[2] == (INT_MIN, 0)
    cx = lm.Graph()
    ta = cx.tensor((len(EDGE_TABLE),), dtype=lm.int32).set(a)
    tb = cx.tensor((len(EDGE_TABLE),), dtype=lm.int32).set(b)
    outputs = [(ta // tb).retrieve(), (ta % tb).retrieve()]
    for compile_it in (False, True):
        if compile_it:
            cx.compile(lm.CPUCompiler())
        for order in (slice(None), slice(None, None, -1)):
            ta.set(a[order].copy())
            tb.set(b[order].copy())
            cx.execute()
            got = list(zip(*(o.numpy().tolist() for o in outputs), strict=True))
            assert got == expected[order], ("compiled" if compile_it else "reference", order)


SCALARS = [3, -7, 1, -1, 0, 2**16, INT_MIN, INT_MAX]


def test_scalar_divisors_and_numerators_are_exact_after_constant_folding() -> None:
    """`x // c` and `c // x` with Python int constants: the compiler sees constant
    divisors (folding, e-graph rewrites) and must keep the correction step."""
    values = np.array(EDGES, np.int32)
    cx = lm.Graph()
    x = cx.tensor((len(values),), dtype=lm.int32).set(values)
    forward = [(x // c).retrieve() for c in SCALARS]
    backward = [(c // x).retrieve() for c in SCALARS]
    moduli = [(x % c).retrieve() for c in SCALARS]

    def check(where: str) -> None:
        for c, fwd, bwd, mod in zip(SCALARS, forward, backward, moduli, strict=True):
            want = [_python_floor_div_mod(int(v), c) for v in values]
            assert fwd.numpy().tolist() == [q for q, _ in want], (where, "x //", c)
            assert mod.numpy().tolist() == [r for _, r in want], (where, "x %", c)
            want_back = [_python_floor_div_mod(c, int(v))[0] for v in values]
            assert bwd.numpy().tolist() == want_back, (where, "// x", c)

    cx.execute()
    check("reference")
    cx.compile(lm.CPUCompiler())
    cx.execute()
    check("compiled")


def test_float_floor_division_is_unchanged() -> None:
    """The float path still divides the exact multiple a - a % b and rounds."""
    a = np.array([7.5, -7.5, 1e30, -3.0, 0.0, 5.0], np.float32)
    b = np.array([2.0, 2.0, 3.0, 0.5, -1.0, -0.3], np.float32)
    cx = lm.Graph()
    ta = cx.tensor((6,)).set(a)
    tb = cx.tensor((6,)).set(b)
    out = (ta // tb).retrieve()
    cx.execute()
    np.testing.assert_array_equal(
        out.numpy(), [3.0, -4.0, np.floor_divide(a[2], b[2]), -6, -0, -17]
    )


# ------------------------------------------------------------------ int32 sums wrap
SUM_INPUTS = {"x": (3, 1000), "short": (5, 6), "a": (4, 50), "b": (50, 3)}
SUM_INPUTS |= {"c": (6, 4, 50), "d": (6, 50, 3)}


def _sum_graph() -> tuple[lm.Graph, dict[str, lm.GraphTensor], dict[str, lm.GraphTensor]]:
    """Each kind of generated int32 sum: a long loop, an unrolled short axis, a whole
    tensor, a row-fused sum, products, a matmul, a multi-axis sum of products."""
    cx = lm.Graph()
    t = {k: cx.tensor(s, dtype=lm.int32) for k, s in SUM_INPUTS.items()}
    outputs = {
        "loop": t["x"].sum(1),
        "unrolled": t["short"].sum(1),
        "all": t["x"].sum((0, 1)),
        "row": t["x"] - t["x"].sum(1, keepdim=True),
        "products": (t["x"] * t["x"]).sum(1),
        "matmul": t["a"] @ t["b"],
        "batched_then_summed": (t["c"] @ t["d"]).sum(0),
    }
    return cx, t, {k: out.retrieve() for k, out in outputs.items()}


def _set_random(inputs: dict[str, lm.GraphTensor], rng: np.random.Generator) -> dict[str, Any]:
    """Full-range int32 data for every input; the expected outputs, computed in int64 (no
    overflow at these sizes) and wrapped to int32."""
    data = {}
    for k, tensor in inputs.items():
        data[k] = rng.integers(INT_MIN, INT_MAX, SUM_INPUTS[k], dtype=np.int32, endpoint=True)
        tensor.set(data[k])
    w = {k: v.astype(np.int64) for k, v in data.items()}
    exact = {
        "loop": w["x"].sum(1),
        "unrolled": w["short"].sum(1),
        "all": w["x"].sum(),
        "row": w["x"] - w["x"].sum(1, keepdims=True),
        "products": (w["x"] * w["x"]).sum(1),
        "matmul": w["a"] @ w["b"],
        "batched_then_summed": (w["c"] @ w["d"]).sum(0),
    }
    return {k: ((v + 2**31) % 2**32 - 2**31).astype(np.int32) for k, v in exact.items()}


def test_int32_sums_wrap_like_numpy_in_both_runtimes() -> None:
    """Sums of full-range int32 values overflow many times; both runtimes wrap modulo
    2**32 (the multi-axis sum of products used to accumulate in float: off by ~4e9),
    and the generated C accumulates ints only unsigned (signed overflow is undefined)."""
    rng = np.random.default_rng(11)
    cx, inputs, outputs = _sum_graph()
    want = _set_random(inputs, rng)
    cx.execute()
    for name, out in outputs.items():
        np.testing.assert_array_equal(out.numpy(), want[name], err_msg=f"reference {name}")
    cx.compile(lm.CPUCompiler())
    for _ in range(2):  # the next run, new values, is right too
        want = _set_random(inputs, rng)
        cx.execute()
        for name, out in outputs.items():
            np.testing.assert_array_equal(out.numpy(), want[name], err_msg=f"compiled {name}")
    sources = [k.source for s in cx.compiled.segments for k in s.kernels]
    accumulated = {name for source in sources for name in re.findall(r"(\w+) \+= ", source)}
    assert accumulated and all(name.endswith("_bits") for name in accumulated), accumulated

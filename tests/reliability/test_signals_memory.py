"""No signals from generated code (issue 11, item 2): integer division and modulo by zero,
INT_MIN // -1, float -> int casts of NaN/inf and symbolic dims of 0 give numpy's results in
both runtimes, and an allocation too large for memory raises OutOfMemoryError naming the
tensor and the bytes. Compiled code that could trap runs in a subprocess, so a SIGFPE
fails the test instead of killing pytest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

import luminal as lm
from luminal.shape.expr import var

INT_MIN = np.iinfo(np.int32).min
INT_MAX = np.iinfo(np.int32).max


def _isolated(script: str) -> dict:
    """Run `script` (which prints one JSON line last) in a fresh interpreter; a signal
    shows as a negative return code."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ integer semantics
NUMERATORS = [7, -7, 0, INT_MIN, INT_MIN, INT_MAX, 7, -7, 9, -9, 5, INT_MIN, INT_MAX]
DIVISORS = [0, 0, 0, -1, 0, 0, 2, 2, -4, -4, 1, 3, -1]
# int32 // goes through float32 (docs/semantics.md): exact where |a| + |b| <= 2**23 and for
# the zero-divisor and INT_MIN // -1 cases; the last two only agree between the runtimes
NUMPY_EXACT = slice(0, -2)


def _numpy_floor_div_mod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        return np.floor_divide(a, b), np.mod(a, b)


def _integer_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list[lm.GraphTensor]]:
    cx = lm.Graph()
    a = cx.tensor((len(NUMERATORS),), dtype=lm.int32)
    b = cx.tensor((len(DIVISORS),), dtype=lm.int32)
    outputs = [(a // b).retrieve(), (a % b).retrieve(), (a // 0).retrieve(), (a % 0).retrieve()]
    return cx, a, b, outputs


INTEGER_SCRIPT = """
    import json, numpy as np, luminal as lm
    from tests.reliability.test_signals_memory import _integer_graph, NUMERATORS, DIVISORS
    cx, a, b, outputs = _integer_graph()
    a.set(np.array(NUMERATORS, np.int32)); b.set(np.array(DIVISORS, np.int32))
    cx.compile(lm.CPUCompiler())  # verified against the reference on these very values
    cx.execute()
    first = [o.numpy().tolist() for o in outputs]
    a.set(np.array(NUMERATORS[::-1], np.int32)); b.set(np.array(DIVISORS[::-1], np.int32))
    cx.execute()
    print(json.dumps({"first": first, "second": [o.numpy().tolist() for o in outputs]}))
"""


def test_integer_division_by_zero_and_int_min_by_minus_one_follow_numpy():
    """x // 0 == x % 0 == 0, INT_MIN // -1 == INT_MIN, INT_MIN % -1 == 0: compiled (in a
    subprocess: C's / and % raise SIGFPE there) == reference == numpy."""
    a, b = np.array(NUMERATORS, np.int32), np.array(DIVISORS, np.int32)
    quotient, remainder = _numpy_floor_div_mod(a, b)
    assert quotient[3] == INT_MIN and remainder[3] == 0 and quotient[0] == 0  # the cases
    zeros = np.zeros_like(a)

    cx, ta, tb, outputs = _integer_graph()
    ta.set(a)
    tb.set(b)
    cx.execute()
    reference = [o.numpy() for o in outputs]
    np.testing.assert_array_equal(reference[0][NUMPY_EXACT], quotient[NUMPY_EXACT])
    for got, want in zip(reference[1:], [remainder, zeros, zeros], strict=True):
        np.testing.assert_array_equal(got, want)

    compiled = _isolated(INTEGER_SCRIPT)
    for got, want in zip(compiled["first"], reference, strict=True):
        np.testing.assert_array_equal(np.array(got, np.int32), want)
    # the next run, other values, is still right
    quotient, remainder = _numpy_floor_div_mod(a[::-1].copy(), b[::-1].copy())
    second = [np.array(values, np.int32) for values in compiled["second"]]
    np.testing.assert_array_equal(second[0][::-1][NUMPY_EXACT], quotient[::-1][NUMPY_EXACT])
    for got, want in zip(second[1:], [remainder, zeros, zeros], strict=True):
        np.testing.assert_array_equal(got, want)


CAST_VALUES = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483520.0, -2147483648.0, -2.7, 2.7, 0.0]


def _cast_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, list[lm.GraphTensor]]:
    cx = lm.Graph()
    x = cx.tensor((len(CAST_VALUES),))
    h = cx.tensor((4,), dtype=lm.float16)
    constant = cx.constant(float("nan")).cast(lm.int32).expand_dim(0, 2)
    outputs = [x.cast(lm.int32).retrieve(), h.cast(lm.int32).retrieve(), constant.retrieve()]
    return cx, x, h, outputs


def test_float_to_int_cast_of_nan_inf_and_out_of_range_is_int_min_in_both_runtimes():
    """A C cast of NaN, inf or an out-of-range float is undefined behaviour; both runtimes
    define it as INT_MIN (what numpy and PyTorch give on x86), truncating the rest."""
    x = np.array(CAST_VALUES, np.float32)
    h = np.array([np.nan, np.inf, -65504, 2.5], np.float16)
    expected = [
        np.array([INT_MIN] * 5 + [2147483520, INT_MIN, -2, 2, 0], np.int32),
        np.array([INT_MIN, INT_MIN, -65504, 2], np.int32),
        np.array([INT_MIN, INT_MIN], np.int32),
    ]
    results = []
    for compiled in (False, True):
        cx, tx, th, outputs = _cast_graph()
        tx.set(np.ones_like(x))
        th.set(np.ones_like(h))
        if compiled:
            cx.compile(lm.CPUCompiler())
        tx.set(x)
        th.set(h)
        cx.execute()
        results.append([o.numpy() for o in outputs])
        tx.set(np.full_like(x, -5.5))  # the next run is right
        cx.execute()
        np.testing.assert_array_equal(outputs[0].numpy(), np.full(x.shape, -5, np.int32))
    for reference, compiled in zip(*results, strict=True):
        np.testing.assert_array_equal(compiled, reference)
    for got, want in zip(results[0], expected, strict=True):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ a symbolic dim of 0
def _dim_zero_graph() -> tuple[lm.Graph, lm.GraphTensor, list[lm.GraphTensor]]:
    """Index arithmetic dividing by symbolic dims: a permuted reshape (`i / n`, `i % n`),
    a concat along a symbolic axis, and an iota whose divisor `m` is not in its shape."""
    cx = lm.Graph()
    x = cx.tensor(("n", "m"))
    n, m = x.shape
    flat = (x.T + 1.0).reshape((n * m,)) * 3.0 + x.reshape((n * m,))
    joined = lm.concat([x, x * 2.0], 1) + 1.0
    z = var("z")
    iota = cx.iota(z // var("m") + z % var("m") * 10, (3,))
    outputs = [flat.retrieve(), joined.retrieve(), iota.retrieve(), x.sum(1).retrieve()]
    return cx, x, outputs


def _dim_zero_expected(data: np.ndarray) -> list[np.ndarray]:
    n, m = data.shape
    z = np.arange(3)
    with np.errstate(divide="ignore"):
        iota = np.floor_divide(z, m) + np.mod(z, m) * 10
    return [
        (data.T + 1.0).reshape(-1) * 3.0 + data.reshape(-1),
        np.concatenate([data, data * 2.0], 1) + 1.0,
        iota.astype(np.int32),
        data.sum(1),
    ]


DIM_ZERO_SHAPES = [(2, 3), (0, 3), (3, 0), (0, 0), (2, 3)]

DIM_ZERO_SCRIPT = """
    import json, numpy as np, luminal as lm
    from tests.reliability.test_signals_memory import _dim_zero_graph, DIM_ZERO_SHAPES
    cx, x, outputs = _dim_zero_graph()
    x.set(np.ones((2, 3), np.float32))
    cx.compile(lm.CPUCompiler())
    runs = []
    for shape in DIM_ZERO_SHAPES:
        x.set(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
        cx.execute()
        runs.append([[list(o.numpy().shape), o.numpy().ravel().tolist()] for o in outputs])
    print(json.dumps(runs))
"""


def test_symbolic_dim_of_zero_through_division_index_math():
    """`/ dim` and `% dim` in generated index arithmetic with the dim 0: an empty tensor
    does nothing, and a divisor of 0 outside the loop's shape gives 0 (numpy's result)."""
    compiled = _isolated(DIM_ZERO_SCRIPT)
    cx, x, outputs = _dim_zero_graph()
    for shape, run in zip(DIM_ZERO_SHAPES, compiled, strict=True):
        data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        x.set(data)
        cx.execute()
        for output, want, (got_shape, got) in zip(
            outputs, _dim_zero_expected(data), run, strict=True
        ):
            np.testing.assert_array_equal(output.numpy(), want)  # reference
            assert tuple(got_shape) == want.shape
            np.testing.assert_array_equal(np.array(got).reshape(want.shape), want)

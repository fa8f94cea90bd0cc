"""Binary high-level ops against PyTorch: arithmetic, pow, comparisons, extrema, clip."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch, run, uniform

SHAPE_PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((2, 1, 4), (3, 1)),
    ((5,), ()),
    ((), (2, 3)),
    ((2, 3, 4, 5), (1, 3, 1, 5)),
]

ARITHMETIC = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "mod": operator.mod,
    "floordiv": operator.floordiv,
}


def _t(array: np.ndarray) -> torch.Tensor:
    """torch view of an array (0-d results of the seeded helpers come back as numpy scalars)."""
    return torch.from_numpy(np.asarray(array))


def _nonzero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values in [-2, -0.25] U [0.25, 2]: safe divisors."""
    magnitude = rng.uniform(0.25, 2.0, size=shape).astype(np.float32)
    return np.where(rng.random(shape) < 0.5, -magnitude, magnitude).astype(np.float32)


def _ints(rng: np.random.Generator, shape: tuple[int, ...], low: int = -5, high: int = 6):
    return rng.integers(low, high, size=shape).astype(np.int32)


def _nonzero_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    values = _ints(rng, shape, 1, 5)
    return np.where(rng.random(shape) < 0.5, -values, values).astype(np.int32)


# ---------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("name", list(ARITHMETIC))
@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPE_PAIRS)
def test_arithmetic_broadcasts_like_torch(rng, name, shape_a, shape_b):
    fn = ARITHMETIC[name]
    a = uniform(rng, shape_a)
    b = _nonzero(rng, shape_b) if name in ("truediv", "mod", "floordiv") else uniform(rng, shape_b)
    (ours,) = run(fn, a, b)
    assert_matches_torch(ours, fn(_t(a), _t(b)))


@pytest.mark.parametrize("name", list(ARITHMETIC))
@pytest.mark.parametrize("scalar", [2, -1.5, 0.75])
def test_python_scalars_on_either_side(rng, name, scalar):
    fn = ARITHMETIC[name]
    a = _nonzero(rng, (3, 4))
    left, right = run(lambda x: [fn(x, scalar), fn(scalar, x)], a)
    t = _t(a)
    assert_matches_torch(left, fn(t, scalar))
    assert_matches_torch(right, fn(scalar, t))


@pytest.mark.parametrize("name", list(ARITHMETIC))
def test_int32_tensors_keep_int32_except_true_division(rng, name):
    fn = ARITHMETIC[name]
    a = _ints(rng, (4, 5))
    b = _nonzero_ints(rng, (5,))
    (ours,) = run(fn, a, b)
    expected = fn(_t(a), _t(b))
    assert_matches_torch(ours, expected)
    assert ours.dtype == (np.float32 if name == "truediv" else np.int32)


@pytest.mark.parametrize("name", list(ARITHMETIC))
def test_int32_with_python_scalars(rng, name):
    fn = ARITHMETIC[name]
    a = _nonzero_ints(rng, (6,))
    outs = run(lambda x: [fn(x, 3), fn(3, x), fn(x, 2.5), fn(2.5, x)], a)
    t = _t(a)
    for ours, expected in zip(outs, [fn(t, 3), fn(3, t), fn(t, 2.5), fn(2.5, t)], strict=True):
        assert_matches_torch(ours, expected)


@pytest.mark.parametrize("name", list(ARITHMETIC))
def test_mixed_int_float_promotes_to_float(rng, name):
    fn = ARITHMETIC[name]
    a = _nonzero_ints(rng, (3, 4))
    b = _nonzero(rng, (4,))
    ab, ba = run(lambda x, y: [fn(x, y), fn(y, x)], a, b)
    ta, tb = _t(a), _t(b)
    assert_matches_torch(ab, fn(ta, tb))
    assert_matches_torch(ba, fn(tb, ta))


def test_remainder_follows_the_divisor_sign():
    a = np.array([-3.5, -2.0, -0.5, 0.0, 0.5, 2.0, 3.5, 7.25], np.float32)
    for divisor in (2.0, -2.0, 0.75, -0.75):
        (ours,) = run(lambda x, d=divisor: x % d, a)
        assert_matches_torch(ours, torch.remainder(_t(a), divisor))
    ints = np.array([-7, -6, -4, -1, 0, 1, 4, 6, 7], np.int32)
    for divisor in (3, -3):
        remainder, quotient = run(lambda x, d=divisor: [x % d, x // d], ints)
        assert_matches_torch(remainder, torch.remainder(_t(ints), divisor))
        assert_matches_torch(quotient, torch.floor_divide(_t(ints), divisor))


def test_negation(rng):
    a = uniform(rng, (3, 4))
    ints = _ints(rng, (5,))
    neg_float, neg_int = run(lambda x, y: [-x, -y], a, ints)
    assert_matches_torch(neg_float, -_t(a))
    assert_matches_torch(neg_int, -_t(ints))


def test_division_by_zero_gives_ieee_results():
    a = np.array([1.0, -1.0, 0.0], np.float32)
    b = np.zeros(3, np.float32)
    (ours,) = run(operator.truediv, a, b)
    assert_matches_torch(ours, _t(a) / _t(b))


def test_numpy_scalars_act_like_python_scalars(rng):
    a = uniform(rng, (4,))
    ints = _ints(rng, (4,))
    outs = run(lambda x, y: [x * np.float32(2.5), np.float32(2.5) + x, y + np.int32(3)], a, ints)
    assert_matches_torch(outs[0], _t(a) * 2.5)
    assert_matches_torch(outs[1], 2.5 + _t(a))
    assert_matches_torch(outs[2], _t(ints) + 3)


def test_broadcast_mismatch_raises_shape_error():
    cx = lm.Graph()
    a, b = cx.tensor((3, 4)), cx.tensor((3,))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"add.*\(3, 4\).*\(3\)"):
        _ = a + b
    assert cx.num_nodes == before


def test_bool_tensors_compute_as_int32():
    a = np.array([True, False, True])
    b = np.array([True, True, False])
    (ours,) = run(operator.add, a, b)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, [2, 1, 1])


# ---------------------------------------------------------------- pow
@pytest.mark.parametrize(
    "exponent", [0, 1, 2, 3, -1, -2, 5, 17, -3, 65, -67, 100.0, 0.5, 1.5, -0.5, 2.25, 3.0]
)
def test_pow_scalar_exponents(rng, exponent):
    a = uniform(rng, (4, 5))
    a[0, :3] = [0.0, -1.0, 1.0]
    (ours,) = run(lambda x: x**exponent, a)
    expected = _t(a) ** exponent
    assert_matches_torch(ours, expected)


@pytest.mark.parametrize("base", [2, 0.5, 3.0, -2.0])
def test_pow_scalar_base(rng, base):
    a = uniform(rng, (3, 4))
    a[0, :3] = [0.0, 1.0, 2.0]
    (ours,) = run(lambda x: base**x, a)
    assert_matches_torch(ours, base ** _t(a))


def test_pow_tensor_exponent_with_negative_bases(rng):
    base = uniform(rng, (4, 6))
    exponent = np.round(uniform(rng, (6,)) * 2) / 2  # integers and halves
    exponent[:3] = [2.0, 3.0, 0.0]
    base[0, 2] = 0.0
    (ours,) = run(lambda x, e: x**e, base, exponent)
    assert_matches_torch(ours, _t(base) ** _t(exponent))
    (method,) = run(lambda x, e: x.pow(e), base, exponent)
    np.testing.assert_array_equal(method, ours)


def test_pow_integer_tensors_stay_integer(rng):
    base = _ints(rng, (5, 4), -4, 5)
    exponent = _ints(rng, (4,), 0, 5)
    outs = run(lambda x, e: [x**e, x**2, 2**e, x**3.0], base, exponent)
    tb, te = _t(base), _t(exponent)
    for ours, expected in zip(outs, [tb**te, tb**2, 2**te, tb**3.0], strict=True):
        assert_matches_torch(ours, expected)


def test_pow_mixed_int_base_float_exponent(rng):
    base = _ints(rng, (3, 4), 0, 5)
    exponent = uniform(rng, (4,))
    (ours,) = run(lambda x, e: x**e, base, exponent)
    assert_matches_torch(ours, _t(base) ** _t(exponent))


# ---------------------------------------------------------------- comparisons
COMPARISONS = {
    "lt": (operator.lt, torch.lt),
    "gt": (operator.gt, torch.gt),
    "le": (operator.le, torch.le),
    "ge": (operator.ge, torch.ge),
    "eq": (None, torch.eq),
    "ne": (None, torch.ne),
}


def _with_ties(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values on a coarse grid so equal pairs occur often."""
    return (rng.integers(-4, 5, size=shape) / 2).astype(np.float32)


@pytest.mark.parametrize("name", list(COMPARISONS))
@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPE_PAIRS[:5])
def test_comparisons_give_zero_one_in_promoted_dtype(rng, name, shape_a, shape_b):
    python_op, torch_op = COMPARISONS[name]
    a, b = _with_ties(rng, shape_a), _with_ties(rng, shape_b)
    outs = run(lambda x, y: [getattr(x, name)(y), getattr(x, name)(0.5)], a, b)
    ta, tb = _t(a), _t(b)
    for ours, expected in zip(outs, [torch_op(ta, tb), torch_op(ta, 0.5)], strict=True):
        assert ours.dtype == np.float32
        assert_matches_torch(ours, expected, check_dtype=False)
    if python_op is not None:
        (operator_form,) = run(python_op, a, b)
        np.testing.assert_array_equal(operator_form, outs[0])


@pytest.mark.parametrize("name", list(COMPARISONS))
def test_comparisons_on_int32_and_mixed(rng, name):
    _, torch_op = COMPARISONS[name]
    ints = _ints(rng, (4, 5), -2, 3)
    other = _ints(rng, (5,), -2, 3)
    floats = _with_ties(rng, (5,))
    same, mixed, scalar = run(
        lambda x, y, f: [getattr(x, name)(y), getattr(x, name)(f), getattr(x, name)(1)],
        ints,
        other,
        floats,
    )
    ti = _t(ints)
    assert same.dtype == np.int32 and scalar.dtype == np.int32 and mixed.dtype == np.float32
    assert_matches_torch(same, torch_op(ti, _t(other)), check_dtype=False)
    assert_matches_torch(mixed, torch_op(ti, _t(floats)), check_dtype=False)
    assert_matches_torch(scalar, torch_op(ti, 1), check_dtype=False)


def test_reflected_comparisons_with_scalars(rng):
    a = _with_ties(rng, (6,))
    outs = run(lambda x: [1.0 < x, 1.0 > x, 1.0 <= x, 1.0 >= x], a)  # noqa: SIM300
    t = _t(a)
    expected_all = [1.0 < t, 1.0 > t, 1.0 <= t, 1.0 >= t]  # noqa: SIM300
    for ours, expected in zip(outs, expected_all, strict=True):
        assert_matches_torch(ours, expected, check_dtype=False)


def test_comparisons_with_infinities():
    a = np.array([-np.inf, -1.0, 0.0, np.inf], np.float32)
    b = np.array([-np.inf, np.inf, -np.inf, np.inf], np.float32)
    outs = run(lambda x, y: [x.lt(y), x.le(y), x.eq(y), x.ne(y), x.ge(y), x.gt(y)], a, b)
    ta, tb = _t(a), _t(b)
    expected = [ta < tb, ta <= tb, ta == tb, ta != tb, ta >= tb, ta > tb]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs, check_dtype=False)


# ---------------------------------------------------------------- maximum, minimum, clip
@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPE_PAIRS)
def test_maximum_minimum_broadcast_with_ties(rng, name, shape_a, shape_b):
    a, b = _with_ties(rng, shape_a), _with_ties(rng, shape_b)
    (ours,) = run(lambda x, y: getattr(x, name)(y), a, b)
    assert_matches_torch(ours, getattr(torch, name)(_t(a), _t(b)))


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_with_infinities_and_scalars(rng, name):
    a = uniform(rng, (3, 4))
    a[0, 0], a[0, 1] = np.inf, -np.inf
    t = _t(a)
    outs = run(
        lambda x: [getattr(x, name)(-math.inf), getattr(x, name)(math.inf), getattr(x, name)(0.5)],
        a,
    )
    for ours, bound in zip(outs, [-math.inf, math.inf, 0.5], strict=True):
        assert_matches_torch(ours, getattr(torch, name)(t, torch.tensor(bound)))


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_int32_and_mixed(rng, name):
    ints = _ints(rng, (3, 4))
    other = _ints(rng, (4,))
    floats = uniform(rng, (4,))
    same, mixed, scalar = run(
        lambda x, y, f: [getattr(x, name)(y), getattr(x, name)(f), getattr(x, name)(1)],
        ints,
        other,
        floats,
    )
    ti = _t(ints)
    fn = getattr(torch, name)
    assert_matches_torch(same, fn(ti, _t(other)))
    assert_matches_torch(mixed, fn(ti, _t(floats)))
    assert_matches_torch(scalar, fn(ti, torch.tensor(1, dtype=torch.int32)))


@pytest.mark.parametrize(
    ("low", "high"),
    [(-1.0, 1.0), (None, 0.5), (-0.5, None), (-math.inf, 1.0), (0.0, math.inf), (1.0, -1.0)],
)
def test_clip_matches_torch_clamp(rng, low, high):
    a = _with_ties(rng, (4, 5))
    outs = run(lambda x: [x.clip(low, high), x.clamp(low, high)], a)
    expected = torch.clamp(_t(a), low, high)
    for ours in outs:
        assert_matches_torch(ours, expected)


def test_clip_with_tensor_bounds(rng):
    a = uniform(rng, (3, 4))
    low = uniform(rng, (4,), -1.0, 0.0)
    high = uniform(rng, (3, 1), 0.0, 1.0)
    (ours,) = run(lambda x, lo, hi: x.clip(lo, hi), a, low, high)
    ta = _t(a)
    expected = torch.clamp(ta, _t(low), _t(high))
    assert_matches_torch(ours, expected)


def test_clip_int32_keeps_int32(rng):
    ints = _ints(rng, (10,))
    (ours,) = run(lambda x: x.clip(-2, 3), ints)
    assert_matches_torch(ours, torch.clamp(_t(ints), -2, 3))


def test_unsupported_operand_raises_type_error():
    cx = lm.Graph()
    a = cx.tensor((2,))
    with pytest.raises(TypeError):
        _ = a + "x"
    with pytest.raises((TypeError, lm.DTypeError)):
        a.maximum("x")


def test_int32_to_negative_scalar_power_raises_like_torch():
    cx = lm.Graph()
    a = cx.tensor((3,), dtype=lm.int32)
    with pytest.raises(lm.DTypeError, match="pow"):
        _ = a**-1


def test_pow_zero_exponent_is_one_everywhere():
    a = np.array([0.0, -2.0, 1.5, np.inf], np.float32)
    (ours,) = run(lambda x: x**0, a)
    assert_matches_torch(ours, _t(a) ** 0)


def test_comparisons_with_nan_follow_ieee():
    a = np.array([np.nan, np.nan, 1.0, -np.inf, np.inf, 0.0], np.float32)
    b = np.array([np.nan, 1.0, np.nan, np.nan, 2.0, 0.0], np.float32)
    names = ["lt", "gt", "le", "ge", "eq", "ne"]
    outs = run(lambda x, y: [getattr(x, n)(y) for n in names] + [x.le(0.5), x.ne(np.nan)], a, b)
    ta, tb = _t(a), _t(b)
    expected = [getattr(torch, n)(ta, tb) for n in names] + [ta <= 0.5, ta != np.nan]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs, check_dtype=False)


def test_maximum_minimum_clip_propagate_nan():
    a = np.array([np.nan, 1.0, np.nan, -1.0], np.float32)
    b = np.array([0.0, np.nan, np.nan, 2.0], np.float32)
    outs = run(lambda x, y: [x.maximum(y), x.minimum(y), x.clip(-0.5, 0.5)], a, b)
    ta, tb = _t(a), _t(b)
    expected = [torch.maximum(ta, tb), torch.minimum(ta, tb), torch.clamp(ta, -0.5, 0.5)]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs)


def test_operands_from_two_graphs_raise_graph_error():
    a, b = lm.Graph().tensor((2,)), lm.Graph().tensor((2,))
    with pytest.raises(lm.GraphError, match="different graphs"):
        _ = a + b

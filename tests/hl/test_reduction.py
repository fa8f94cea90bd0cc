"""Reductions against PyTorch: single axes, tuples, negative axes, all axes, keepdim."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch, run, uniform

SHAPE = (3, 4, 5)
AXES = [0, 1, 2, -1, -3, (0, 2), (2, 0), (-1, 1), (0, 1, 2), None]


def _dims(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    return (axes,) if isinstance(axes, int) else tuple(axes)


def _torch_prod(t: torch.Tensor, axes, keepdim: bool) -> torch.Tensor:
    """torch.prod takes one dim at a time."""
    for dim in sorted((d % t.ndim for d in _dims(axes, t.ndim)), reverse=True):
        t = torch.prod(t, dim=dim, keepdim=keepdim)
    return t


TORCH_REDUCTIONS = {
    "sum": lambda t, axes, keepdim: torch.sum(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "max": lambda t, axes, keepdim: torch.amax(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "min": lambda t, axes, keepdim: torch.amin(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "mean": lambda t, axes, keepdim: torch.mean(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "var": lambda t, axes, keepdim: torch.var(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "std": lambda t, axes, keepdim: torch.std(t, dim=_dims(axes, t.ndim), keepdim=keepdim),
    "prod": _torch_prod,
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("name", list(TORCH_REDUCTIONS))
def test_float_reductions_match_torch(rng, name, axes, keepdim):
    a = uniform(rng, SHAPE)
    (ours,) = run(lambda x: getattr(x, name)(axes, keepdim=keepdim), a)
    assert_matches_torch(ours, TORCH_REDUCTIONS[name](torch.from_numpy(a), axes, keepdim))


@pytest.mark.parametrize("name", list(TORCH_REDUCTIONS))
def test_default_reduces_every_axis(rng, name):
    a = uniform(rng, (2, 3))
    (ours,) = run(lambda x: getattr(x, name)(), a)
    assert_matches_torch(ours, TORCH_REDUCTIONS[name](torch.from_numpy(a), None, False))


@pytest.mark.parametrize("axes", [0, -1, (0, 1), None])
def test_int32_sum_max_min_stay_int32(rng, axes):
    a = rng.integers(-50, 50, size=(4, 6)).astype(np.int32)
    outs = run(lambda x: [x.sum(axes), x.max(axes), x.min(axes)], a)
    t = torch.from_numpy(a)
    for ours, name in zip(outs, ["sum", "max", "min"], strict=True):
        assert ours.dtype == np.int32
        assert_matches_torch(ours, TORCH_REDUCTIONS[name](t, axes, False), check_dtype=False)


def test_int32_sum_is_exact_beyond_float32_precision():
    a = np.array([[2**24, 1, 1, 1]], np.int32)
    (ours,) = run(lambda x: x.sum(-1), a)
    assert ours.dtype == np.int32 and ours.tolist() == [2**24 + 3]


def test_int32_mean_and_var_compute_in_float32(rng):
    a = rng.integers(-5, 6, size=(4, 6)).astype(np.int32)
    mean, var = run(lambda x: [x.mean(1), x.var(0)], a)
    t = torch.from_numpy(a).float()
    assert_matches_torch(mean, t.mean(1))
    assert_matches_torch(var, t.var(0))


@pytest.mark.parametrize("axes", [1, (0, 1), None])
def test_int32_prod_is_exact(rng, axes):
    a = rng.integers(-3, 4, size=(3, 5)).astype(np.int32)
    (ours,) = run(lambda x: x.prod(axes), a)
    assert ours.dtype == np.int32
    assert_matches_torch(ours, _torch_prod(torch.from_numpy(a), axes, False), check_dtype=False)


def test_prod_with_zeros_and_negative_factors():
    a = np.array(
        [[-1.5, 2.0, -0.5, 3.0], [0.0, -2.0, 1.0, 4.0], [-1.0, -1.0, -1.0, 0.25]], np.float32
    )
    rows, cols = run(lambda x: [x.prod(1), x.prod(0)], a)
    t = torch.from_numpy(a)
    assert_matches_torch(rows, torch.prod(t, 1))
    assert_matches_torch(cols, torch.prod(t, 0))


def test_prod_over_a_long_axis(rng):
    a = uniform(rng, (2, 37), 0.5, 1.5)
    (ours,) = run(lambda x: x.prod(-1), a)
    assert_matches_torch(ours, torch.prod(torch.from_numpy(a), -1))


def test_var_std_use_correction_one_and_accept_zero(rng):
    a = uniform(rng, (4, 7))
    outs = run(lambda x: [x.var(1), x.std(0), x.var(1, correction=0), x.std(correction=0)], a)
    t = torch.from_numpy(a)
    expected = [t.var(1), t.std(0), t.var(1, correction=0), t.std(correction=0)]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs)


def test_max_min_of_infinities():
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 2.0]], np.float32)
    hi, lo = run(lambda x: [x.max(1), x.min(1)], a)
    t = torch.from_numpy(a)
    assert_matches_torch(hi, torch.amax(t, 1))
    assert_matches_torch(lo, torch.amin(t, 1))


# ---------------------------------------------------------------- argmax / argmin
def _ties(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-2, 3, size=shape) / 2).astype(np.float32)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_first_index_of_ties(rng, name, axis, keepdim):
    a = _ties(rng, SHAPE)
    (ours,) = run(lambda x: getattr(x, name)(axis, keepdim=keepdim), a)
    assert ours.dtype == np.int32
    expected = getattr(torch, name)(torch.from_numpy(a), dim=axis, keepdim=keepdim)
    assert_matches_torch(ours, expected, check_dtype=False)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_without_axis_indexes_the_flattened_tensor(rng, name, keepdim):
    a = _ties(rng, (3, 4))
    (ours,) = run(lambda x: getattr(x, name)(keepdim=keepdim), a)
    assert ours.dtype == np.int32
    expected = getattr(torch, name)(torch.from_numpy(a), keepdim=keepdim)
    assert_matches_torch(ours, expected, check_dtype=False)


def test_argmax_of_int32_and_of_transposed_input(rng):
    ints = rng.integers(-3, 4, size=(5, 6)).astype(np.int32)
    a = _ties(rng, (4, 6))
    outs = run(lambda x, y: [x.argmax(1), x.argmin(0), y.T.argmax(-1)], ints, a)
    ti, ta = torch.from_numpy(ints), torch.from_numpy(a)
    expected = [ti.argmax(1), ti.argmin(0), ta.T.argmax(-1)]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs, check_dtype=False)


def test_argmax_with_infinities():
    a = np.array([[-np.inf, -np.inf, -np.inf], [1.0, np.inf, np.inf]], np.float32)
    hi, lo = run(lambda x: [x.argmax(1), x.argmin(1)], a)
    t = torch.from_numpy(a)
    assert_matches_torch(hi, t.argmax(1), check_dtype=False)
    assert_matches_torch(lo, t.argmin(1), check_dtype=False)


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("axes", [3, -4, (0, 0), (1, -1)])
def test_bad_axes_raise_shape_error_and_leave_graph_intact(axes):
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match="sum"):
        x.sum(axes)
    assert cx.num_nodes == before


# ---------------------------------------------------------------- symbolic dims
def test_reductions_over_a_symbolic_batch_rerun_with_new_sizes(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", 3))
    outs = [
        x.sum(0).retrieve(),
        x.mean(0).retrieve(),
        x.var(0).retrieve(),
        x.max(1).retrieve(),
        x.argmax(0).retrieve(),
        x.prod(0).retrieve(),
    ]
    for batch in (4, 7):
        data = uniform(rng, (batch, 3))
        x.set(data)
        cx.execute()
        t = torch.from_numpy(data)
        expected = [t.sum(0), t.mean(0), t.var(0), t.amax(1), t.argmax(0), t.prod(0)]
        for out, theirs in zip(outs, expected, strict=True):
            assert_matches_torch(out.numpy(), theirs, check_dtype=out is not outs[4])


def test_int32_prod_over_a_symbolic_axis_is_rounded():
    cx = lm.Graph()
    x = cx.tensor(("n", 2), dtype=lm.int32)
    out = x.prod(0).retrieve()
    for data in ([[3, -5], [5, 7], [7, 3]], [[-3, 11], [13, -1]]):
        array = np.array(data, np.int32)
        x.set(array)
        cx.execute()
        assert out.numpy().dtype == np.int32
        np.testing.assert_array_equal(out.numpy(), np.prod(array, axis=0))


def test_nan_propagates_through_max_and_argmax_points_at_it():
    a = np.array([[1.0, np.nan, 3.0, np.nan], [1.0, 2.0, 2.0, -1.0]], np.float32)
    outs = run(lambda x: [x.max(1), x.min(1), x.argmax(1), x.argmin(1), x.sum(1)], a)
    t = torch.from_numpy(a)
    expected = [t.amax(1), t.amin(1), t.argmax(1), t.argmin(1), t.sum(1)]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs, check_dtype=ours.dtype != np.int32)

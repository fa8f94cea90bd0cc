"""Scans (cumsum, cummax, cumprod), tril/triu and the debugging ops print, diff, graph_break."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from tests.conftest import assert_matches_torch, run, uniform

SCANS = {
    "cumsum": lambda t, axis: torch.cumsum(t, axis),
    "cummax": lambda t, axis: torch.cummax(t, axis).values,
    "cumprod": lambda t, axis: torch.cumprod(t, axis),
}


def run_symbolic(build, array: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """Run `build` on an input whose dims listed in `names` are symbolic."""
    cx = lm.Graph()
    shape = tuple(names.get(i, d) for i, d in enumerate(array.shape))
    x = cx.tensor(shape, dtype=lm.dtype.from_numpy(array.dtype)).set(array)
    out = build(x).retrieve()
    cx.execute()
    return out.numpy()


# ---------------------------------------------------------------- scans
@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((5,), 0), ((7,), -1), ((3, 7), 0), ((3, 7), 1), ((3, 7), -2), ((2, 3, 16), -1),
     ((2, 3, 16), 1), ((4, 1, 6), -2), ((2, 9, 3), -2), ((1,), 0)],
)  # fmt: skip
def test_scan_matches_torch(rng, name, shape, axis):
    a = uniform(rng, shape)
    (ours,) = run(lambda x: getattr(x, name)(axis), a)
    assert_matches_torch(ours, SCANS[name](torch.from_numpy(a), axis))


@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize(("shape", "names", "axis"), [((6,), {0: "n"}, 0),
    ((5, 3), {0: "n"}, 0), ((3, 11), {1: "n"}, -1), ((2, 4, 3), {0: "b", 1: "n"}, 1),
    ((4, 7), {0: "b"}, 1)])  # fmt: skip
def test_scan_over_symbolic_dims(rng, name, shape, names, axis):
    a = uniform(rng, shape)
    ours = run_symbolic(lambda x: getattr(x, name)(axis), a, names)
    assert_matches_torch(ours, SCANS[name](torch.from_numpy(a), axis))


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("n", range(1, 17))
def test_cumprod_is_accurate_up_to_16_factors(n, symbolic):
    a = uniform(np.random.default_rng(n), (4, n))
    ours = run_symbolic(lambda x: x.cumprod(-1), a, {1: "n"} if symbolic else {})
    assert_matches_torch(ours, torch.cumprod(torch.from_numpy(a), -1))


@pytest.mark.parametrize("name", sorted(SCANS))
def test_scan_of_non_contiguous_views(rng, name):
    a = uniform(rng, (6, 4, 8))
    (ours,) = run(lambda x: getattr(x.permute(2, 0, 1)[1:, :, ::2], name)(0), a)
    view = torch.from_numpy(a).permute(2, 0, 1)[1:, :, ::2]
    assert_matches_torch(ours, SCANS[name](view, 0))


@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize("symbolic", [False, True])
def test_scan_keeps_infinities_and_nan_like_torch(name, symbolic):
    a = np.array(
        [[1, -np.inf, 3, np.inf, -2, np.nan, 1], [0, 2, np.inf, 0, -1, 1, 2], [-np.inf] * 7],
        np.float32,
    )
    ours = run_symbolic(lambda x: getattr(x, name)(-1), a, {1: "n"} if symbolic else {})
    expected = SCANS[name](torch.from_numpy(a), -1).numpy()
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize("symbolic", [False, True])
def test_integer_scans_are_exact_and_stay_int32(rng, name, symbolic):
    a = rng.integers(-3, 4, size=(3, 10)).astype(np.int32)
    ours = run_symbolic(lambda x: getattr(x, name)(1), a, {1: "n"} if symbolic else {})
    assert ours.dtype == np.int32  # torch gives int64 for cumsum/cumprod; we have no int64
    np.testing.assert_array_equal(ours, SCANS[name](torch.from_numpy(a), 1).numpy())


@pytest.mark.parametrize("name", sorted(SCANS))
def test_bool_scans(rng, name):
    a = rng.random((3, 6)) > 0.5
    (ours,) = run(lambda x: getattr(x, name)(-1), a)
    expected = SCANS[name](torch.from_numpy(a), -1)
    assert ours.dtype == (np.bool_ if name == "cummax" else np.int32)
    np.testing.assert_array_equal(ours, expected.numpy())


def test_float16_cumsum_keeps_dtype(rng):
    a = uniform(rng, (2, 9)).astype(np.float16)
    (ours,) = run(lambda x: x.cumsum(-1), a)
    assert_matches_torch(ours, torch.cumsum(torch.from_numpy(a), -1), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", sorted(SCANS))
def test_scan_of_a_scalar_is_the_scalar(name):
    (ours,) = run(lambda x: getattr(x, name)(-1), np.array(2.5, np.float32))
    assert_matches_torch(ours, SCANS[name](torch.tensor(2.5), -1))


@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize("axis", [2, -3, 1.0])
def test_scan_rejects_bad_axis_without_touching_the_graph(name, axis):
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=name):
        getattr(x, name)(axis)
    assert cx.num_nodes == before


def test_known_length_scan_is_logarithmic_in_nodes():
    cx = lm.Graph()
    cx.tensor((2, 1024)).cumsum(-1)
    assert cx.num_nodes == 1 + 10  # one Add per doubling step, shifts are views


# ---------------------------------------------------------------- tril / triu
@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 3), (2, 3, 4, 6), (1, 1)])
@pytest.mark.parametrize("diagonal", [-7, -2, -1, 0, 1, 3, 8])
def test_triangles_match_torch(rng, name, shape, diagonal):
    a = uniform(rng, shape)
    (ours,) = run(lambda x: getattr(x, name)(diagonal), a)
    assert_matches_torch(ours, getattr(torch, name)(torch.from_numpy(a), diagonal))


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_triangles_over_symbolic_dims(rng, name, diagonal):
    a = uniform(rng, (2, 5, 4))
    ours = run_symbolic(lambda x: getattr(x, name)(diagonal), a, {0: "b", 1: "r", 2: "c"})
    assert_matches_torch(ours, getattr(torch, name)(torch.from_numpy(a), diagonal))


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_triangles_of_non_contiguous_views(rng, name):
    a = uniform(rng, (5, 6, 3))
    (ours,) = run(lambda x: getattr(x.permute(2, 1, 0)[:, 1:, ::2], name)(1), a)
    view = torch.from_numpy(a).permute(2, 1, 0)[:, 1:, ::2]
    assert_matches_torch(ours, getattr(torch, name)(view, 1))


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_triangles_zero_infinities_instead_of_making_nan(name):
    a = np.full((4, 4), np.inf, np.float32)
    a[1, 2] = np.nan
    a[2, 1] = -np.inf
    (ours,) = run(lambda x: getattr(x, name)(), a)
    np.testing.assert_array_equal(ours, getattr(torch, name)(torch.from_numpy(a)).numpy())


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_triangles_keep_integer_and_bool_dtypes(rng, name, dtype):
    a = rng.integers(0, 5, size=(3, 4)).astype(dtype)
    (ours,) = run(lambda x: getattr(x, name)(-1), a)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours, getattr(torch, name)(torch.from_numpy(a), -1).numpy())


def test_triangle_of_ones_is_a_causal_mask():
    cx = lm.Graph()
    mask = cx.constant(1.0).expand((4, 4)).tril().retrieve()
    cx.execute()
    np.testing.assert_array_equal(mask.numpy(), np.tril(np.ones((4, 4), np.float32)))


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_triangles_need_two_dims(name):
    cx = lm.Graph()
    x = cx.tensor((5,))
    with pytest.raises(lm.ShapeError, match=rf"{name}: needs at least 2 dims, got shape \(5,\)"):
        getattr(x, name)()
    with pytest.raises(lm.ShapeError, match="diagonal must be an int"):
        getattr(cx.tensor((2, 2)), name)(0.5)


# ---------------------------------------------------------------- print / diff / graph_break
def test_print_shows_message_and_value_and_returns_self(capsys):
    cx = lm.Graph()
    x = cx.tensor((2, 2)).set(np.array([[1, 2], [3, 4]], np.float32))
    doubled = x * 2
    assert doubled.print("doubled") is doubled
    out = (doubled + 1).retrieve()
    cx.execute()
    captured = capsys.readouterr().out
    assert "doubled: shape (2, 2) float32" in captured
    assert "[[2. 4.]\n [6. 8.]]" in captured
    np.testing.assert_array_equal(out.numpy(), [[3, 5], [7, 9]])


def test_print_runs_although_nothing_reads_it(capsys):
    cx = lm.Graph()
    x = cx.tensor((3,), dtype=lm.int32).set(np.array([7, 8, 9], np.int32))
    x.print()
    cx.execute()
    assert capsys.readouterr().out == "shape (3,) int32\n[7 8 9]\n"
    cx.execute()  # runs again on every execution
    assert "[7 8 9]" in capsys.readouterr().out


def test_print_of_a_view_prints_the_view(capsys):
    cx = lm.Graph()
    cx.tensor((2, 3)).set(np.arange(6, dtype=np.float32).reshape(2, 3)).T.print("t")
    cx.execute()
    assert "t: shape (3, 2) float32\n[[0. 3.]\n [1. 4.]\n [2. 5.]]" in capsys.readouterr().out


def _diff_graph(values: np.ndarray, path, **tolerances) -> lm.Graph:
    cx = lm.Graph()
    x = cx.tensor(values.shape).set(values)
    assert x.diff(str(path), **tolerances) is x
    return cx


def test_diff_reports_a_match(tmp_path, capsys):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "ref.bin"
    (values + 1e-7).tofile(path)
    _diff_graph(values, path).execute()
    out = capsys.readouterr().out
    assert f"diff {path}: shape (2, 3), 6 elements: match" in out


def test_diff_reports_mismatches_with_indices_and_values(tmp_path, capsys):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    reference = values.copy()
    reference[1, 2] = 7.5
    reference[0, 1] = -1.0
    path = tmp_path / "ref.bin"
    reference.astype("<f4").tofile(path)
    _diff_graph(values, path).execute()
    out = capsys.readouterr().out
    assert "2 MISMATCHES (max abs diff 2.5" in out
    assert "at (0, 1): tensor 1 file -1" in out
    assert "at (1, 2): tensor 5 file 7.5" in out


def test_diff_tolerances_are_configurable(tmp_path, capsys):
    values = np.ones(4, np.float32)
    path = tmp_path / "ref.bin"
    (values + 0.01).tofile(path)
    _diff_graph(values, path, atol=0.1).execute()
    assert "match" in capsys.readouterr().out
    _diff_graph(values, path, atol=0.0, rtol=1e-4).execute()
    assert "4 MISMATCHES" in capsys.readouterr().out


def test_diff_raises_for_a_missing_file(tmp_path):
    cx = _diff_graph(np.ones(3, np.float32), tmp_path / "missing.bin")
    with pytest.raises(lm.ExecutionError, match="missing.bin.*does not exist"):
        cx.execute()


def test_diff_raises_when_element_counts_differ(tmp_path):
    path = tmp_path / "short.bin"
    np.ones(5, np.float32).tofile(path)
    cx = _diff_graph(np.ones((2, 3), np.float32), path)
    with pytest.raises(lm.ExecutionError, match=r"holds 5 float32 values.*\(2, 3\) has 6"):
        cx.execute()


def test_graph_break_is_an_identity_node(rng):
    a = uniform(rng, (3, 4))
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(a)
    broken = x.T.graph_break()
    assert isinstance(broken.node.op, ops.GraphBreak)
    assert broken.shape == (4, 3)
    out = (broken * 2).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), a.T * 2)


@pytest.mark.parametrize("name", [*sorted(SCANS), "tril", "triu"])
@pytest.mark.parametrize("symbolic", [False, True])
def test_empty_tensors_pass_through(name, symbolic):
    a = np.zeros((0, 3), np.float32)
    ours = run_symbolic(lambda x: getattr(x, name)(0), a, {0: "n"} if symbolic else {})
    assert ours.shape == (0, 3) and ours.dtype == np.float32

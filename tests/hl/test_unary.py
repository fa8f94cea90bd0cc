"""Unary math, activations and normalisations against PyTorch: shapes, views, dtypes,
large magnitudes and multi-axis normalisations."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own alias

import luminal as lm
from tests.conftest import TORCH_DTYPES, assert_matches_torch, run, uniform

POSITIVE = (0.1, 2.0)
SYMMETRIC = (-2.0, 2.0)

# name, luminal op, torch op, input domain
ELEMENTWISE: list[tuple[str, Callable, Callable, tuple[float, float]]] = [
    ("exp", lambda x: x.exp(), torch.exp, SYMMETRIC),
    ("log", lambda x: x.log(), torch.log, POSITIVE),
    ("exp2", lambda x: x.exp2(), torch.exp2, SYMMETRIC),
    ("log2", lambda x: x.log2(), torch.log2, POSITIVE),
    ("sin", lambda x: x.sin(), torch.sin, SYMMETRIC),
    ("cos", lambda x: x.cos(), torch.cos, SYMMETRIC),
    ("sqrt", lambda x: x.sqrt(), torch.sqrt, POSITIVE),
    ("reciprocal", lambda x: x.reciprocal(), torch.reciprocal, POSITIVE),
    ("square", lambda x: x.square(), torch.square, SYMMETRIC),
    ("abs", lambda x: x.abs(), torch.abs, SYMMETRIC),
    ("sign", lambda x: x.sign(), torch.sign, SYMMETRIC),
    ("erf", lambda x: x.erf(), torch.erf, SYMMETRIC),
    ("relu", lambda x: x.relu(), torch.relu, SYMMETRIC),
    ("sigmoid", lambda x: x.sigmoid(), torch.sigmoid, SYMMETRIC),
    ("silu", lambda x: x.silu(), F.silu, SYMMETRIC),
    ("swish", lambda x: x.swish(), F.silu, SYMMETRIC),
    ("tanh", lambda x: x.tanh(), torch.tanh, SYMMETRIC),
    ("gelu", lambda x: x.gelu(), lambda t: F.gelu(t, approximate="tanh"), SYMMETRIC),
    ("gelu_exact", lambda x: x.gelu_exact(), F.gelu, SYMMETRIC),
    ("gelu_none", lambda x: x.gelu(approximate="none"), F.gelu, SYMMETRIC),
    ("leaky_relu", lambda x: x.leaky_relu(), F.leaky_relu, SYMMETRIC),
    ("leaky_relu_0.2", lambda x: x.leaky_relu(0.2), lambda t: F.leaky_relu(t, 0.2), SYMMETRIC),
]

# ops over an axis (default -1); these need at least one dim
REDUCING: list[tuple[str, Callable, Callable]] = [
    ("softmax", lambda x: x.softmax(), lambda t: torch.softmax(t, -1)),
    ("log_softmax", lambda x: x.log_softmax(), lambda t: torch.log_softmax(t, -1)),
    ("layer_norm", lambda x: x.layer_norm(), lambda t: F.layer_norm(t, t.shape[-1:])),
    ("mean_norm", lambda x: x.mean_norm(), lambda t: t - t.mean(-1, keepdim=True)),
    ("std_norm", lambda x: x.std_norm(), lambda t: _rms_norm(t, (-1,))),
    ("normalize", lambda x: x.normalize(), lambda t: F.normalize(t, dim=-1)),
]

ALL_OPS = [(name, ours, theirs, domain) for name, ours, theirs, domain in ELEMENTWISE] + [
    (name, ours, theirs, SYMMETRIC) for name, ours, theirs in REDUCING
]


def _rms_norm(t: torch.Tensor, dims: tuple[int, ...], eps: float = 1e-5) -> torch.Tensor:
    return t / torch.sqrt((t * t).mean(dims, keepdim=True) + eps)


def _ids(case: tuple) -> str:
    return case[0]


# ---------------------------------------------------------------- float32 forward
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("case", ELEMENTWISE, ids=_ids)
def test_elementwise_matches_torch(rng, case, shape):
    _, ours, theirs, domain = case
    data = uniform(rng, shape, *domain)
    (out,) = run(ours, data)
    assert_matches_torch(out, theirs(torch.tensor(data)))


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("case", REDUCING, ids=_ids)
def test_normalisation_matches_torch(rng, case, shape):
    _, ours, theirs = case
    data = uniform(rng, shape)
    (out,) = run(ours, data)
    assert_matches_torch(out, theirs(torch.tensor(data)))


# ---------------------------------------------------------------- non-contiguous views
# each view is built inside the graph from a (3, 4, 5) input; torch applies the same view
VIEWS: list[tuple[str, Callable, Callable]] = [
    ("permute", lambda x: x.permute(2, 0, 1), lambda t: t.permute(2, 0, 1)),
    ("slice", lambda x: x[1:, ::2], lambda t: t[1:, ::2]),
    (
        "pad",
        lambda x: x.pad(((1, 0), None, (2, 1)), value=0.5),
        lambda t: F.pad(t, (2, 1, 0, 0, 1, 0), value=0.5),
    ),
    ("expand", lambda x: x[:, :1].expand(2, 3, 6, 5), lambda t: t[:, :1].expand(2, 3, 6, 5)),
]


@pytest.mark.parametrize("view", VIEWS, ids=_ids)
@pytest.mark.parametrize("case", ALL_OPS, ids=_ids)
def test_non_contiguous_inputs(rng, case, view):
    _, ours, theirs, domain = case
    _, our_view, their_view = view
    data = uniform(rng, (3, 4, 5), *domain)
    (out,) = run(lambda x: ours(our_view(x)), data)
    assert_matches_torch(out, theirs(their_view(torch.tensor(data))))


# ---------------------------------------------------------------- dtypes
# Both sides compute in float32 and round once to the half type (PyTorch's CPU kernels
# upcast; so do our composite ops). Float32 results a few float32 ulps apart can still round
# to neighbouring half values, so allow one half-precision ulp: about 2^-10 (1e-3) relative
# for float16 and 2^-7 (8e-3) for bfloat16, with the same absolute floor for values near 0.
HALF_TOLERANCE = {lm.float16: (1e-3, 1e-3), lm.bfloat16: (8e-3, 8e-3)}
HALF_OPS = [
    case
    for case in ALL_OPS
    if case[0]
    in {"exp", "log", "cos", "erf", "sigmoid", "silu", "tanh", "gelu", "gelu_exact"}
    | {"leaky_relu", "softmax", "log_softmax", "layer_norm", "std_norm", "normalize"}
]


@pytest.mark.parametrize("dtype", [lm.float16, lm.bfloat16], ids=lambda d: d.value)
@pytest.mark.parametrize("case", HALF_OPS, ids=_ids)
def test_half_precision_matches_torch_in_same_dtype(rng, case, dtype):
    _, ours, theirs, domain = case
    data = uniform(rng, (4, 6), *domain).astype(dtype.numpy)
    (out,) = run(ours, data, dtypes=[dtype])
    expected = theirs(torch.tensor(data.astype(np.float32)).to(TORCH_DTYPES[dtype]))
    atol, rtol = HALF_TOLERANCE[dtype]
    assert_matches_torch(out, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    "case", [c for c in ELEMENTWISE if c[0] in {"square", "abs", "sign", "relu"}], ids=_ids
)
def test_int_stays_int_for_exact_ops(case):
    _, ours, theirs, _ = case
    data = np.arange(-4, 5, dtype=np.int32).reshape(3, 3)
    (out,) = run(ours, data)
    assert_matches_torch(out, theirs(torch.tensor(data)), atol=0, rtol=0)


@pytest.mark.parametrize(
    "case",
    [c for c in ELEMENTWISE if c[0] in {"exp", "log", "sin", "cos", "erf", "sigmoid", "tanh"}],
    ids=_ids,
)
def test_int_computes_in_float32(case):
    _, ours, theirs, _ = case
    data = np.arange(-2, 3, dtype=np.int32)
    (out,) = run(ours, data)
    assert_matches_torch(out, theirs(torch.tensor(data)))


def test_int_normalisation_computes_in_float32():
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    out, normalized = run(lambda x: [x.layer_norm(), x.normalize()], data)
    t = torch.tensor(data, dtype=torch.float32)
    assert_matches_torch(out, F.layer_norm(t, (4,)))
    assert_matches_torch(normalized, F.normalize(t, dim=-1))


def test_bool_sign_and_square_follow_torch():
    data = np.array([True, False, True])
    sign, square = run(lambda x: [x.sign(), x.square()], data)
    assert sign.dtype == np.bool_ and (sign == data).all()
    np.testing.assert_array_equal(square, data.astype(np.int32))


# ---------------------------------------------------------------- extreme values
EXTREME = np.array(
    [-np.inf, -1e4, -100.0, -88.0, -20.0, -1e-30, -0.0, 0.0, 1e-30, 20.0, 88.0, 100.0, 1e4, np.inf],
    dtype=np.float32,
)


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in ELEMENTWISE
        if c[0] in {"exp", "exp2", "sign", "abs", "relu", "erf", "sigmoid", "tanh", "leaky_relu"}
    ],
    ids=_ids,
)
def test_large_and_infinite_inputs(case):
    _, ours, theirs, _ = case
    (out,) = run(ours, EXTREME)
    assert_matches_torch(out, theirs(torch.tensor(EXTREME)))


@pytest.mark.parametrize(
    "case", [c for c in ELEMENTWISE if c[0] in {"silu", "gelu", "gelu_exact"}], ids=_ids
)
def test_large_finite_inputs_give_no_nan(case):
    """At -inf these are inf * 0 = NaN in PyTorch too; on finite inputs neither gives NaN."""
    _, ours, theirs, _ = case
    finite = EXTREME[np.isfinite(EXTREME)]
    (out,) = run(ours, finite)
    assert not np.isnan(out).any()
    assert_matches_torch(out, theirs(torch.tensor(finite)))


def test_nan_propagates_like_torch():
    data = np.array([np.nan, 1.0], dtype=np.float32)
    names = ["relu", "abs", "sign", "erf", "sigmoid", "tanh", "exp", "gelu", "leaky_relu"]
    outs = run(lambda x: [getattr(x, name)() for name in names], data)
    t = torch.tensor(data)
    refs = [t.relu(), t.abs(), t.sign(), t.erf(), t.sigmoid(), t.tanh(), t.exp()]
    refs += [F.gelu(t, approximate="tanh"), F.leaky_relu(t)]
    for name, out, ref in zip(names, outs, refs, strict=True):
        np.testing.assert_array_equal(np.isnan(out), ref.isnan().numpy(), err_msg=name)


SOFTMAX_ROWS = np.array(
    [
        [100.0, -100.0, 0.0, 1e4],
        [-1e4, -1e4 + 1, -1e4 + 2, -1e4],
        [-np.inf, 1.0, -np.inf, 2.0],
        [-np.inf, -np.inf, -np.inf, 5.0],
        [88.0, 89.0, 90.0, 91.0],
    ],
    dtype=np.float32,
)


@pytest.mark.parametrize(
    "name, theirs",
    [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)],
    ids=["softmax", "log_softmax"],
)
def test_softmax_large_and_masked_rows(name, theirs):
    (out,) = run(lambda x: getattr(x, name)(-1), SOFTMAX_ROWS)
    expected = theirs(torch.tensor(SOFTMAX_ROWS), -1)
    assert not np.isnan(out).any()
    assert_matches_torch(out, expected)


# ---------------------------------------------------------------- erf accuracy
def test_erf_float32_accurate_on_dense_grid():
    grid = np.linspace(-6, 6, 240_001, dtype=np.float32)
    (out,) = run(lambda x: x.erf(), grid)
    expected = torch.erf(torch.tensor(grid, dtype=torch.float64)).numpy()
    assert np.abs(out.astype(np.float64) - expected).max() < 1e-6
    np.testing.assert_array_equal(np.sign(out), np.sign(grid))  # odd, erf(0) = 0
    assert np.abs(out).max() <= 1.0 + 1e-6


# ---------------------------------------------------------------- axes
def test_layer_norm_over_trailing_axes(rng):
    data = uniform(rng, (2, 3, 4))
    outs = run(
        lambda x: [x.layer_norm((-2, -1)), x.layer_norm((1, 2)), x.layer_norm((2, 1), eps=1e-2)],
        data,
    )
    t = torch.tensor(data)
    assert_matches_torch(outs[0], F.layer_norm(t, (3, 4)))
    assert_matches_torch(outs[1], F.layer_norm(t, (3, 4)))
    assert_matches_torch(outs[2], F.layer_norm(t, (3, 4), eps=1e-2))


def test_layer_norm_over_leading_axis(rng):
    data = uniform(rng, (5, 3))
    (out,) = run(lambda x: x.layer_norm(0), data)
    t = torch.tensor(data)
    assert_matches_torch(out, F.layer_norm(t.T, (5,)).T)


def _move_to_end(t: torch.Tensor, axes: tuple[int, ...]) -> tuple[torch.Tensor, list[int]]:
    """Permute `axes` last and flatten them, so torch can reduce over one dim."""
    axes = tuple(a % t.ndim for a in axes)
    kept = [i for i in range(t.ndim) if i not in axes]
    order = kept + list(axes)
    return t.permute(order).flatten(len(kept)), order


def _over_axes(fn: Callable, t: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    moved, order = _move_to_end(t, axes)
    shape = [t.shape[i] for i in order]
    return fn(moved).reshape(shape).permute(np.argsort(order).tolist())


@pytest.mark.parametrize("axes", [(0, 2), (-1, 0), (1,), -2, (0, 1, 2)], ids=str)
def test_softmax_family_over_multiple_and_negative_axes(rng, axes):
    data = uniform(rng, (2, 3, 4), -4, 4)
    soft, log_soft, layer, mean, rms = run(
        lambda x: [
            x.softmax(axes),
            x.log_softmax(axes),
            x.layer_norm(axes),
            x.mean_norm(axes),
            x.std_norm(axes),
        ],
        data,
    )
    t = torch.tensor(data)
    tuple_axes = axes if isinstance(axes, tuple) else (axes,)
    assert_matches_torch(soft, _over_axes(lambda m: m.softmax(-1), t, tuple_axes))
    assert_matches_torch(log_soft, _over_axes(lambda m: m.log_softmax(-1), t, tuple_axes))
    assert_matches_torch(layer, _over_axes(lambda m: F.layer_norm(m, m.shape[-1:]), t, tuple_axes))
    assert_matches_torch(mean, t - t.mean(tuple_axes, keepdim=True))
    assert_matches_torch(rms, _rms_norm(t, tuple_axes))


@pytest.mark.parametrize("p", [1, 2, 3.0, 0.5, float("inf")], ids=str)
@pytest.mark.parametrize("axis", [-1, 0, (0, 2)], ids=str)
def test_normalize_p_and_axes(rng, p, axis):
    data = uniform(rng, (2, 3, 4))
    data[1, 2, :] = 0.0  # an all-zero row stays zero (eps guards the division)
    (out,) = run(lambda x: x.normalize(p=p, axis=axis), data)
    assert_matches_torch(out, F.normalize(torch.tensor(data), p=p, dim=axis))


def test_normalisation_over_symbolic_dim(rng):
    cx = lm.Graph()
    x = cx.tensor(("n", 4))
    outs = [x.softmax(0).retrieve(), x.layer_norm(0).retrieve(), x.std_norm((0, 1)).retrieve()]
    data = uniform(rng, (5, 4))
    x.set(data)
    cx.execute()
    t = torch.tensor(data)
    assert_matches_torch(outs[0].numpy(), t.softmax(0))
    assert_matches_torch(outs[1].numpy(), F.layer_norm(t.T, (5,)).T)
    assert_matches_torch(outs[2].numpy(), _rms_norm(t, (0, 1)))


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "build",
    [
        lambda x: x.softmax(3),
        lambda x: x.log_softmax((0, 0)),
        lambda x: x.layer_norm(-4),
        lambda x: x.normalize(axis=5),
        lambda x: x.std_norm((1, 7)),
        lambda x: x.mean_norm(2),
    ],
)
def test_bad_axes_raise_and_leave_graph_unchanged(build):
    cx = lm.Graph()
    x = cx.tensor((2, 3), dtype=lm.float16)
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"\(2, 3\)"):
        build(x)
    assert cx.num_nodes == nodes


def test_scalar_has_no_axis_to_normalise():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="softmax"):
        cx.tensor(()).softmax()


def test_bool_abs_and_relu_raise_like_torch():
    cx = lm.Graph()
    x = cx.tensor((2,), dtype=lm.bool)
    with pytest.raises(lm.DTypeError, match="abs"):
        x.abs()
    with pytest.raises(lm.DTypeError, match="relu"):
        x.relu()


def test_unknown_gelu_approximation_raises():
    cx = lm.Graph()
    x = cx.tensor((2,))
    nodes = cx.num_nodes
    with pytest.raises(lm.LuminalError, match="approximate"):
        x.gelu(approximate="sigmoid")
    assert cx.num_nodes == nodes

"""Movement ops against PyTorch/numpy: permutes, reshapes, broadcasts, slices, pads,
pooling windows, indexing, gather, concat/stack, symbolic dims and chains of views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias

import luminal as lm
from tests.conftest import assert_matches_torch, run, uniform

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check(build, torch_build, *arrays: np.ndarray) -> None:
    """Run `build` on graph inputs and `torch_build` on the same data; compare each output."""
    outs = run(build, *arrays)
    expected = torch_build(*(torch.from_numpy(np.asarray(a)) for a in arrays))
    if isinstance(expected, torch.Tensor):
        expected = [expected]
    assert len(outs) == len(expected)
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs)


# ---------------------------------------------------------------- permutes
@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (-1, 0, -2)])
def test_permute(rng, axes):
    a = uniform(rng, (2, 3, 4))
    _check(
        lambda x: [x.permute(axes), x.permute(*axes)],
        lambda t: [t.permute(axes), t.permute(*axes)],
        a,
    )


def test_transpose_and_T(rng):  # noqa: N802 - mirrors the attribute name
    a = uniform(rng, (2, 3, 4))
    m = uniform(rng, (3, 5))
    _check(
        lambda x, y: [x.transpose(), x.transpose(0, 2), x.transpose(-3, 1), x.T, y.T, y.T.T],
        lambda x, y: [
            x.transpose(-2, -1),
            x.transpose(0, 2),
            x.transpose(-3, 1),
            x.permute(2, 1, 0),
            y.T,
            y,
        ],
        a,
        m,
    )


def test_bad_permutation_raises():
    cx = lm.Graph()
    x = cx.tensor((2, 3, 4))
    for axes in [(0, 1), (0, 0, 1), (0, 1, 3)]:
        with pytest.raises(lm.ShapeError, match="permute"):
            x.permute(axes)


# ---------------------------------------------------------------- reshapes
@pytest.mark.parametrize(
    "shape", [(6, 4), (-1,), (4, -1), (2, 3, 4), (1, 24), (24, 1, 1), (2, -1, 2), (3, 2, 2, 2)]
)
def test_reshape_contiguous(rng, shape):
    a = uniform(rng, (2, 3, 4))
    _check(lambda x: x.reshape(shape), lambda t: t.reshape(shape), a)


@pytest.mark.parametrize("shape", [(6, 4), (-1,), (4, 6), (2, 12), (3, 8), (24,)])
def test_reshape_of_views_that_need_a_copy(rng, shape):
    a = uniform(rng, (4, 3, 2))
    _check(
        lambda x: [
            x.permute(2, 0, 1).reshape(shape),
            x.pad(((0, 0), (1, 0), (0, 0)))[:, :3].reshape(shape),
            x.pad(((1, 1), (0, 0), (0, 0))).reshape((-1,)),
            x.transpose(0, 1).transpose(1, 2).reshape(shape),
        ],
        lambda t: [
            t.permute(2, 0, 1).reshape(shape),
            F.pad(t, (0, 0, 1, 0))[:, :3].reshape(shape),
            F.pad(t, (0, 0, 0, 0, 1, 1)).reshape(-1),
            t.transpose(0, 1).transpose(1, 2).reshape(shape),
        ],
        a,
    )


def test_reshape_of_sliced_and_stepped_views(rng):
    a = uniform(rng, (6, 8))
    _check(
        lambda x: [
            x[1:5].reshape((2, 16)),
            x[:, ::2].reshape((-1,)),
            x[::3, 1:7].reshape((3, 4)),
            x[2:4, 2:6].T.reshape((8,)),
            x.pad(((0, 0), (2, 2)))[:, 2:10].reshape((4, 12)),
        ],
        lambda t: [
            t[1:5].reshape(2, 16),
            t[:, ::2].reshape(-1),
            t[::3, 1:7].reshape(3, 4),
            t[2:4, 2:6].T.reshape(8),
            F.pad(t, (2, 2))[:, 2:10].reshape(4, 12),
        ],
        a,
    )


def test_reshape_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    before = cx.num_nodes
    for shape in [(4, 2), (-1, -1), (5, -1)]:
        with pytest.raises(lm.ShapeError, match="reshape"):
            x.reshape(shape)
    assert cx.num_nodes == before


def test_flatten_merge_split(rng):
    a = uniform(rng, (2, 3, 4, 5))
    _check(
        lambda x: [
            x.flatten(),
            x.flatten(1),
            x.flatten(1, 2),
            x.flatten(-2, -1),
            x.merge_dims(0, 1),
            x.merge_dims(-2, -1),
            x.split_dims(2, 2),
            x.split_dims(-1, 5),
            x.permute(3, 1, 0, 2).merge_dims(1, 2),
            x.permute(3, 1, 0, 2).split_dims(0, 1),
        ],
        lambda t: [
            t.flatten(),
            t.flatten(1),
            t.flatten(1, 2),
            t.flatten(-2, -1),
            t.reshape(6, 4, 5),
            t.reshape(2, 3, 20),
            t.reshape(2, 3, 2, 2, 5),
            t.reshape(2, 3, 4, 1, 5),
            t.permute(3, 1, 0, 2).reshape(5, 6, 4),
            t.permute(3, 1, 0, 2).reshape(5, 1, 3, 2, 4),
        ],
        a,
    )


def test_merge_and_split_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 3, 4))
    with pytest.raises(lm.ShapeError, match="merge_dims"):
        x.merge_dims(0, 2)
    with pytest.raises(lm.ShapeError, match="split_dims"):
        x.split_dims(2, 3)


def test_unsqueeze_squeeze(rng):
    a = uniform(rng, (2, 1, 3, 1))
    _check(
        lambda x: [
            x.unsqueeze(0),
            x.unsqueeze(-1),
            x.unsqueeze(2),
            x.unsqueeze(-5),
            x.squeeze(),
            x.squeeze(1),
            x.squeeze(-1),
            x.squeeze((1, 3)),
        ],
        lambda t: [
            t.unsqueeze(0),
            t.unsqueeze(-1),
            t.unsqueeze(2),
            t.unsqueeze(-5),
            t.squeeze(),
            t.squeeze(1),
            t.squeeze(-1),
            t.squeeze((1, 3)),
        ],
        a,
    )


def test_squeeze_of_a_non_unit_dim_raises():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="squeeze"):
        cx.tensor((2, 1)).squeeze(0)


# ---------------------------------------------------------------- broadcasts
@pytest.mark.parametrize(
    ("shape", "target"),
    [
        ((3, 1), (3, 4)),
        ((1, 4), (2, 3, 4)),
        ((4,), (2, 3, 4)),
        ((2, 1, 1), (2, 5, 3)),
        ((), (2, 2)),
        ((1,), (5,)),
        ((2, 3), (2, 3)),
    ],
)
def test_expand_like_numpy_broadcast_to(rng, shape, target):
    a = uniform(rng, shape)
    (ours,) = run(lambda x: x.expand(target), a)
    expected = np.broadcast_to(a, target)
    assert_matches_torch(ours, torch.from_numpy(np.array(expected)))
    (varargs,) = run(lambda x: x.expand(*target), a) if target else (ours,)
    np.testing.assert_array_equal(varargs, ours)


def test_expand_minus_one_keeps_a_dim(rng):
    a = uniform(rng, (3, 1))
    _check(lambda x: x.expand((2, -1, 4)), lambda t: t.expand(2, -1, 4), a)


def test_expand_of_non_contiguous_views(rng):
    a = uniform(rng, (4, 1, 3))
    _check(
        lambda x: [x.permute(2, 1, 0).expand((3, 5, 4)), x[1:3].expand((2, 2, 3))],
        lambda t: [t.permute(2, 1, 0).expand(3, 5, 4), t[1:3].expand(2, 2, 3)],
        a,
    )


def test_expand_errors():
    cx = lm.Graph()
    x = cx.tensor((3, 2))
    for target in [(3, 4), (2,), (-1, 3, 2)]:
        with pytest.raises(lm.ShapeError, match="expand"):
            x.expand(target)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_expand_dim(rng, axis):
    a = uniform(rng, (2, 3))
    target = [2, 3]
    target.insert(axis % 3, 4)
    _check(lambda x: x.expand_dim(axis, 4), lambda t: t.unsqueeze(axis).expand(target), a)


# ---------------------------------------------------------------- slices and pads
def test_slice_ranges_and_python_slices(rng):
    a = uniform(rng, (6, 7, 5))
    _check(
        lambda x: [
            x.slice([(1, 4)]),
            x.slice([None, (2, 7, 2), (0, 5, 3)]),
            x.slice([slice(-3, None), slice(None, -2)]),
            x.slice([(0, 100), (-100, 3)]),
            x.slice([(4, 2)]),
        ],
        lambda t: [t[1:4], t[:, 2:7:2, 0:5:3], t[-3:, :-2], t[0:100, -100:3], t[4:2]],
        a,
    )


def test_slice_with_non_positive_step_raises():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="step"):
        cx.tensor((4,))[::-1]


@pytest.mark.parametrize(
    ("padding", "torch_padding"),
    [
        (((1, 2),), (1, 2, 1, 2)),  # one pair pads every dim, as numpy.pad
        (((1, 2), None), (0, 0, 1, 2)),
        ((None, (0, 3)), (0, 3)),
        ((1, 2), (1, 2, 1, 2)),
        (2, (2, 2, 2, 2)),
        (((2, 0), (1, 1)), (1, 1, 2, 0)),
        (((0, 0), (0, 0)), (0, 0)),
    ],
)
@pytest.mark.parametrize("value", [0.0, 1.5, -2.0])
def test_pad_constant(rng, padding, torch_padding, value):
    a = uniform(rng, (3, 4))
    _check(lambda x: x.pad(padding, value), lambda t: F.pad(t, torch_padding, value=value), a)


def test_pad_with_infinity_is_clamped_to_the_finite_range(rng):
    a = uniform(rng, (2, 5))
    lo, hi, pooled = run(
        lambda x: [
            x.pad(((0, 0), (1, 1)), -np.inf),
            x.pad(((1, 0), (0, 0)), np.inf),
            x.pad(((0, 0), (1, 1)), -np.inf).pool_last_dim(3).max(-1),
        ],
        a,
    )
    t = torch.from_numpy(a)
    assert_matches_torch(lo, F.pad(t, (1, 1), value=-FLOAT32_MAX))
    assert_matches_torch(hi, F.pad(t, (0, 0, 1, 0), value=FLOAT32_MAX))
    expected_pool = F.max_pool1d(t.unsqueeze(0), 3, stride=1, padding=1).squeeze(0)
    assert_matches_torch(pooled, expected_pool)


def test_pad_of_views_and_int32(rng):
    a = uniform(rng, (3, 4))
    ints = rng.integers(-5, 6, size=(2, 3)).astype(np.int32)
    _check(
        lambda x, y: [
            x.T.pad(((1, 0), (0, 2)), 0.5),
            x[::2, 1:].pad(((1, 1), (1, 1))),
            x.pad(((1, 1), (0, 0))).pad(((0, 0), (2, 0)), -1.0),
            y.pad(((0, 1), (1, 0)), 7),
        ],
        lambda x, y: [
            F.pad(x.T, (0, 2, 1, 0), value=0.5),
            F.pad(x[::2, 1:], (1, 1, 1, 1)),
            F.pad(F.pad(x, (0, 0, 1, 1)), (2, 0), value=-1.0),
            F.pad(y, (1, 0, 0, 1), value=7),
        ],
        a,
        ints,
    )


def test_negative_padding_raises():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="pad"):
        cx.tensor((3,)).pad(((-1, 0),))


# ---------------------------------------------------------------- pooling windows
@pytest.mark.parametrize(("kernel", "stride"), [(1, 1), (2, 1), (3, 2), (4, 4), (5, 3), (10, 1)])
def test_pool_last_dim_equals_unfold(rng, kernel, stride):
    a = uniform(rng, (2, 3, 10))
    _check(
        lambda x: [x.pool_last_dim(kernel, stride), x.T.pool_last_dim(2, 1)],
        lambda t: [t.unfold(-1, kernel, stride), t.permute(2, 1, 0).unfold(-1, 2, 1)],
        a,
    )


def _numpy_windows(a: np.ndarray, kernel: int, stride: int, dilation: int) -> np.ndarray:
    n = a.shape[-1]
    windows = (n - dilation * (kernel - 1) - 1) // stride + 1
    index = np.arange(windows)[:, None] * stride + np.arange(kernel)[None, :] * dilation
    return a[..., index]


@pytest.mark.parametrize(("kernel", "stride", "dilation"), [(2, 1, 2), (3, 2, 3), (3, 1, 4)])
def test_pool_last_dim_with_dilation(rng, kernel, stride, dilation):
    a = uniform(rng, (3, 13))
    (ours,) = run(lambda x: x.pool_last_dim(kernel, stride, dilation), a)
    assert_matches_torch(ours, torch.from_numpy(_numpy_windows(a, kernel, stride, dilation)))


def test_pool_last_dim_of_padded_and_sliced_views(rng):
    a = uniform(rng, (2, 9))
    _check(
        lambda x: [
            x.pad(((0, 0), (1, 2))).pool_last_dim(3, 2),
            x.pad(((1, 0), (0, 0))).pool_last_dim(4, 1),
            x[:, 1::2].pool_last_dim(2),
            x.pool_last_dim(3, 2).pool_last_dim(2),
        ],
        lambda t: [
            F.pad(t, (1, 2)).unfold(-1, 3, 2),
            F.pad(t, (0, 0, 1, 0)).unfold(-1, 4, 1),
            t[:, 1::2].unfold(-1, 2, 1),
            t.unfold(-1, 3, 2).unfold(-1, 2, 1),
        ],
        a,
    )


def test_pool_last_dim_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 5))
    with pytest.raises(lm.ShapeError, match="pool_last_dim"):
        x.pool_last_dim(6)
    with pytest.raises(lm.ShapeError, match="pool_last_dim"):
        x.pool_last_dim(2, dilation=5)
    with pytest.raises(lm.ShapeError, match="pool_last_dim"):
        x.pool_last_dim(0)


# ---------------------------------------------------------------- indexing
def test_python_indexing(rng):
    a = uniform(rng, (4, 5, 6))
    _check(
        lambda x: [
            x[1:3, :, None],
            x[..., 0],
            x[-1],
            x[1, -2],
            x[:, ::2, 1::3],
            x[None],
            x[..., None],
            x[2, ..., 1:-1],
            x[-3:-1, None, 4, ::4],
            x[1, 2, 3],
            x[...],
        ],
        lambda t: [
            t[1:3, :, None],
            t[..., 0],
            t[-1],
            t[1, -2],
            t[:, ::2, 1::3],
            t[None],
            t[..., None],
            t[2, ..., 1:-1],
            t[-3:-1, None, 4, ::4],
            t[1, 2, 3],
            t[...],
        ],
        a,
    )


def test_indexing_of_views(rng):
    a = uniform(rng, (4, 6))
    _check(
        lambda x: [x.T[1:4, 0], x.pad(((1, 1), (0, 0)))[0], x[:, 1:][::2][-1, 2:]],
        lambda t: [t.T[1:4, 0], F.pad(t, (0, 0, 1, 1))[0], t[:, 1:][::2][-1, 2:]],
        a,
    )


def test_numpy_integers_work_as_indices_axes_and_dims(rng):
    a = uniform(rng, (4, 6))
    i = np.int64(2)
    _check(
        lambda x: [x[i], x[:, np.int32(-1)], x.reshape(np.int64(3), 8), x.sum(np.int64(1))],
        lambda t: [t[2], t[:, -1], t.reshape(3, 8), t.sum(1)],
        a,
    )


def test_bad_indices_raise():
    cx = lm.Graph()
    x = cx.tensor((3, 4))
    with pytest.raises(lm.ShapeError, match="out of range"):
        x[3]
    with pytest.raises(lm.ShapeError, match="out of range"):
        x[:, -5]
    with pytest.raises(lm.ShapeError, match="too many"):
        x[0, 0, 0]
    with pytest.raises(lm.ShapeError, match="Ellipsis"):
        x[..., ...]


# ---------------------------------------------------------------- gather
@pytest.mark.parametrize("index_shape", [(7,), (2, 5), (1,)])
def test_gather_is_an_embedding_lookup(rng, index_shape):
    table = uniform(rng, (10, 4))
    indices = rng.integers(0, 10, size=index_shape).astype(np.int32)
    (ours,) = run(lambda t, i: t.gather(i), table, indices)
    expected = F.embedding(torch.from_numpy(indices).long(), torch.from_numpy(table))
    assert_matches_torch(ours, expected)


def test_gather_of_int32_table_and_of_views(rng):
    table = rng.integers(-9, 10, size=(6, 3)).astype(np.int32)
    floats = uniform(rng, (3, 8))
    indices = np.array([[5, 0, 5], [1, 2, 3]], np.int32)
    ints, transposed = run(lambda t, f, i: [t.gather(i), f.T.gather(i[0])], table, floats, indices)
    ti = torch.from_numpy(indices).long()
    assert_matches_torch(ints, F.embedding(ti, torch.from_numpy(table)))
    assert_matches_torch(transposed, F.embedding(ti[0], torch.from_numpy(floats).T))


# ---------------------------------------------------------------- concat and stack
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_concat_with_mixed_sizes(rng, axis):
    sizes = [1, 3, 2]
    shapes = []
    for size in sizes:
        shape = [2, 3, 4]
        shape[axis] = size
        shapes.append(tuple(shape))
    arrays = [uniform(rng, s) for s in shapes]
    _check(lambda *xs: lm.concat(xs, axis), lambda *ts: torch.cat(ts, axis), *arrays)


def test_concat_of_views_and_ints(rng):
    a = uniform(rng, (3, 4))
    ints = rng.integers(-5, 5, size=(2, 4)).astype(np.int32)
    _check(
        lambda x, y: [lm.concat([x.T, x.T[:, :1]], 1), lm.concat([y, y[:: -1 + 2]], 0)],
        lambda x, y: [torch.cat([x.T, x.T[:, :1]], 1), torch.cat([y, y[::1]], 0)],
        a,
        ints,
    )


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack(rng, axis):
    arrays = [uniform(rng, (2, 3)) for _ in range(4)]
    _check(lambda *xs: lm.stack(xs, axis), lambda *ts: torch.stack(ts, axis), *arrays)


def test_concat_promotes_dtypes(rng):
    a = uniform(rng, (2, 3))
    ints = rng.integers(-5, 5, size=(1, 3)).astype(np.int32)
    _check(lambda x, y: lm.concat([x, y], 0), lambda x, y: torch.cat([x, y], 0), a, ints)


def test_concat_and_stack_many_and_bool(rng):
    arrays = [uniform(rng, (2, int(n))) for n in rng.integers(1, 4, size=7)]
    masks = [rng.random((2, 3)) < 0.5 for _ in range(3)]
    _check(
        lambda *xs: [lm.concat(xs[:7], -1), lm.concat(xs[7:], 0), lm.stack(xs[7:], 1)],
        lambda *ts: [torch.cat(ts[:7], -1), torch.cat(ts[7:], 0), torch.stack(ts[7:], 1)],
        *arrays,
        *masks,
    )


def test_gather_from_a_three_dim_table(rng):
    table = uniform(rng, (5, 2, 3))
    indices = np.array([4, 0, 4, 2], np.int32)
    (ours,) = run(lambda t, i: t.gather(i), table, indices)
    assert_matches_torch(ours, torch.from_numpy(table)[torch.from_numpy(indices).long()])


def test_concat_and_stack_errors():
    cx = lm.Graph()
    a, b = cx.tensor((2, 3)), cx.tensor((3, 3))
    with pytest.raises(lm.ShapeError, match="concat"):
        lm.concat([a, b], 1)
    with pytest.raises(lm.ShapeError, match="stack"):
        lm.stack([a, b])
    with pytest.raises(lm.ShapeError, match="concat"):
        lm.concat([], 0)


# ---------------------------------------------------------------- symbolic dims
def test_symbolic_batch_rerun_with_new_sizes(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", 3))
    w = cx.tensor((3, 2)).set(uniform(rng, (3, 2)))
    outputs = [
        (x @ w).retrieve(),
        x.sum(1).retrieve(),
        x.T.max(-1).retrieve(),
        x.pad(((1, 0), (0, 0)))[:-1].retrieve(),
        x.reshape((-1,)).retrieve(),
        lm.concat([x, x[:, :1]], 1).retrieve(),
        lm.concat([x, x[1:], x], 0).retrieve(),
        lm.stack([x, x * 2], 1).retrieve(),
        x.unsqueeze(1).expand((-1, 2, -1)).reshape(("batch", 6)).retrieve(),
    ]
    tw = torch.from_numpy(w.numpy())
    for batch in (2, 5):
        data = uniform(rng, (batch, 3))
        x.set(data)
        cx.execute()
        t = torch.from_numpy(data)
        expected = [
            t @ tw,
            t.sum(1),
            t.T.amax(-1),
            F.pad(t, (0, 0, 1, 0))[:-1],
            t.reshape(-1),
            torch.cat([t, t[:, :1]], 1),
            torch.cat([t, t[1:], t], 0),
            torch.stack([t, t * 2], 1),
            t.unsqueeze(1).expand(-1, 2, -1).reshape(batch, 6),
        ]
        for out, theirs in zip(outputs, expected, strict=True):
            assert_matches_torch(out.numpy(), theirs)


def test_two_symbolic_dims_in_one_graph(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 4))
    y = cx.tensor(("seq", 4))
    outputs = [
        (x + y).sum(1).retrieve(),
        x.permute(1, 0, 2).reshape(("seq", -1)).retrieve(),
        x.mean((0, 1)).retrieve(),
        (x @ y.T).retrieve(),
        x[:, 1:].max(1).retrieve(),
    ]
    for batch, seq in ((2, 3), (4, 2)):
        xd, yd = uniform(rng, (batch, seq, 4)), uniform(rng, (seq, 4))
        x.set(xd)
        y.set(yd)
        cx.execute()
        tx, ty = torch.from_numpy(xd), torch.from_numpy(yd)
        expected = [
            (tx + ty).sum(1),
            tx.permute(1, 0, 2).reshape(seq, -1),
            tx.mean((0, 1)),
            tx @ ty.T,
            tx[:, 1:].amax(1),
        ]
        for out, theirs in zip(outputs, expected, strict=True):
            assert_matches_torch(out.numpy(), theirs)


# ---------------------------------------------------------------- chains of views
def test_chain_permute_slice_pad_reshape_reduce(rng):
    a = uniform(rng, (4, 5, 6))
    _check(
        lambda x: [
            x.permute(2, 0, 1)[1:5, :, ::2].pad(((1, 0), (0, 1), (2, 0))).reshape((5, -1)).sum(1),
            x.permute(1, 2, 0)[::2, 1:].pad(((0, 0), (1, 1), (0, 2))).reshape((3, 7, 6)).max(0),
            x.transpose(0, 2)[1:, 1:].reshape((-1, 4)).T.pad(((1, 1), (0, 0))).mean(-1),
            x[:, None, 1:4].expand((4, 2, 3, 6)).permute(3, 1, 0, 2).reshape((12, 12)).sum(0),
        ],
        lambda t: [
            F.pad(t.permute(2, 0, 1)[1:5, :, ::2], (2, 0, 0, 1, 1, 0)).reshape(5, -1).sum(1),
            F.pad(t.permute(1, 2, 0)[::2, 1:], (0, 2, 1, 1)).reshape(3, 7, 6).amax(0),
            F.pad(t.transpose(0, 2)[1:, 1:].reshape(-1, 4).T, (0, 0, 1, 1)).mean(-1),
            t[:, None, 1:4].expand(4, 2, 3, 6).permute(3, 1, 0, 2).reshape(12, 12).sum(0),
        ],
        a,
    )


def test_contiguous_copies_only_when_needed(rng):
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    assert x.contiguous() is x
    before = cx.num_nodes
    copy = x.T.contiguous().retrieve()
    assert cx.num_nodes == before + 1
    data = uniform(rng, (2, 3))
    x.set(data)
    cx.execute()
    assert_matches_torch(copy.numpy(), torch.from_numpy(data).T.contiguous())


def _contiguous_nodes(cx: lm.Graph) -> int:
    from luminal import ops

    return sum(isinstance(node.op, ops.Contiguous) for node in cx.nodes.values())


def test_reshape_copies_only_when_a_view_cannot_express_it():
    cx = lm.Graph()
    x = cx.tensor((4, 3, 2))
    x.reshape((12, 2))
    x[1:3].reshape((-1,))
    x.permute(1, 0, 2).reshape((3, 4, 2))
    x.unsqueeze(1).squeeze(1)
    x.permute(2, 0, 1).reshape((2, 12))  # (4, 3) keeps its row-major strides
    assert _contiguous_nodes(cx) == 0
    x.permute(2, 0, 1).reshape((-1,))
    x[:, :2].reshape((-1,))
    x.pad(((1, 0), (0, 0), (0, 0))).reshape((-1,))
    assert _contiguous_nodes(cx) == 3


# ---------------------------------------------------------------- random chains of views
def _random_movement(rng: np.random.Generator, shape: tuple[int, ...]):
    """One random movement as (luminal op, numpy op), or None when it does not apply."""
    ndim = len(shape)
    kind = rng.choice(["permute", "slice", "pad", "reshape", "expand", "pool", "index"])
    if ndim == 0:
        return (lambda x: x.unsqueeze(0), lambda a: a[None])
    if kind == "permute":
        axes = [int(i) for i in rng.permutation(ndim)]
        return (lambda x: x.permute(axes), lambda a: a.transpose(axes))
    if kind == "slice":
        ranges = []
        for d in shape:
            start = int(rng.integers(0, d)) if d else 0
            ranges.append((start, int(rng.integers(start, d + 1)), int(rng.integers(1, 3))))
        key = tuple(slice(*r) for r in ranges)
        return (lambda x: x.slice(ranges), lambda a: a[key])
    if kind == "pad":
        pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape]
        value = float(rng.choice([0.0, 1.5]))
        return (lambda x: x.pad(pads, value), lambda a: np.pad(a, pads, constant_values=value))
    if kind == "reshape":
        total = int(np.prod(shape))
        divisors = [d for d in range(1, total + 1) if total % d == 0] or [0]
        first = int(rng.choice(divisors))
        target = (first, -1) if first else (-1,)
        return (lambda x: x.reshape(target), lambda a: a.reshape(target))
    if kind == "expand":
        axis, size = int(rng.integers(0, ndim + 1)), int(rng.integers(1, 4))
        target = shape[:axis] + (size,) + shape[axis:]
        return (
            lambda x: x.expand_dim(axis, size),
            lambda a: np.broadcast_to(np.expand_dims(a, axis), target),
        )
    if kind == "pool":
        kernel, stride, dilation = (int(v) for v in rng.integers(1, 4, size=3))
        if shape[-1] < dilation * (kernel - 1) + 1:
            return None
        return (
            lambda x: x.pool_last_dim(kernel, stride, dilation),
            lambda a: _numpy_windows(a, kernel, stride, dilation),
        )
    axis = int(rng.integers(0, ndim))
    if shape[axis] == 0:
        return None
    index = int(rng.integers(-shape[axis], shape[axis]))
    key = (slice(None),) * axis + (index,)
    return (lambda x: x[key], lambda a: a[key])


@pytest.mark.parametrize("seed", range(40))
def test_random_chains_of_views_match_numpy(seed):
    """Long chains of movements (each possibly needing a copy) end in a reduction; the
    values and the reduction must equal numpy's."""
    rng = np.random.default_rng(seed)
    data = uniform(rng, tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4)))))
    cx = lm.Graph()
    x = cx.tensor(data.shape).set(data)
    expected = data
    for _ in range(int(rng.integers(3, 9))):
        movement = _random_movement(rng, expected.shape)
        if movement is None:
            continue
        candidate = movement[1](expected)
        if candidate.size > 3000:
            break
        x, expected = movement[0](x), candidate
    total = x.sum(-1).retrieve() if x.ndim else None
    # max over an empty axis has no value: it raises, as in numpy and PyTorch
    peak = x.max(0).retrieve() if x.ndim and expected.shape[0] else None
    x.retrieve()
    cx.execute()
    np.testing.assert_array_equal(x.numpy(), expected)
    if total is not None:
        np.testing.assert_allclose(total.numpy(), expected.sum(-1), rtol=1e-5, atol=1e-6)
    if peak is not None:
        np.testing.assert_array_equal(peak.numpy(), expected.max(0))

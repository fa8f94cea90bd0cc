"""matmul / dot against torch.matmul: 1-D to 5-D operands, batch broadcasting, int32,
non-contiguous operands, symbolic dims, and the memory of the reference contraction."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

import luminal as lm
from tests.conftest import assert_matches_torch, run, uniform

SHAPE_PAIRS = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((1, 3), (3, 1)),
    ((5, 2, 3), (3,)),
    ((3,), (5, 3, 2)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((5, 2, 3), (1, 3, 4)),
    ((5, 1, 2, 3), (4, 3, 2)),
    ((2, 1, 3, 4, 3), (5, 1, 3, 2)),
    ((2, 3, 4, 2, 3), (3,)),
    ((3,), (2, 2, 3, 3, 4)),
    ((1, 1, 1, 2, 3), (2, 1, 3, 3, 1)),
    ((4, 1, 1), (4, 1, 2)),
]


@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPE_PAIRS)
def test_matmul_matches_torch(rng, shape_a, shape_b):
    a, b = uniform(rng, shape_a), uniform(rng, shape_b)
    op_form, method, dot = run(lambda x, y: [x @ y, x.matmul(y), x.dot(y)], a, b)
    expected = torch.matmul(torch.from_numpy(a), torch.from_numpy(b))
    for ours in (op_form, method, dot):
        assert_matches_torch(ours, expected)


@pytest.mark.parametrize(
    ("shape_a", "shape_b"), [((3,), (3,)), ((4, 3), (3, 5)), ((2, 4, 3), (3,))]
)
def test_int32_matmul_stays_int32(rng, shape_a, shape_b):
    a = rng.integers(-5, 6, size=shape_a).astype(np.int32)
    b = rng.integers(-5, 6, size=shape_b).astype(np.int32)
    (ours,) = run(lambda x, y: x @ y, a, b)
    assert_matches_torch(ours, torch.matmul(torch.from_numpy(a), torch.from_numpy(b)))


def test_int_times_float_matmul_promotes(rng):
    a = rng.integers(-5, 6, size=(4, 3)).astype(np.int32)
    b = uniform(rng, (3, 2))
    (ours,) = run(lambda x, y: x @ y, a, b)
    assert_matches_torch(ours, torch.from_numpy(a).float() @ torch.from_numpy(b))


def test_non_contiguous_operands(rng):
    a = uniform(rng, (5, 4))
    b = uniform(rng, (6, 5, 3))
    c = uniform(rng, (2, 7, 8))
    outs = run(
        lambda x, y, z: [
            x.T @ x,  # transposed, same node twice
            x[1:4] @ y[2, :, ::2][:4],  # sliced with a step
            y.permute(0, 2, 1) @ x,  # batched transpose
            z[:, 1:6, ::3].transpose(-1, -2) @ x.T[1:].T,  # both sides strided
            x.T[1] @ x[:, 2],  # 1-D strided views
        ],
        a,
        b,
        c,
    )
    ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
    expected = [
        ta.T @ ta,
        ta[1:4] @ tb[2, :, ::2][:4],
        tb.permute(0, 2, 1) @ ta,
        tc[:, 1:6, ::3].transpose(-1, -2) @ ta.T[1:].T,
        ta.T[1] @ ta[:, 2],
    ]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs)


def test_padded_and_expanded_operands(rng):
    a = uniform(rng, (3, 4))
    b = uniform(rng, (4,))
    outs = run(
        lambda x, y: [
            x.pad(((1, 0), (0, 2))) @ x.pad(((0, 3), (0, 0))),
            x @ y.unsqueeze(-1).expand((4, 5)),
            x.sum(1, keepdim=True).expand((3, 4)) @ x.T,  # broadcast along k on one side
            x.sum(1, keepdim=True).expand((3, 4)) @ y[:2].unsqueeze(0).expand((4, 2)),  # both
        ],
        a,
        b,
    )
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    padded = torch.nn.functional.pad(ta, (0, 2, 1, 0))
    expected = [
        padded @ torch.nn.functional.pad(ta, (0, 0, 0, 3)),
        ta @ tb.unsqueeze(-1).expand(4, 5),
        ta.sum(1, keepdim=True).expand(3, 4) @ ta.T,
        ta.sum(1, keepdim=True).expand(3, 4) @ tb[:2].unsqueeze(0).expand(4, 2),
    ]
    for ours, theirs in zip(outs, expected, strict=True):
        assert_matches_torch(ours, theirs)


def test_matmul_result_feeds_further_ops(rng):
    a, b = uniform(rng, (3, 4)), uniform(rng, (4, 5))
    product, chained = run(lambda x, y: [x @ y, (x @ y).sum(0) + (x @ y).T.max(-1)], a, b)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    assert_matches_torch(product, ta @ tb)
    assert_matches_torch(chained, (ta @ tb).sum(0) + (ta @ tb).T.amax(-1))


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((3,), (4,)), ((2, 3), (4, 5)), ((2, 2, 3), (3, 3, 4)), ((), (3,)), ((2, 3), ())],
)
def test_incompatible_shapes_raise_shape_error(shape_a, shape_b):
    cx = lm.Graph()
    a, b = cx.tensor(shape_a), cx.tensor(shape_b)
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match="matmul|dot"):
        a @ b
    assert cx.num_nodes == before


def test_errors_leave_the_graph_untouched_even_with_mixed_dtypes():
    cx = lm.Graph()
    a, b = cx.tensor((2, 3), dtype=lm.int32), cx.tensor((4, 5))
    before = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"matmul.*\(2, 3\) @ \(4, 5\)"):
        a @ b
    with pytest.raises(lm.ShapeError, match="batch dims"):
        cx.tensor((2, 2, 3)) @ cx.tensor((3, 3, 4), dtype=lm.int32)
    assert cx.num_nodes == before + 2
    with pytest.raises(TypeError):
        a @ [[1.0], [2.0], [3.0]]
    with pytest.raises(TypeError):
        a.matmul(np.ones((3, 2), np.float32))


def test_dot_of_mismatched_vectors_raises():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="dot"):
        cx.tensor((3,)).dot(cx.tensor((4,)))


def test_six_dim_operands_are_rejected():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="5-D"):
        cx.tensor((1, 1, 1, 1, 2, 3)) @ cx.tensor((3, 2))


def test_symbolic_batch_and_two_symbolic_dims(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 3))
    w = cx.tensor((3, 4))
    y = (x @ w).retrieve()
    scores = (x @ x.transpose(-1, -2)).sum(-1).retrieve()
    weight = uniform(rng, (3, 4))
    w.set(weight)
    for batch, seq in ((2, 5), (3, 1)):
        data = uniform(rng, (batch, seq, 3))
        x.set(data)
        cx.execute()
        td = torch.from_numpy(data)
        assert_matches_torch(y.numpy(), td @ torch.from_numpy(weight))
        assert_matches_torch(scores.numpy(), (td @ td.transpose(-1, -2)).sum(-1))


def test_large_matmul_does_not_materialise_the_broadcast_product():
    """1024^3 float32 products would be 4 GiB; the reference runtime must contract."""
    n = 1024
    rng = np.random.default_rng(0)
    a, b = uniform(rng, (n, n)), uniform(rng, (n, n))
    cx = lm.Graph()
    x, y = cx.tensor((n, n)).set(a), cx.tensor((n, n)).set(b)
    out = (x @ y).retrieve()
    tracemalloc.start()
    try:
        cx.execute()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    np.testing.assert_allclose(out.numpy(), a @ b, atol=1e-4, rtol=1e-4)

"""The CPU backend against the reference runtime: random graphs, matmul layouts, dtype
edge cases, symbolic dims, Python functions, gathers, memory plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

import luminal as lm
from luminal import ops
from luminal.backends.cpu.compiler import CPUCompiler
from tests.compiler.strategies import GraphCase, assert_compiler_preserves, random_graphs
from tests.conftest import uniform


def compiled_outputs(cx: lm.Graph, outs: list[lm.GraphTensor]) -> list[np.ndarray]:
    cx.compile(CPUCompiler())
    cx.execute()
    return [o.numpy() for o in outs]


def reference_outputs(cx: lm.Graph, outs: list[lm.GraphTensor]) -> list[np.ndarray]:
    cx.execute()
    return [o.numpy() for o in outs]


def check(cx: lm.Graph, outs: list[lm.GraphTensor], rtol: float = 1e-5, atol: float = 1e-6):
    expected = reference_outputs(cx, outs)
    for got, want in zip(compiled_outputs(cx, outs), expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


@given(random_graphs())
def test_random_graphs_match_the_reference(case: GraphCase):
    assert_compiler_preserves(case, lambda g: g.compile(CPUCompiler(verify=False)))


@pytest.mark.parametrize(
    "a_shape, b_shape, transpose_a, transpose_b",
    [
        ((8, 16), (16, 4), False, False),
        ((8, 16), (16, 4), False, True),
        ((8, 16), (16, 4), True, False),
        ((8, 16), (16, 4), True, True),
        ((16,), (16, 5), False, False),
        ((6, 16), (16,), False, False),
        ((3, 8, 16), (16, 4), False, False),
        ((3, 8, 16), (3, 16, 4), False, False),
        ((2, 1, 8, 16), (3, 16, 4), False, False),
    ],
)
def test_matmul_layouts(rng, a_shape, b_shape, transpose_a, transpose_b):
    cx = lm.Graph()
    a_data = uniform(rng, a_shape[:-2] + a_shape[-2:][::-1] if transpose_a else a_shape)
    b_data = uniform(rng, b_shape[:-2] + b_shape[-2:][::-1] if transpose_b else b_shape)
    a = cx.tensor(a_data.shape).set(a_data)
    b = cx.tensor(b_data.shape).set(b_data)
    a = a.transpose(-1, -2) if transpose_a else a
    b = b.transpose(-1, -2) if transpose_b else b
    out = (a @ b).retrieve()
    check(cx, [out], rtol=1e-5, atol=1e-5)
    expected = torch.tensor(a_data)
    expected = expected.transpose(-1, -2) if transpose_a else expected
    other = torch.tensor(b_data)
    other = other.transpose(-1, -2) if transpose_b else other
    np.testing.assert_allclose(out.numpy(), (expected @ other).numpy(), rtol=1e-5, atol=1e-5)


def test_matmul_lowers_to_blas(rng):
    cx = lm.Graph()
    a = cx.tensor((32, 64)).set(uniform(rng, (32, 64)))
    b = cx.tensor((64, 16)).set(uniform(rng, (64, 16)))
    (a @ b).retrieve()
    compiled = cx.compile(CPUCompiler())
    names = [k.name for s in compiled.segments for k in s.kernels]
    assert any(name.startswith("lm_sgemm") for name in names)


def test_softmax_layer_norm_and_fused_chain(rng):
    cx = lm.Graph()
    x = cx.tensor(("rows", 33)).set(uniform(rng, (17, 33)) * 10)
    soft = x.softmax(-1).retrieve()
    norm = x.layer_norm(-1).retrieve()
    chain = (x * x.sigmoid() * (x + 1)).retrieve()
    check(cx, [soft, norm, chain], rtol=1e-5, atol=1e-6)
    smaller = uniform(rng, (5, 33))
    x.set(smaller)  # a new size for the symbolic dim, no recompilation
    twin = lm.Graph()
    y = twin.tensor((5, 33)).set(smaller)
    twin_outs = [y.softmax(-1).retrieve(), y.layer_norm(-1).retrieve()]
    twin.execute()
    cx.execute()
    np.testing.assert_allclose(soft.numpy(), twin_outs[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.numpy(), twin_outs[1].numpy(), rtol=1e-5, atol=1e-5)


def test_special_values(rng):
    data = np.array(
        [[-np.inf, np.inf, np.nan, 0.0, -0.0], [1e-38, -1e-38, 3e38, -3e38, 1.0]], np.float32
    )
    cx = lm.Graph()
    x = cx.tensor((2, 5)).set(data)
    outs = [
        x.max(-1).retrieve(),
        x.exp2().retrieve(),
        x.abs().log2().retrieve(),
        (x + 1).retrieve(),
        x.relu().retrieve(),
        (x * 0.5)[:, :3].sum(-1).retrieve(),  # no catastrophic cancellation: order-free
        x.lt(0.0).retrieve(),
    ]
    expected = reference_outputs(cx, outs)
    for got, want in zip(compiled_outputs(cx, outs), expected, strict=True):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_all_neg_inf_max_is_neg_inf():
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(np.full((3, 4), -np.inf, np.float32))
    out = x.max(-1).retrieve()
    (result,) = compiled_outputs(cx, [out])
    assert np.all(result == -np.inf)


def test_float16_and_int_inputs(rng):
    cx = lm.Graph()
    h = cx.tensor((4, 6), dtype=lm.float16).set(uniform(rng, (4, 6)).astype(np.float16))
    i = cx.tensor((4, 6), dtype=lm.int32).set(rng.integers(-5, 5, (4, 6)).astype(np.int32))
    outs = [
        (h * 2 + 1).exp().retrieve(),
        (i * 3 + 1).retrieve(),
        (i % 3).retrieve(),
        h.cast(lm.float32).sum(0).retrieve(),
        (h.cast(lm.float32) + i).retrieve(),
    ]
    check(cx, outs, rtol=1e-3, atol=1e-3)


def test_python_function_inside_a_compiled_graph(rng):
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    doubled = cx.add_node(ops.Function("double", lambda a: a * 2), [x.exp()], (3, 4))
    out = (doubled + 1).sum(-1).retrieve()
    check(cx, [out])


def test_embedding_gather_and_bad_index(rng):
    cx = lm.Graph()
    table = cx.tensor((10, 4)).set(uniform(rng, (10, 4)))
    ids = cx.tensor(("n",), dtype=lm.int32).set(np.array([1, 9, 0, 1], np.int32))
    out = (table.gather(ids) * 2).retrieve()
    check(cx, [out])
    ids.set(np.array([3, 10], np.int32))
    with pytest.raises(lm.ExecutionError, match="out of range"):
        cx.execute()


def test_memory_plan_reuses_buffers(rng):
    cx = lm.Graph()
    x = cx.tensor((64, 64)).set(uniform(rng, (64, 64)))
    h = x
    for _ in range(6):
        h = (h @ x).softmax(-1)
    h.retrieve()
    compiled = cx.compile(CPUCompiler())
    report = cx.memory_report()
    assert report == compiled.memory_report(cx)
    assert report["arena_bytes"] < report["without_reuse_bytes"] / 2
    assert report["peak_bytes"] == report["arena_bytes"] + report["outputs_bytes"]


def test_recompiling_a_changed_graph_is_required(rng):
    cx = lm.Graph()
    x = cx.tensor((2,)).set(uniform(rng, (2,)))
    (x + 1).retrieve()
    cx.compile(CPUCompiler())
    (x * 3).retrieve()
    with pytest.raises(lm.ExecutionError, match="compile again"):
        cx.execute()


def test_linear_on_batched_sequences_uses_one_sgemm(rng):
    """(batch, seq, k) @ W merges the batch and seq axes into one BLAS M axis."""
    cx = lm.Graph()
    x = cx.tensor(("b", "s", 16)).set(uniform(rng, (2, 5, 16)))
    w = cx.tensor((8, 16)).set(uniform(rng, (8, 16)))
    out = (x @ w.T).retrieve()
    expected = reference_outputs(cx, [out])[0]
    compiled = cx.compile(CPUCompiler())
    assert any(k.name.startswith("lm_sgemm") for s in compiled.segments for k in s.kernels)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    x.set(uniform(rng, (3, 4, 16)))
    cx.execute()
    np.testing.assert_allclose(
        out.numpy(), cx.input_data[x.node_id] @ w.numpy().T, rtol=1e-5, atol=1e-5
    )


def test_scatter_accumulates_repeated_indices_like_the_reference(rng):
    """index_add with repeated rows (an embedding's gradient), on symbolic sizes."""
    cx = lm.Graph()
    base = cx.tensor((6, 3)).set(uniform(rng, (6, 3)))
    ids = cx.tensor(("n",), dtype=lm.int32).set(np.array([1, 4, 1, 1], np.int32))
    updates = cx.tensor(("n", 3)).set(uniform(rng, (4, 3)))
    out = cx.add_node(ops.Scatter(), [base, ids, updates.exp()]).retrieve()
    check(cx, [out])
    ids.set(np.array([0, 5], np.int32))
    updates.set(uniform(rng, (2, 3)))
    cx.execute()
    expected = cx.input_data[base.node_id].copy()
    np.add.at(expected, [0, 5], np.exp(cx.input_data[updates.node_id]))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_strided_operands_are_packed_for_blas(rng):
    """Operands BLAS cannot read in place (every other column, overlapping windows) are
    copied into a scratch matrix and still go to sgemm."""
    cx = lm.Graph()
    a = cx.tensor((16, 24)).set(uniform(rng, (16, 24)))
    b = cx.tensor((3, 12, 10)).set(uniform(rng, (3, 12, 10)))
    out = (a[:, ::2] @ b).retrieve()
    windows = a.reshape(-1).pool_last_dim(6, 2) @ cx.tensor((6, 4)).set(uniform(rng, (6, 4)))
    pooled = windows.retrieve()
    expected = reference_outputs(cx, [out, pooled])
    compiled = cx.compile(CPUCompiler())
    sources = [k.source for s in compiled.segments for k in s.kernels]
    assert any("malloc" in source and "sgemm" in source for source in sources)
    cx.execute()
    for got, want in zip([out.numpy(), pooled.numpy()], expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

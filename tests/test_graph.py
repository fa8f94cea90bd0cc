"""Graph and reference-runtime semantics: laziness, freeing, repeated runs, symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from tests.conftest import uniform


def test_nothing_runs_until_execute(rng):
    cx = lm.Graph()
    a = cx.tensor((2, 2))
    out = (a * 2).retrieve()
    with pytest.raises(lm.ExecutionError, match="no value"):
        out.numpy()
    a.set(np.ones((2, 2), np.float32))
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2), 2, np.float32))


def test_intermediates_are_freed_unless_kept(rng):
    cx = lm.Graph()
    a = cx.tensor((3,)).set(uniform(rng, (3,)))
    hidden = a * 3
    kept = (a + 1).keep()
    out = (hidden + kept).retrieve()
    cx.execute()
    assert hidden.node_id not in cx.buffers
    assert kept.node_id in cx.buffers and out.node_id in cx.buffers
    with pytest.raises(lm.ExecutionError):
        hidden.numpy()
    np.testing.assert_allclose(kept.numpy(), a.numpy() + 1)
    kept.drop()
    assert kept.node_id not in cx.buffers


def test_repeated_execute_with_new_inputs(rng):
    cx = lm.Graph()
    a = cx.tensor((2, 3))
    w = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    out = (a @ w).retrieve()
    for _ in range(3):
        data = uniform(rng, (2, 3))
        a.set(data)
        cx.execute()
        np.testing.assert_allclose(out.numpy(), data @ w.numpy(), rtol=1e-5, atol=1e-6)


def test_symbolic_dims_inferred_from_data_and_set_dim(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq"))
    y = cx.tensor(("seq",))
    out = (x * y).sum(1).retrieve()
    length = cx.constant("seq").retrieve()
    for batch, seq in [(2, 5), (7, 3)]:
        xd, yd = uniform(rng, (batch, seq)), uniform(rng, (seq,))
        x.set(xd)
        y.set(yd)
        cx.execute()
        np.testing.assert_allclose(out.numpy(), (xd * yd).sum(1), rtol=1e-5, atol=1e-6)
        assert out.numpy().shape == (batch,)
        assert length.numpy() == seq
    iota = cx.arange("n").retrieve()
    cx.set_dim("n", 4)
    cx.execute()
    np.testing.assert_array_equal(iota.numpy(), np.arange(4, dtype=np.int32))


def test_shape_reports_ints_and_symbols():
    cx = lm.Graph()
    x = cx.tensor(("batch", 3))
    assert x.shape[1] == 3 and isinstance(x.shape[1], int)
    assert str(x.shape[0]) == "batch"
    assert x.reshape(-1).shape[0] == lm.shape.var("batch") * 3


def test_retrieved_view_reads_through_the_view(rng):
    cx = lm.Graph()
    data = uniform(rng, (2, 3))
    a = cx.tensor((2, 3)).set(data)
    t = (a + 0.5).permute(1, 0)[1:].retrieve()
    cx.execute()
    np.testing.assert_allclose(t.numpy(), (data + 0.5).T[1:])


def test_only_needed_nodes_run(rng):
    calls = []
    cx = lm.Graph()
    a = cx.tensor((2,)).set(uniform(rng, (2,)))
    from luminal import ops

    cx.add_node(ops.Function("unused", lambda x: calls.append(1) or x), [a], (2,))
    out = (a * 2).retrieve()
    cx.execute()
    assert calls == []
    assert out.numpy().shape == (2,)


def test_broadcast_matmul_memory_is_of_operand_order():
    import tracemalloc

    rng = np.random.default_rng(1)
    n = 512
    a_data, b_data = uniform(rng, (n, n)), uniform(rng, (n, n))
    cx = lm.Graph()
    out = (cx.tensor((n, n)).set(a_data) @ cx.tensor((n, n)).set(b_data)).retrieve()
    tracemalloc.start()
    cx.execute()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * n * n * 4, f"peak {peak / 2**20:.1f} MiB suggests a broadcast product"
    np.testing.assert_allclose(out.numpy(), a_data @ b_data, rtol=1e-4, atol=1e-4)


def test_execute_debug_prints_each_op(rng, capsys):
    cx = lm.Graph()
    a = cx.tensor((2,)).set(uniform(rng, (2,)))
    (a * 2 + 1).retrieve()
    cx.execute_debug()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert any("Mul" in line for line in lines) and any("Add" in line for line in lines)
    assert all("ms" in line for line in lines)

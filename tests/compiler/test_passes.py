"""Generic passes: each keeps values, shrinks the graph where it should, and leaves user
handles usable; the schedule is a valid order that does not raise peak memory."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from luminal import ops
from luminal.compiler.passes import (
    ArithmeticElimination,
    CommonSubexpressionElimination,
    DeadCodeElimination,
    DepthFirstSchedule,
    RemoveUnitReductions,
    peak_memory_bytes,
)
from tests.compiler.strategies import GraphCase, assert_compiler_preserves, random_graphs
from tests.conftest import uniform


def count(cx: lm.Graph, op_type: type) -> int:
    return sum(isinstance(node.op, op_type) for node in cx.nodes.values())


def compile_keeps_values(
    cx: lm.Graph, outputs: Sequence[lm.GraphTensor], compiler, rtol: float = 1e-6
) -> tuple[int, int]:
    """Run, compile, run again: the outputs must not change. Returns node counts."""
    for out in outputs:
        out.retrieve()
    cx.execute()
    before = [out.numpy() for out in outputs]
    nodes_before = cx.num_nodes
    cx.compile(compiler)
    cx.execute()
    for old, out in zip(before, outputs, strict=True):
        new = out.numpy()
        assert new.shape == old.shape and new.dtype == old.dtype
        np.testing.assert_allclose(new, old, rtol=rtol, atol=1e-6, equal_nan=True)
    return nodes_before, cx.num_nodes


def assert_valid_schedule(cx: lm.Graph) -> None:
    version, order = cx.schedule
    assert version == cx.nodes.version
    assert sorted(order) == sorted(cx.nodes)
    position = {node_id: i for i, node_id in enumerate(order)}
    for node in cx.nodes.values():
        for edge in node.inputs:
            assert position[edge.source] < position[node.id]


# ---------------------------------------------------------------- CSE
def test_cse_merges_duplicate_expressions(rng):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    out = (x * 2) + (x * 2)
    before, after = compile_keeps_values(cx, [out], CommonSubexpressionElimination())
    assert count(cx, ops.Mul) == 1 and count(cx, ops.Constant) == 1
    assert after == before - 2


def test_cse_collapses_duplicated_chains_in_one_pass(rng):
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    branches = [((x.T * 0.5).exp2() + 1).sum(0) for _ in range(3)]
    out = branches[0] * branches[1] + branches[2]
    cse = CommonSubexpressionElimination()
    compile_keeps_values(cx, [out], cse)
    version = cx.nodes.version
    cx.compile(cse)
    assert cx.nodes.version == version  # nothing left to merge after one pass
    assert count(cx, ops.Exp2) == 1 and count(cx, ops.SumReduce) == 1


def test_cse_keeps_inputs_functions_views_and_signed_zeros(rng, capsys):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    y = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    left, right = x[:, :2] * 2, x[:, 1:] * 2  # same op, same node, different views
    x.print("a")
    x.print("a")
    plus = cx.constant(0.0).expand((2,)).reciprocal()
    minus = cx.constant(-0.0).expand((2,)).reciprocal()
    outputs = [left + right, x + y, plus, minus]
    compile_keeps_values(cx, outputs, CommonSubexpressionElimination())
    assert count(cx, ops.Input) == 2 and count(cx, ops.Function) == 2
    assert count(cx, ops.Mul) == 2 and count(cx, ops.Recip) == 2
    assert list(minus.numpy()) == [-np.inf, -np.inf]
    capsys.readouterr()


def test_held_intermediate_merged_by_cse_still_builds_and_runs(rng):
    cx = lm.Graph()
    data = uniform(rng, (2, 3))
    x = cx.tensor((2, 3)).set(data)
    first, second = x * 2, x * 2
    out = (first + second.T.T).retrieve()
    cx.compile(lm.GenericCompiler())
    assert first.node_id == second.node_id
    more = (second.T + 1).retrieve()
    cx.execute()
    np.testing.assert_allclose(out.numpy(), data * 4, rtol=1e-6)
    np.testing.assert_allclose(more.numpy(), data.T * 2 + 1, rtol=1e-6)


# ---------------------------------------------------------------- DCE
def test_dce_removes_unused_branches_keeps_inputs_and_side_effects(rng, capsys):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    unused_input = cx.tensor((5,))
    dead = (x.exp2() * 3).sum(0)
    (x + 1).print("shown")
    kept = (x * 2).keep()
    out = x.sin()
    before, after = compile_keeps_values(cx, [out], DeadCodeElimination())
    assert after == before - 4  # exp2, constant 3, mul, sum
    assert count(cx, ops.Exp2) == 0 and count(cx, ops.Function) == 1
    assert unused_input.node_id in cx.nodes
    unused_input.set(np.ones(5, np.float32))
    cx.execute()
    np.testing.assert_allclose(kept.numpy(), (x.numpy() * 2), rtol=1e-6)
    assert "shown" in capsys.readouterr().out
    with pytest.raises(lm.GraphError, match="removed"):
        dead + 1  # noqa: B018


# ---------------------------------------------------------------- arithmetic
def test_identity_arithmetic_is_removed(rng):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    y = cx.tensor((3, 2)).set(uniform(rng, (3, 2)))
    outputs = [
        (x + 0) * 1,
        (0 + x) * 2 + 1 * x,
        x.reciprocal().reciprocal().sin(),
        x.exp2().log2().sin(),
        (y.T + 0.0) * x,  # x's side read through a transpose view
    ]
    compile_keeps_values(cx, outputs, (ArithmeticElimination(), DeadCodeElimination()))
    assert count(cx, ops.Recip) == 0 and count(cx, ops.Exp2) == 0
    assert count(cx, ops.Log2) == 0
    assert count(cx, ops.Add) == 1 and count(cx, ops.Mul) == 2  # (x*2) + x, y.T * x


def test_float_times_zero_is_kept_since_inf_times_zero_is_nan():
    cx = lm.Graph()
    x = cx.tensor((3,)).set(np.array([1.0, np.inf, np.nan], np.float32))
    out = x * 0
    compile_keeps_values(cx, [out], lm.GenericCompiler())
    assert count(cx, ops.Mul) == 1
    np.testing.assert_array_equal(out.numpy(), [0.0, np.nan, np.nan])


def test_int_times_zero_becomes_zero():
    cx = lm.Graph()
    x = cx.tensor((2, 3), dtype=lm.int32).set(np.arange(6, dtype=np.int32).reshape(2, 3))
    inner = (x * 0 + 5) * x
    output = (0 * x.T).retrieve()  # an output: replaced by a zero tensor of its own shape
    compile_keeps_values(cx, [inner, output], lm.GenericCompiler())
    assert count(cx, ops.Mul) == 1  # only (0 + 5) * x is left
    np.testing.assert_array_equal(output.numpy(), np.zeros((3, 2), np.int32))
    np.testing.assert_array_equal(inner.numpy(), np.arange(6).reshape(2, 3) * 5)


def test_exp2_of_log2_needs_a_non_negative_argument(rng):
    cx = lm.Graph()
    data = uniform(rng, (4,))
    data[0] = -1.0
    x = cx.tensor((4,)).set(data)
    unknown = x.log2().exp2()  # log2 of a negative is NaN: must stay
    root = x.abs().sqrt()
    known = root.log2().exp2()
    compile_keeps_values(cx, [unknown, known], lm.GenericCompiler(), rtol=1e-5)
    assert count(cx, ops.Exp2) == 1 and count(cx, ops.Log2) == 1
    assert np.isnan(unknown.numpy()[0])
    assert known.node_id == root.node_id


def test_padding_is_respected(rng):
    cx = lm.Graph()
    x = cx.tensor((3,)).set(uniform(rng, (3,), 0.5, 2.0))
    padded_one = cx.constant(1.0).expand((2,)).pad(((0, 1),))  # 1, 1, 0
    outputs = [
        x * padded_one,  # not x: the last element is 0
        x.reciprocal().pad(((1, 1),)).reciprocal(),  # recip(0) = inf at the padding
        x.exp2().pad(((1, 0),)).log2(),  # log2(0) = -inf at the padding
        x.pad(((1, 0),)).reciprocal().reciprocal() + 0,  # inner padding: 1/(1/0) = 0
    ]
    compile_keeps_values(cx, outputs, lm.GenericCompiler())
    assert count(cx, ops.Recip) == 2 and count(cx, ops.Log2) == 1


# ---------------------------------------------------------------- unit reductions
def test_unit_reductions_are_removed(rng):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(uniform(rng, (2, 3)))
    summed = x.T.unsqueeze(1).sum(1) * 2
    maxed = x.unsqueeze(0).max(0) + 1
    identity_output = x.reshape((2, 1, 3)).sum(1)  # reads x itself: the output moves to x
    view_output = x.T.unsqueeze(1).sum(1)  # an output cannot become a view: stays
    outputs = [summed, maxed, identity_output, view_output]
    compile_keeps_values(cx, outputs, (RemoveUnitReductions(), DeadCodeElimination()))
    assert count(cx, ops.MaxReduce) == 0 and count(cx, ops.SumReduce) == 1
    assert identity_output.node_id == x.node_id


# ---------------------------------------------------------------- schedule
def _two_branches(n: int) -> tuple[lm.Graph, list[lm.GraphTensor], lm.GraphTensor]:
    """A big first operand, then a second whose subtree needs three big buffers: running
    the second subtree first keeps one big buffer fewer alive."""
    cx = lm.Graph()
    x, y, z = (cx.tensor((n,)) for _ in range(3))
    first = x * 2
    second = (y.exp2() + z.exp2()).sum(0)
    out = (first + second).retrieve()
    return cx, [x, y, z], out


def test_schedule_lowers_peak_memory_and_is_a_valid_order():
    cx, _, _ = _two_branches(1024)
    depth_first = peak_memory_bytes(cx)
    cx.compile(DepthFirstSchedule())
    assert_valid_schedule(cx)
    big = 1024 * 4
    assert depth_first >= 4 * big  # x * 2 waits while exp2(y), exp2(z) and their sum live
    assert peak_memory_bytes(cx) < 3 * big + 64


def test_schedule_runs_and_survives_later_edits(rng):
    cx, inputs, out = _two_branches(16)
    arrays = [uniform(rng, (16,)) for _ in inputs]
    for tensor, array in zip(inputs, arrays, strict=True):
        tensor.set(array)
    cx.compile(lm.GenericCompiler())
    cx.execute()
    expected = arrays[0] * 2 + (np.exp2(arrays[1]) + np.exp2(arrays[2])).sum()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    extra = (out * 3).retrieve()  # the graph changed: the schedule no longer applies
    cx.execute()
    np.testing.assert_allclose(extra.numpy(), expected * 3, rtol=1e-5)


# ---------------------------------------------------------------- the bundle
def test_generic_compiler_reaches_a_fixed_point(rng):
    cx = lm.Graph()
    x = cx.tensor((4, 4)).set(uniform(rng, (4, 4)))
    h = ((x + 0) * 1).reciprocal().reciprocal()
    out = (h.unsqueeze(0).sum(0) @ (x * 2) + (x * 2).exp2().log2()).relu()
    (x.sin() * 3).sum()  # dead
    before, after = compile_keeps_values(cx, [out], lm.GenericCompiler(), rtol=1e-5)
    assert after < before
    assert_valid_schedule(cx)
    version = cx.nodes.version
    assert cx.compile(lm.GenericCompiler()) is None
    assert cx.nodes.version == version


def test_symbolic_dims_run_at_two_sizes_after_compiling(rng):
    cx = lm.Graph()
    x = cx.tensor(("batch", 3))
    w = cx.tensor((3, 1))
    y = ((x @ w).sum(1) + 0) * 1 + (x * 2).sum(1) + (x * 2).max(1)
    out = y.retrieve()
    cx.compile(lm.GenericCompiler())
    assert_valid_schedule(cx)
    weights = uniform(rng, (3, 1))
    w.set(weights)
    for batch in (2, 5):
        data = uniform(rng, (batch, 3))
        x.set(data)
        cx.execute()
        expected = (data @ weights)[:, 0] + (data * 2).sum(1) + (data * 2).max(1)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_looped_stops_at_a_fixed_point_and_timed_reports(rng, capsys):
    class CountingCSE(CommonSubexpressionElimination):
        runs = 0

        def compile(self, graph: lm.Graph) -> None:
            CountingCSE.runs += 1
            super().compile(graph)

    cx = lm.Graph()
    x = cx.tensor((2,)).set(uniform(rng, (2,)))
    ((x * 2) + (x * 2)).retrieve()
    timed = lm.Timed(lm.Looped(CountingCSE()), label="cse")
    cx.compile(timed)
    assert CountingCSE.runs == 2  # one that merges, one that finds nothing
    assert timed.seconds > 0
    assert capsys.readouterr().out.startswith("cse: ")
    quiet = lm.Timed(lm.GenericCompiler(), quiet=True)
    cx.compile(quiet)
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- random graphs
def _compile_and_check_schedule(graph: lm.Graph) -> None:
    graph.compile(lm.GenericCompiler())
    assert_valid_schedule(graph)
    roots = graph.output_roots()
    plain = graph.topological_order(roots)
    assert peak_memory_bytes(graph) <= peak_memory_bytes(graph, order=plain)


@given(random_graphs())
def test_generic_compiler_preserves_random_graphs(case: GraphCase):
    assert_compiler_preserves(case, _compile_and_check_schedule)


UNARY = ("exp2", "log2", "sin", "sqrt", "recip", "add0", "mul1", "mul2", "unit_sum", "tt")
BINARY = ("add", "mul")
SHAPE = (3, 4)

program = st.lists(
    st.tuples(st.sampled_from(UNARY + BINARY), st.integers(0, 63), st.integers(0, 63)),
    min_size=1,
    max_size=14,
)


def _apply(name: str, a: lm.GraphTensor, b: lm.GraphTensor) -> lm.GraphTensor:
    if name == "exp2":
        return a.sin().exp2()  # bounded, so no overflow decides the comparison
    if name == "log2":
        return (a.abs() + 1).log2()
    if name == "sqrt":
        return a.abs().sqrt()
    table = {
        "sin": lambda: a.sin(),
        "recip": lambda: (a.abs() + 0.5).reciprocal().reciprocal(),
        "add0": lambda: a + 0,
        "mul1": lambda: 1 * a,
        "mul2": lambda: a * 2,
        "unit_sum": lambda: a.unsqueeze(1).sum(1),
        "tt": lambda: (a.T * 1).T,
        "add": lambda: a + b,
        "mul": lambda: (a * b).sin(),
    }
    return table[name]()


@given(program, st.integers(1, 3))
def test_generic_compiler_removes_random_identity_chains(steps, n_outputs):
    """Chains dense in the patterns the passes target (x+0, 1*x, recip(recip), unit sums,
    duplicates): values are kept, and none of the removable patterns survives."""
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    pool = [cx.tensor(SHAPE).set(uniform(rng, SHAPE)) for _ in range(2)]
    for name, i, j in steps:
        pool.append(_apply(name, pool[i % len(pool)], pool[j % len(pool)]))
    outputs = pool[-n_outputs:]
    compile_keeps_values(cx, outputs, lm.GenericCompiler(), rtol=1e-4)
    assert count(cx, ops.Recip) == 0
    identities = {ops.Add: ops.Constant(0), ops.Mul: ops.Constant(1)}
    for node in cx.nodes.values():
        if node.id in cx.retrieved:
            continue  # an output read through a view cannot become that view
        assert not isinstance(node.op, ops.SumReduce)
        if type(node.op) in identities:
            assert identities[type(node.op)] not in [cx.nodes[e.source].op for e in node.inputs]

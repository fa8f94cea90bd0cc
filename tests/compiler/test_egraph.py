"""The e-graph layer: encode/decode round trip, rulesets preserve values, limits,
region reuse and candidate enumeration."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given

import luminal as lm
from luminal import ops
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.egraph.candidates import enumerate_programs
from luminal.compiler.egraph.extract import SerializedEGraph, best_choice, decode_program
from luminal.compiler.egraph.program import program_from_region, write_program
from luminal.compiler.egraph.regions import split_regions
from luminal.compiler.terms import Term
from tests.compiler.strategies import GraphCase, assert_compiler_preserves, random_graphs
from tests.conftest import uniform


def _outputs(cx: lm.Graph, tensors: list[lm.GraphTensor]) -> list[np.ndarray]:
    cx.execute()
    return [t.numpy() for t in tensors]


def _assert_same(before: list[np.ndarray], after: list[np.ndarray]) -> None:
    for x, y in zip(before, after, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


def _mixed_graph(rng: np.random.Generator) -> tuple[lm.Graph, list[lm.GraphTensor]]:
    """Views, symbolic dims, reductions, matmul, a softmax and rewritable patterns."""
    cx = lm.Graph()
    x = cx.tensor(("n", 6), name="x").set(uniform(rng, (5, 6)))
    w = cx.tensor((6, 4), name="w").set(uniform(rng, (6, 4)))
    h = (x @ w + 0.0) * 1.0
    h = h.reciprocal().reciprocal() + h.T.contiguous().T
    soft = h.softmax(-1)
    padded = soft.pad(((1, 0), (0, 2)))[:, 1:].sum(0)
    mixed = (soft * 3 + soft * 2).exp2().log2()
    return cx, [padded.retrieve(), mixed.retrieve(), (x[:, ::2] * 2).max(1).retrieve()]


def test_round_trip_without_rules_preserves_graph(rng):
    cx, outs = _mixed_graph(rng)
    before = _outputs(cx, outs)
    count = cx.num_nodes
    report = cx.compile(EGraphCompiler(rulesets=()))
    assert report.stopped_by == ["saturated"]
    _assert_same(before, _outputs(cx, outs))
    assert cx.num_nodes <= count


@pytest.mark.parametrize("rulesets", [("algebra",), ("structure",), ("algebra", "structure")])
def test_rulesets_preserve_values_with_views_and_symbolic_dims(rng, rulesets):
    cx, outs = _mixed_graph(rng)
    twin, twin_outs = _mixed_graph(np.random.default_rng(0))
    before = _outputs(cx, outs)
    cx.compile(EGraphCompiler(rulesets=rulesets))
    _assert_same(before, _outputs(cx, outs))
    # a second size of the symbolic dim, against an uncompiled twin
    data = uniform(rng, (9, 6))
    for graph in (cx, twin):
        (x,) = [n for n in graph.nodes.values() if getattr(n.op, "label", "") == "x"]
        graph.input_data[x.id] = data
        graph.dims["n"] = 9
    _assert_same(_outputs(twin, twin_outs), _outputs(cx, outs))


def _count(cx: lm.Graph, op_type: type) -> int:
    return sum(isinstance(n.op, op_type) for n in cx.nodes.values())


@pytest.mark.parametrize(
    "build, removed",
    [
        (lambda x: x + 0.0, ops.Add),
        (lambda x: x * 1.0, ops.Mul),
        (lambda x: x.reciprocal().reciprocal(), ops.Recip),
        (lambda x: x.exp2().log2(), ops.Log2),
        (lambda x: x.exp2().log2().exp2(), ops.Log2),
    ],
    ids=["add-zero", "mul-one", "recip-recip", "log2-exp2", "exp2-log2-of-positive"],
)
def test_algebra_rule_removes_op(rng, build, removed):
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    out = build(x).retrieve()
    before = _outputs(cx, [out])
    cx.compile(EGraphCompiler(rulesets=("algebra",)))
    assert _count(cx, removed) == 0
    _assert_same(before, _outputs(cx, [out]))


def test_distributivity_saves_a_multiply(rng):
    cx = lm.Graph()
    a, b, c = (cx.tensor((5,)).set(uniform(rng, (5,))) for _ in range(3))
    out = (a * b + a * c).retrieve()
    before = _outputs(cx, [out])
    cx.compile(EGraphCompiler(rulesets=("algebra",)))
    assert _count(cx, ops.Mul) == 1
    _assert_same(before, _outputs(cx, [out]))


def test_scalar_constants_fold(rng):
    cx = lm.Graph()
    out = (cx.constant(2.0) * cx.constant(3.0) + cx.constant(0.5)).retrieve()
    cx.compile(EGraphCompiler(rulesets=("algebra",)))
    assert _count(cx, ops.Constant) == 1 and _count(cx, ops.Mul) == 0
    assert _outputs(cx, [out])[0] == np.float32(6.5)


def test_float_times_zero_is_not_rewritten(rng):
    cx = lm.Graph()
    x = cx.tensor((2,)).set(np.array([np.inf, 1.0], np.float32))
    out = (x * 0.0).retrieve()
    cx.compile(EGraphCompiler())
    result = _outputs(cx, [out])[0]
    assert np.isnan(result[0]) and result[1] == 0


def _saturated(cx: lm.Graph, rulesets=("algebra", "structure"), **limits):
    (region,) = split_regions(cx, cx.output_roots())
    program, boundary_ids = program_from_region(cx, region.nodes, region.outputs)
    compiler = EGraphCompiler(rulesets=rulesets, **limits)
    return compiler, compiler.saturate(program), region, boundary_ids


def test_structure_rules_recognise_matmul_and_normalisation(rng):
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    w = cx.tensor((4, 5)).set(uniform(rng, (4, 5)))
    y = (x @ w).exp()
    (y * y.sum(-1, keepdim=True).reciprocal()).retrieve()
    _, saturation, _, _ = _saturated(cx, rulesets=("structure",))
    ops_seen = {node.op for node in saturation.serialized.nodes.values()}
    assert "Term.contract" in ops_seen and "Term.normalize" in ops_seen


def test_node_limit_stops_saturation_and_still_extracts(rng):
    cx = lm.Graph()
    xs = [cx.tensor((2,)).set(uniform(rng, (2,))) for _ in range(8)]
    total = xs[0]
    for x in xs[1:]:
        total = total * x + x * total
    out = total.retrieve()
    before = _outputs(cx, [out])
    compiler = EGraphCompiler(node_limit=50)
    cx.compile(compiler)
    assert compiler.report.stopped_by == ["node limit"]
    _assert_same(before, _outputs(cx, [out]))


def test_time_limit_stops_saturation(rng):
    cx = lm.Graph()
    xs = [cx.tensor((2,)).set(uniform(rng, (2,))) for _ in range(8)]
    total = xs[0]
    for x in xs[1:]:  # more rewrites than the rounds run before the time limit
        total = total * x + x * total
    total.retrieve()
    compiler = EGraphCompiler(time_limit=0.0)
    cx.compile(compiler)
    assert compiler.report.stopped_by == ["time limit"]


def test_time_limit_still_lowers_products_to_contractions(rng):
    """A machine so loaded that the time limit passes while the e-graph is built must
    not leave a matmul as Mul + SumReduce loops: the first rounds always run."""
    cx = lm.Graph()
    x = cx.tensor((8, 16)).set(uniform(rng, (8, 16)))
    w = cx.tensor((16, 32)).set(uniform(rng, (16, 32)))
    out = (x @ w).retrieve()
    before = _outputs(cx, [out])
    cx.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu"), time_limit=0.0))
    assert any(isinstance(node.op, ops.Contract) for node in cx.nodes.values())
    _assert_same(before, _outputs(cx, [out]))


def test_undecodable_egraph_names_ruleset_and_node(rng):
    cx = lm.Graph()
    x = cx.tensor((2,)).set(uniform(rng, (2,)))
    (x + 1).retrieve()
    _, saturation, _, _ = _saturated(cx)
    serialized = saturation.serialized
    for node in serialized.nodes.values():
        if node.op == "Term.add":
            node.op = "Term.mystery"
    with pytest.raises(lm.CompileError, match=r"algebra\+structure.*Term\.mystery"):
        decode_program(
            serialized,
            saturation.tables,
            saturation.program.boundaries,
            saturation.output_classes,
            best_choice(serialized),
            "algebra+structure",
        )


def test_unknown_ruleset_is_a_compile_error():
    with pytest.raises(lm.CompileError, match="unknown ruleset"):
        EGraphCompiler(rulesets=("nonsense",))


def test_identical_regions_are_saturated_once(rng):
    cx = lm.Graph()
    x = cx.tensor((4, 8)).set(uniform(rng, (4, 8)))
    h = x
    for layer in range(6):
        w = cx.tensor((8, 8), name=f"w{layer}").set(uniform(rng, (8, 8)) * 0.3)
        h = ((h @ w).softmax(-1) * 2.0 + h).graph_break()
    out = h.retrieve()
    before = _outputs(cx, [out])
    compiler = EGraphCompiler()
    report = cx.compile(compiler)
    assert report.regions == 6
    assert report.distinct_regions <= 2  # the first layer reads the input, the rest repeat
    _assert_same(before, _outputs(cx, [out]))


def test_candidates_are_distinct_and_all_match_the_reference(rng):
    cx = lm.Graph()
    x = cx.tensor((3, 5)).set(uniform(rng, (3, 5)))
    w = cx.tensor((5, 2)).set(uniform(rng, (5, 2)))
    y = (x @ w).softmax(-1)
    out = (y * 2 + y * 3 + 0.0).retrieve()
    (expected,) = _outputs(cx, [out])
    compiler, saturation, region, boundary_ids = _saturated(cx)
    programs = enumerate_programs(saturation, k=4, samples=4, seed=1)
    assert len(programs) >= 4
    assert len({p.key() for p in programs}) == len(programs)
    for program in programs:
        candidate = copy.deepcopy(cx)
        (new,) = write_program(candidate, program, boundary_ids)
        assert candidate.replace(region.outputs[0], new)
        candidate.execute()
        np.testing.assert_allclose(candidate.buffers[new], expected, rtol=1e-5, atol=1e-6)
    again = enumerate_programs(saturation, k=4, samples=4, seed=1)
    assert [p.key() for p in again] == [p.key() for p in programs]


def test_serialized_costs_follow_declared_costs(rng):
    cx = lm.Graph()
    x = cx.tensor((2,)).set(uniform(rng, (2,)))
    (x.exp2() + 1).retrieve()
    _, saturation, _, _ = _saturated(cx)
    assert isinstance(saturation.serialized, SerializedEGraph)
    costs = {n.op: n.cost for n in saturation.serialized.nodes.values()}
    assert costs["Term.exp2"] > costs["Term.boundary"]


@given(random_graphs())
def test_egraph_round_trip_preserves_random_graphs(case: GraphCase):
    assert_compiler_preserves(case, lambda g: g.compile(EGraphCompiler(rulesets=())))


@given(random_graphs())
def test_egraph_rules_preserve_random_graphs(case: GraphCase):
    assert_compiler_preserves(case, lambda g: g.compile(EGraphCompiler()))


def test_backend_hook_adds_a_lowering_with_its_own_cost_and_decoder(rng):
    """A backend registers a ruleset that lowers a recognised structure to its own op
    (cheaper than the primitives) and a decoder for that op."""
    from egglog import function, i64, i64Like, rewrite, ruleset

    from luminal.compiler.egraph import extract
    from luminal.compiler.rules import RULESETS, register_ruleset

    @function(cost=1)
    def test_backend_softmax_tail(axis: i64Like, x: Term) -> Term: ...

    @ruleset
    def lowering(k: i64, x: Term):
        yield rewrite(Term.normalize(k, x)).to(test_backend_softmax_tail(k, x))

    decoded = []

    def decode(decoder, node):  # noqa: ANN001 - the decoder protocol of extract.py
        decoded.append(node.op)
        return extract.TERM_DECODERS["Term.normalize"](decoder, node)

    register_ruleset("test-backend", lowering)
    extract.TERM_DECODERS["test_backend_softmax_tail"] = decode
    try:
        cx = lm.Graph()
        x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
        out = x.softmax(-1).retrieve()
        before = _outputs(cx, [out])
        cx.compile(EGraphCompiler(rulesets=("structure", "test-backend")))
        assert decoded == ["test_backend_softmax_tail"]
        _assert_same(before, _outputs(cx, [out]))
    finally:
        del extract.TERM_DECODERS["test_backend_softmax_tail"]
        del RULESETS["test-backend"]


def test_outputs_that_share_a_chain_keep_their_classes():
    """Regression: two outputs where one feeds the other once lost an output's class."""
    cx = lm.Graph()
    x = cx.tensor((1,)).set(np.array([0.25], np.float32))
    a = (x.abs() + 0.5).log2()
    b = (a.abs() + 0.5).log2()
    outs = [a.retrieve(), b.retrieve()]
    before = _outputs(cx, outs)
    cx.compile(EGraphCompiler())
    _assert_same(before, _outputs(cx, outs))


class _Tracked:
    """Remembers the state of each e-graph made (egglog 13's `EGraph._state`, which owns
    the native e-graph) and the generations collected; `promoted`: a young collection
    frees nothing, as when the e-graph's cycles were promoted to the oldest generation."""

    def __init__(self, monkeypatch, promoted: bool) -> None:
        import weakref

        from luminal.compiler.egraph import compiler

        self.states: list = []
        self.generations: list[int] = []
        original, collect = compiler.EGraph, compiler.gc.collect

        def make():
            egraph = original()
            self.states.append(weakref.ref(egraph._state))
            return egraph

        def counted(generation: int = 2) -> int:
            self.generations.append(generation)
            return 0 if promoted and generation < 2 else collect(generation)

        monkeypatch.setattr(compiler, "EGraph", make)
        monkeypatch.setattr(compiler.gc, "collect", counted)


@pytest.mark.parametrize("promoted", [False, True])
def test_every_egraph_is_freed_by_the_thread_that_made_it(rng, monkeypatch, promoted):
    """egglog e-graphs must be freed on the thread that made them: none may be left to a
    later collection, on whichever thread it runs (each `run` leaves the e-graph's state
    in a reference cycle). The full collection (tens of ms) only when a young one did not
    free them."""
    import gc

    tracked = _Tracked(monkeypatch, promoted)
    cx, _ = _mixed_graph(rng)
    gc.disable()  # only reference counts and the compiler's own collections free them
    try:
        cx.compile(EGraphCompiler())
        assert tracked.states and all(state() is None for state in tracked.states)
        per_egraph = [1, 2] if promoted else [1]
        assert tracked.generations == per_egraph * len(tracked.states)
    finally:
        gc.enable()

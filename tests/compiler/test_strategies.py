"""The random-graph strategy itself: graphs build, run on the reference runtime with
finite outputs at every size, are reproducible from their recipe, and the differential
helper accepts a compiler that changes nothing and rejects ones that change values."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given

import luminal as lm
from luminal import ops
from tests.compiler.strategies import (
    GraphCase,
    Recipe,
    Step,
    assert_compiler_preserves,
    build,
    random_graphs,
    recipes,
)


@given(random_graphs())
def test_random_graphs_run_with_finite_outputs(case: GraphCase):
    assert 1 <= len(case.inputs) <= 3
    assert 1 <= len(case.outputs) <= 3
    for tensor in case.inputs:
        assert tensor.dtype == lm.float32
    for sizes, variant in case.rounds():
        case.set_inputs(sizes, variant)
        for out in case.run():
            assert out.dtype == np.float32
            assert np.isfinite(out).all(), case.recipe


@given(recipes())
def test_identical_recipes_give_identical_graphs_and_outputs(recipe: Recipe):
    first, second = build(recipe), build(recipe)
    assert [n.op for n in first.graph.nodes.values()] == [n.op for n in second.graph.nodes.values()]
    for a, b in zip(first.run(), second.run(), strict=True):
        np.testing.assert_array_equal(a, b)


@given(random_graphs())
def test_a_compiler_that_changes_nothing_passes(case: GraphCase):
    assert_compiler_preserves(case, lambda graph: None)


def _unused_second_input() -> GraphCase:
    """x0 through a graph break; x1 is unused, so `build` adds it to the output."""
    return build(Recipe(input_shapes=((3,), (3,)), steps=(Step("graph_break"),)))


def test_unused_inputs_are_folded_into_the_output():
    case = _unused_second_input()
    (out,) = case.run()
    x0, x1 = (t.numpy() for t in case.inputs)
    np.testing.assert_allclose(out, x0 + x1)


def test_a_compiler_that_changes_values_is_caught():
    def add_becomes_mul(graph: lm.Graph) -> None:
        for node in list(graph.nodes.values()):
            if isinstance(node.op, ops.Add):
                graph.nodes[node.id] = dataclasses.replace(node, op=ops.Mul())

    with pytest.raises(AssertionError, match="after compiling"):
        assert_compiler_preserves(_unused_second_input(), add_becomes_mul)


def test_a_compiler_that_ignores_new_input_data_is_caught():
    class Stale:
        def execute(self, graph: lm.Graph) -> None:
            pass  # keeps the buffers of the last reference run

    def stale(graph: lm.Graph) -> None:
        graph.compiled = Stale()

    with pytest.raises(AssertionError, match="data variant 1"):
        assert_compiler_preserves(_unused_second_input(), stale)


def test_symbolic_recipe_checks_every_size():
    recipe = Recipe(
        input_shapes=(("n", 3),),
        steps=(Step("reduce"),),
        dim_sizes=(2, 5),
    )
    case = build(recipe)
    assert case.dim_sizes == {"n": (2, 5)}
    assert [sizes for sizes, _ in case.rounds()] == [{"n": 2}, {"n": 5}, {"n": 2}]
    for sizes, variant in case.rounds():
        case.set_inputs(sizes, variant)
        assert case.inputs[0].numpy().shape == (sizes["n"], 3)

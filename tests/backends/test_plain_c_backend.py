"""A new backend is a renderer plus a toolchain/runtime: a test-only backend that renders
the kernel IR as plain C (no OpenMP, no BLAS), registered for the test only, compiles
through the registry and computes what the reference runtime computes."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import luminal as lm
from luminal.backends import Capabilities
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.lowering import assemble, lower_kernels
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.compiler.egraph import EGraphCompiler
from luminal.graph import Graph
from luminal.render.c import CRenderer
from tests.compiler.strategies import GraphCase, assert_compiler_preserves, random_graphs


class PlainCRenderer(CRenderer):
    """Portable C: every loop kind a plain `for` (the base renderer's defaults)."""


RENDERER = PlainCRenderer()


def render(graph: Graph) -> CompiledGraph:
    """Every kernel from the IR, contractions as loops (no sgemm, which is not IR)."""
    return assemble(lower_kernels(graph, renderer=RENDERER, blas=False))


class PlainCCompiler:
    def compile(self, graph: Graph) -> CompiledGraph:
        graph.compile(lm.GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=BACKEND.rulesets))
        graph.compile(lm.GenericCompiler())
        compiled = BACKEND.render(graph)
        compiled.build()
        graph.compiled = compiled
        return compiled


class PlainCBackend:
    name = "plain_c"
    rulesets = ("algebra", "structure", "cpu")
    render = staticmethod(render)
    toolchain = toolchain
    runtime = CompiledGraph
    search_options: list = []

    def is_available(self) -> bool:
        return shutil.which(toolchain.CC) is not None

    def capabilities(self) -> Capabilities:
        return Capabilities((lm.float32, lm.int32), False, False, "none", (), True, True)

    def device_id(self) -> str:
        return "plain_c"

    def compiler(self, **options: Any) -> PlainCCompiler:
        return PlainCCompiler()


BACKEND = PlainCBackend()


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend is in the registry for these tests only."""
    monkeypatch.setitem(lm.backends.BACKENDS, "plain_c", __name__)


def _compile(cx: lm.Graph) -> CompiledGraph:
    compiled = cx.compile(lm.backends.compiler("plain_c"))
    for segment in compiled.segments:
        for kernel in segment.kernels:
            assert kernel.kernel is not None, kernel.name  # rendered from the IR
            assert "omp" not in kernel.source and "#pragma" not in kernel.source
    return compiled


def _check(cx: lm.Graph, outs: list[lm.GraphTensor], rtol: float = 1e-5) -> None:
    cx.execute()
    expected = [o.numpy() for o in outs]
    _compile(cx)
    cx.execute()
    for got, want in zip((o.numpy() for o in outs), expected, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6, equal_nan=True)


def test_the_registry_finds_the_backend() -> None:
    assert "plain_c" in lm.backends.available()
    assert isinstance(lm.backends.compiler("plain_c"), PlainCCompiler)


@settings(max_examples=8)
@given(random_graphs(max_steps=8))
def test_random_graphs_match_the_reference(case: GraphCase) -> None:
    assert_compiler_preserves(case, _compile)


def test_rows_matmul_and_symbolic_dims(rng: np.random.Generator) -> None:
    """Row kernels (softmax, layer norm), a matrix product as loops, a symbolic batch."""
    cx = lm.Graph()
    x = cx.tensor(("batch", 24)).set(rng.uniform(-2, 2, (5, 24)).astype(np.float32))
    w = cx.tensor((24, 40)).set(rng.uniform(-1, 1, (24, 40)).astype(np.float32))
    h = (x @ w).softmax(-1)
    outs = [h.retrieve(), (x.layer_norm(-1) * 2.0).retrieve(), x.max(0).retrieve()]
    _check(cx, outs, rtol=1e-4)


def test_gather_scatter_integers_and_half_precision(rng: np.random.Generator) -> None:
    from luminal.training.autograd import gradients

    cx = lm.Graph()
    table = cx.tensor((10, 6)).set(rng.uniform(-1, 1, (10, 6)).astype(np.float32))
    ids = cx.tensor((5,), dtype=lm.int32).set(np.array([3, 0, 9, 3, 3], np.int32))
    loss = (table.gather(ids) * 2.0).sum()
    (grad,) = gradients(cx, [table], loss)
    a = cx.tensor((4, 8), dtype=lm.int32).set(rng.integers(-50, 50, (4, 8)).astype(np.int32))
    h = (table.cast(lm.float16).exp() * 3.0).cast(lm.bfloat16).sum(-1)
    _check(cx, [grad.retrieve(), ((a * a + 7) % 5).retrieve(), h.retrieve()], rtol=1e-2)


def test_a_bad_index_raises_through_the_fault_record() -> None:
    cx = lm.Graph()
    table = cx.tensor((4, 3)).set(np.ones((4, 3), np.float32))
    ids = cx.tensor((2,), dtype=lm.int32).set(np.array([1, 7], np.int32))
    table.gather(ids).retrieve()
    _compile(cx)
    with pytest.raises(lm.ExecutionError, match="7"):
        cx.execute()

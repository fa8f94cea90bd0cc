"""The backend registry: one table of backends, each a `Backend` the pipeline can use by
name, and a compiler from a name or the compiler itself."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.compiler.egraph import EGraphCompiler


def _graph() -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (6, 5)).astype(np.float32), rng.uniform(-1, 1, (5, 3))
    cx = lm.Graph()
    out = (cx.tensor((6, 5)).set(a) @ cx.tensor((5, 3)).set(b.astype(np.float32))).relu()
    return cx, out.retrieve(), np.maximum(a @ b.astype(np.float32), 0)


def test_this_machine_runs_the_cpu_and_opencl_backends() -> None:
    assert lm.backends.available()[:2] == ["cpu", "opencl"]  # PoCL: scripts/setup.sh
    assert set(lm.backends.available()) <= set(lm.backends.BACKENDS)


def test_a_backend_name_gives_its_compiler_with_options() -> None:
    compiler = lm.backends.compiler("cpu", mode="fast", rtol=1e-2)
    assert isinstance(compiler, CPUCompiler) and compiler.rtol == 1e-2
    cx, out, expected = _graph()
    cx.compile(compiler)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_compiler_passes_through_and_anything_else_is_refused() -> None:
    compiler = CPUCompiler()
    assert lm.backends.compiler(compiler) is compiler
    with pytest.raises(lm.CompileError, match="unknown backend 'tpu'"):
        lm.backends.compiler("tpu")
    with pytest.raises(lm.CompileError, match="expected a backend name or a compiler"):
        lm.backends.compiler(42)
    with pytest.raises(lm.CompileError, match="options apply to a backend name"):
        lm.backends.compiler(compiler, mode="fast")


def test_the_backend_parts_run_a_graph() -> None:
    """rulesets -> e-graph, render -> the runtime's compiled graph, toolchain builds it:
    the same result as the reference."""
    backend = lm.backends.get("cpu")
    cx, out, expected = _graph()
    cx.compile(lm.GenericCompiler())
    cx.compile(EGraphCompiler(rulesets=backend.rulesets))
    compiled = backend.render(cx)
    assert isinstance(compiled, backend.runtime) and backend.runtime is CompiledGraph
    compiled.build()
    cx.compiled = compiled
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert backend.device_id().startswith("cpu/") and backend.search_options
    assert lm.float32 in backend.capabilities().dtypes


def _train_step(compiler: object) -> tuple[object, lm.GraphTensor]:
    from luminal.training import SGD, TrainStep

    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor((8, 4))
    w = cx.tensor((4, 1)).set(rng.uniform(-1, 1, (4, 1)).astype(np.float32))
    loss = (x @ w).square().mean()
    return TrainStep(loss, (x,), SGD([w], lr=0.1), compiler=compiler), w


def test_training_takes_a_backend_name() -> None:
    """TrainStep(compiler="cpu") compiles with the CPU backend and steps as the reference
    runtime does; an unknown name is refused before anything is built."""
    results = []
    batch = np.random.default_rng(1).uniform(-1, 1, (8, 4)).astype(np.float32)
    for compiler in ("cpu", None):
        step, w = _train_step(compiler)
        start = w.numpy().copy()
        for _ in range(3):
            step(batch)
        results.append(w.numpy().copy())
        assert not np.allclose(results[-1], start)  # the steps moved the weights
        assert (step.graph.compiled is not None) == (compiler is not None)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(lm.CompileError, match="unknown backend 'gpu'"):
        _train_step("gpu")

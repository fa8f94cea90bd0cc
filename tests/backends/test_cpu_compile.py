"""Compiling graphs: deterministic kernel sources, the on-disk cache across processes,
custom C kernels, LUMINAL_DEBUG output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import toolchain
from tests.conftest import uniform

MODEL = textwrap.dedent(
    """
    import numpy as np, luminal as lm
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor(("batch", 16)).set(rng.standard_normal((4, 16)).astype(np.float32))
    w = cx.tensor((16, 8)).set(rng.standard_normal((16, 8)).astype(np.float32))
    out = ((x @ w).relu().softmax(-1) * 2).retrieve()
    compiled = cx.compile(lm.CPUCompiler())
    cx.execute()
    """
)


def _kernel_sources(compiled) -> list[str]:  # noqa: ANN001
    return [k.source for s in compiled.segments for k in s.kernels] + [compiled.runner_source()]


def test_parallel_and_sequential_compiles_agree(tmp_path, monkeypatch, rng):
    results = []
    for workers in (None, 1):
        monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / f"cache-{workers}"))
        monkeypatch.setattr(toolchain, "_cpu_count", lambda w=workers: w or os.cpu_count() or 1)
        namespace: dict = {}
        exec(MODEL, namespace)  # noqa: S102 - our own snippet
        results.append((_kernel_sources(namespace["compiled"]), namespace["out"].numpy()))
    (sources_a, out_a), (sources_b, out_b) = results
    assert sources_a == sources_b
    np.testing.assert_array_equal(out_a, out_b)


def test_second_process_compiles_nothing(tmp_path):
    env = {**os.environ, "LUMINAL_CACHE_DIR": str(tmp_path)}
    probe = MODEL + (
        "\nfrom luminal.backends.cpu import toolchain\nprint(toolchain.stats().objects_compiled)"
    )
    counts = []
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        counts.append(int(result.stdout.strip().splitlines()[-1]))
    assert counts[0] > 0 and counts[1] == 0


CUMSUM = """
void scaled_cumsum(float* out, const float* x, const float* scale, const long long* numel) {
    float acc = 0.0f;
    for (long long i = 0; i < numel[1]; i++) { acc += x[i]; out[i] = acc * scale[0]; }
}
"""


def test_custom_kernel_runs_on_both_runtimes_and_with_symbolic_dims(rng):
    cx = lm.Graph()
    data = uniform(rng, (6,))
    x = cx.tensor(("n",)).set(data)
    scale = cx.tensor((1,)).set(np.array([2.0], np.float32))
    out = (lm.custom_kernel([x.exp(), scale], CUMSUM, ("n",)) + 1).retrieve()
    cx.execute()
    expected = np.cumsum(np.exp(data)) * 2 + 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    x.set(data[:3])
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.cumsum(np.exp(data[:3])) * 2 + 1, rtol=1e-5)


def test_custom_kernel_errors_are_clear():
    cx = lm.Graph()
    x = cx.tensor((3,))
    with pytest.raises(lm.GraphError, match="cannot find the C function"):
        lm.custom_kernel([x], "int not_a_kernel;", (3,))
    bad = lm.custom_kernel([x], "void broken(float* out) { syntax error }", (3,))
    bad.retrieve()
    x.set(np.zeros(3, np.float32))
    with pytest.raises(lm.CompileError, match="broken"):
        cx.execute()


def test_debug_level_one_prints_kernels_with_their_nodes(rng, monkeypatch, capsys):
    monkeypatch.setenv("LUMINAL_DEBUG", "1")
    cx = lm.Graph()
    x = cx.tensor((4, 8)).set(uniform(rng, (4, 8)))
    x.softmax(-1).retrieve()
    cx.compile(lm.CPUCompiler())
    printed = capsys.readouterr().out
    assert "// kernel lm_" in printed and "graph nodes" in printed and "exp2f" in printed

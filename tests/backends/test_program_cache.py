"""The lowered-program cache (`luminal/backends/cpu/program_cache.py`): a second process
loads the program, the weights stay the caller's, and any change of structure, options
or version (or a damaged entry) compiles again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import program_cache, toolchain

SCRIPT = """
import json, sys, numpy as np, luminal as lm
seed, rows = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)
x = rng.standard_normal((rows, 24)).astype(np.float32)
w = rng.standard_normal((24, 8)).astype(np.float32)
cx = lm.Graph()
y = (cx.tensor((rows, 24)).set(x) @ cx.tensor((24, 8)).set(w)).relu().softmax(-1).retrieve()
compiler = lm.CPUCompiler()
cx.compile(compiler)
cx.execute()
z = np.maximum(x @ w, 0)
z = np.exp(z - z.max(-1, keepdims=True))
error = float(np.abs(y.numpy() - z / z.sum(-1, keepdims=True)).max())
print(json.dumps({"hit": compiler.program_cache_hit, "error": error}))
"""


def _graph(seed: int = 0, rows: int = 6) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 24)).astype(np.float32)
    w = rng.standard_normal((24, 8)).astype(np.float32)
    cx = lm.Graph()
    y = (cx.tensor((rows, 24)).set(x) @ cx.tensor((24, 8)).set(w)).relu().retrieve()
    return cx, y, np.maximum(x @ w, 0)


def _compile(cx: lm.Graph, **options: object) -> bool:
    compiler = lm.CPUCompiler(**options)
    cx.compile(compiler)
    return compiler.program_cache_hit


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(program_cache.ENVIRONMENT_VARIABLE, "1")
    return tmp_path


def _run(cache: Path, seed: int, rows: int) -> dict:
    environment = {
        **os.environ,
        "LUMINAL_CACHE_DIR": str(cache),
        program_cache.ENVIRONMENT_VARIABLE: "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(seed), str(rows)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_program_and_reads_its_own_weights(cache: Path):
    first = _run(cache, seed=0, rows=5)
    second = _run(cache, seed=1, rows=5)  # other weights and inputs, same structure
    assert (first["hit"], second["hit"]) == (False, True)
    assert first["error"] < 1e-5 and second["error"] < 1e-5


def test_the_same_graph_hits_and_runs_with_new_data(cache: Path):
    cx, y, _ = _graph()
    assert not _compile(cx)
    cx, y, expected = _graph(seed=3)
    assert _compile(cx)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert cx.num_nodes > 0 and cx.compiled.version == cx.nodes.version


def test_a_loaded_program_reports_kernel_times_under_debug_level_two(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
):
    """LUMINAL_DEBUG=2 on a cache hit: the runner is built with its per-kernel timing
    (before, the level was set only after the library was built: no kernel lines)."""
    cx, _, _ = _graph()
    assert not _compile(cx)
    monkeypatch.setenv("LUMINAL_DEBUG", "2")
    cx, _, _ = _graph(seed=4)
    assert _compile(cx)
    capfd.readouterr()
    cx.execute()
    assert re.search(r"^\[luminal\] segment \d+ lm_\S+ [\d.]+ ms$", capfd.readouterr().err, re.M)


@pytest.mark.parametrize(
    "change",
    ["shape", "rtol", "version", "cache off"],
)
def test_a_change_of_shape_options_or_version_compiles_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, change: str
):
    cx, _, _ = _graph()
    assert not _compile(cx)
    options: dict[str, object] = {}
    rows = 6
    if change == "shape":
        rows = 7
    elif change == "rtol":
        options["rtol"] = 1e-2
    elif change == "version":
        monkeypatch.setattr(toolchain, "_luminal_version", lambda: "999.0")
    else:
        options["cache"] = False
    cx, y, expected = _graph(rows=rows)
    assert not _compile(cx, **options)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_damaged_entry_is_compiled_again_and_replaced(cache: Path, damage: str):
    cx, _, _ = _graph()
    assert not _compile(cx)
    (entry,) = (cache / program_cache.DIRECTORY).glob(f"*{program_cache.SUFFIX}")
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[-10] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray(program_cache.MAGIC + bytes(32) + b"not a pickle")
    entry.write_bytes(bytes(data))
    cx, y, expected = _graph(seed=1)
    assert not _compile(cx)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    cx, _, _ = _graph(seed=2)
    assert _compile(cx)  # the compile above rewrote the entry


def test_an_unverified_program_is_not_trusted_by_a_verifying_compile(cache: Path):
    cx, _, _ = _graph()
    assert not _compile(cx, verify=False)
    cx, _, _ = _graph()
    assert not _compile(cx, verify=True)
    cx, _, _ = _graph()
    assert _compile(cx, verify=True)


def test_graphs_with_python_functions_are_not_cached(cache: Path):
    def graph() -> lm.Graph:
        cx = lm.Graph()
        x = cx.tensor((4,)).set(np.arange(4, dtype=np.float32))
        (x.print("x") + 1.0).retrieve()  # a Python Function op
        return cx

    cx = graph()
    assert program_cache.structure(cx) is None
    assert not _compile(cx)
    assert not _compile(graph())


def test_a_program_from_an_e_graph_cut_by_its_time_limit_is_not_stored(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the e-graph can stop at its time limit before products become
    BLAS calls: that program is correct but slow, so it is used and not stored."""
    from luminal.compiler.egraph import compiler as egraph

    original = egraph.EGraphCompiler.__init__

    def hurried(self: egraph.EGraphCompiler, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        self.time_limit = 0.0

    monkeypatch.setattr(egraph, "MIN_ITERATIONS", 0)
    monkeypatch.setattr(egraph.EGraphCompiler, "__init__", hurried)
    cx, y, expected = _graph()
    assert not _compile(cx)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    monkeypatch.undo()
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(cache))
    monkeypatch.setenv(program_cache.ENVIRONMENT_VARIABLE, "1")
    cx, y, expected = _graph()
    assert not _compile(cx)  # nothing was stored by the hurried compile
    cx, y, expected = _graph()
    assert _compile(cx)  # a complete one is
    cx.execute()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)

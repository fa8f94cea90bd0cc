"""Two processes building the same kernels into one fresh cache at once (two pytest-xdist
workers, two notebooks): both compile and run correctly, and what they leave behind is
a cache whose every object and library matches its manifest, so a third process builds
nothing. Each builder waits at a start line so the two gcc runs of each key overlap,
and stalls after each publish so the other process renames its copy over the file
between the publish and the manifest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from luminal.backends.cpu import cache_files, toolchain

REPO = Path(__file__).resolve().parents[2]

BUILDER = """
import json, os, sys, time
import numpy as np
import luminal as lm
from luminal.backends.cpu import cache_files, toolchain

publish = cache_files.publish
def slow_publish(*args, **kwargs):
    publish(*args, **kwargs)
    time.sleep(0.05)  # a window between the rename and the manifest
cache_files.publish = slow_publish

rng = np.random.default_rng(5)
a = rng.uniform(-1, 1, (6, 16)).astype(np.float32)
w = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
start = sys.argv[1]
open(f"{start}.ready.{os.getpid()}", "w").close()
while not os.path.exists(start):
    time.sleep(0.005)
errors = []
for offset in range(3):
    cx = lm.Graph()
    x = cx.tensor((6, 16)).set(a)
    y = ((x + float(offset)).exp2() @ cx.tensor((16, 8)).set(w)).softmax(-1).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    logits = np.exp2(a + offset) @ w
    want = np.exp(logits - logits.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    errors.append(float(np.abs(y.numpy() - want).max()))
print(json.dumps({"error": max(errors), **toolchain.stats().__dict__}))
"""


def _start(cache: Path, start_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(start_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LUMINAL_CACHE_DIR": str(cache)},
        cwd=REPO,
    )


def _finish(process: subprocess.Popen[str]) -> dict[str, float]:
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, f"exit {process.returncode}:\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def test_two_processes_build_the_same_kernels_at_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    start_file = tmp_path / "go"
    builders = [_start(cache, start_file) for _ in range(2)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.ready.*"))) < 2:  # both imported luminal and wait
        assert time.monotonic() < deadline and all(b.poll() is None for b in builders)
        time.sleep(0.01)
    start_file.touch()
    results = [_finish(builder) for builder in builders]
    assert all(result["error"] < 1e-5 for result in results)
    assert all(result["libraries_linked"] + result["libraries_cached"] == 3 for result in results)
    kernels = cache / "cpu-kernels"
    artefacts = sorted([*kernels.glob("*.o"), *kernels.glob("*.so")])
    assert len(list(kernels.glob("*.so"))) == 3
    for path in artefacts:
        assert cache_files.verify(path, path.stem, toolchain.build_id()) is not None, path
    assert not [p for p in kernels.iterdir() if cache_files.TEMP_MARKER in p.name]
    third = _finish(_start(cache, start_file))
    assert third["error"] < 1e-5
    assert third["objects_compiled"] == 0 and third["libraries_linked"] == 0

"""The measured search for Metal off Apple hardware: every option of every kernel site
(tiles, work-group sizes, unrolling, float and half vector widths) renders into one
library that type-checks against the stand-in `metal_stdlib`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import luminal as lm
from tests.backends.cuda.test_search import mlp

SHIM = Path(__file__).parent / "shim"


def test_every_search_candidate_renders_and_type_checks(rng, tmp_path: Path) -> None:
    cx, *_ = mlp(rng)
    sites, source = lm.MetalCompiler().render_candidates(cx)
    options = {name for s in sites for name, _ in s.options}
    assert {"16x2", "local(128)", "vector(4)"} <= options
    assert "half4(float4(" in source and "(*((device const float4*)(" in source
    path = tmp_path / "candidates.metal"
    path.write_text(source)
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", f"-I{SHIM}", "-x", "c++"]
    done = subprocess.run([*command, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:3000]

"""Vector widths in Metal off Apple hardware: the candidates of a float16 elementwise
kernel, a column sum and an int32 loop product, widths included, render into one
library that type-checks against the stand-in `metal_stdlib`, with `float4` / `int4`
reads through `device const` pointers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import luminal as lm
from tests.backends.cuda.test_vector import _graph

SHIM = Path(__file__).parent / "shim"


def test_vector_candidates_render_and_type_check(rng, tmp_path: Path) -> None:
    sites, source = lm.MetalCompiler().render_candidates(_graph(rng))
    widths = [[name for name, _ in s.options if name.startswith("vector")] for s in sites]
    assert widths == [["vector(2)", "vector(4)"]] * 3
    assert "(*((device const float4*)(b1 + " in source
    assert "(*((device const int4*)(b2 + " in source
    assert "float4(*((device const half4*)(b1 + " in source
    path = tmp_path / "vectors.metal"
    path.write_text(source)
    command = ["g++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", f"-I{SHIM}", "-x", "c++"]
    done = subprocess.run([*command, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:3000]

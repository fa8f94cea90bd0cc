"""Vector widths (`transforms.lanes`, the search's `vector(w)`) in CUDA C without a GPU:
every candidate of an elementwise float16 kernel, a column sum and an int32 loop
product, widths included, builds through NVRTC and ptxas for sm_80 and sm_90, and the
module reads and writes `float4` / `int4` through cast pointers. (They run on PoCL in
tests/backends/opencl/test_vector.py.)"""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends.cuda.compiler import CUDACompiler


def _graph(rng: np.random.Generator) -> lm.Graph:
    cx = lm.Graph()
    h = cx.tensor((16, 64), dtype=lm.float16).set(rng.standard_normal((16, 64)).astype(np.float16))
    (h * 2.0 + 1.0).retrieve()
    cx.tensor((32, 48)).set(rng.standard_normal((32, 48)).astype(np.float32)).sum(0).retrieve()
    a = cx.tensor((16, 32), dtype=lm.int32).set(rng.integers(-9, 9, (16, 32)).astype(np.int32))
    b = cx.tensor((32, 24), dtype=lm.int32).set(rng.integers(-9, 9, (32, 24)).astype(np.int32))
    (a @ b).retrieve()
    return cx


def test_vector_candidates_build_for_sm80_and_sm90(rng) -> None:
    sites, module = CUDACompiler(arch=("sm_80", "sm_90")).build_candidates(_graph(rng))
    widths = [[name for name, _ in s.options if name.startswith("vector")] for s in sites]
    assert widths == [["vector(2)", "vector(4)"]] * 3
    assert "const float4 vl1_ = (*(const float4*)(b1 + " in module.source  # column sum
    assert "const int4 vl2_ = (*(const int4*)(b2 + " in module.source  # B's row
    assert "*(float4*)(b0 + " in module.source and "*(int2*)(b0 + " in module.source
    assert "__half2float((b1 + " in module.source  # float16 lanes, converted one by one
    for binary in module.binaries.values():
        assert binary.cubin[:4] == b"\x7fELF"  # ptxas assembled every candidate
        for name in module.kernels:
            assert f".entry {name}(".encode() in binary.ptx

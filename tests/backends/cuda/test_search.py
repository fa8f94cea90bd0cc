"""The measured search for CUDA without a GPU: the kernel sites and their options are
enumerated from the CUDA lowering (tensor-core products are no site), and the one module
holding every option of every site renders and builds for sm_80 and sm_90 with every
candidate an `.entry` of the PTX and its cubin assembled by ptxas; vector options
(float4 / half lanes) included. Timing them needs a GPU: test_gpu.py."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends import gpu_search
from luminal.backends.cuda.compiler import CUDACompiler
from luminal.backends.cuda.render import CUDARenderer
from luminal.kernel.gpu import lower_gpu

ARCHES = ("sm_80", "sm_90")


def mlp(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """A product, bias + ReLU, a row softmax, a float32 and a float16 elementwise kernel."""
    cx = lm.Graph()
    data = {
        "x": rng.standard_normal((64, 96)).astype(np.float32),
        "w": rng.standard_normal((96, 48)).astype(np.float32) / 10,
        "b": rng.standard_normal((48,)).astype(np.float32),
    }
    x, w, b = (cx.tensor(v.shape).set(v) for v in data.values())
    out = ((x @ w) + b).relu().softmax(-1).retrieve()
    (x * 3.0).exp().retrieve()
    h = cx.tensor((64, 40), dtype=lm.float16).set(np.ones((64, 40), np.float16))
    (h * 2.0 + 1.0).retrieve()
    logits = np.maximum(data["x"] @ data["w"] + data["b"], 0)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return cx, out, e / e.sum(-1, keepdims=True)


def test_every_search_candidate_builds_for_sm80_and_sm90(rng) -> None:
    cx, *_ = mlp(rng)
    compiler = CUDACompiler(arch=ARCHES)
    sites, module = compiler.build_candidates(cx)
    options = {s.name: [name for name, _ in s.options] for s in sites}
    assert options["matmul0"] == ["16", "4", "8", "32", "8x2", "16x2", "8x4", "16x4", "0"]
    knobs = [o for name, o in options.items() if name.startswith("kernel")]
    assert any("local(128)" in o for o in knobs)
    copy = cx.structure_copy()
    program = compiler.lower(copy)
    every = gpu_search.candidates(copy, program, compiler.lower_choices)
    names = sorted(set(CUDARenderer().program(every)[0]))
    assert names == sorted(module.kernels)
    assert "(*(const float4*)(" in module.source  # the vector options' wide accesses
    assert "make_float4(__half2float((" in module.source  # float16 lanes
    assert len(names) > len(set(CUDARenderer().program(program.launches)[0])) + 10
    for binary in module.binaries.values():
        assert binary.cubin[:4] == b"\x7fELF"  # ptxas assembled every candidate
        for name in names:
            assert f".entry {name}(".encode() in binary.ptx


def test_tensor_core_products_are_no_search_site(rng) -> None:
    cx = lm.Graph()
    a = cx.tensor((64, 32), dtype=lm.float16).set(np.ones((64, 32), np.float16))
    b = cx.tensor((32, 48), dtype=lm.float16).set(np.ones((32, 48), np.float16))
    (a @ b).retrieve()
    sites, module = CUDACompiler(arch=("sm_80",)).build_candidates(cx)
    assert not [s for s in sites if s.name.startswith("matmul")]
    assert any(name.startswith("lm_wmma") or "wmma" in module.source for name in module.kernels)
    lowered = cx.structure_copy()
    program = CUDACompiler().lower(lowered)
    plain = lower_gpu(lowered)  # without the tensor-core kernel it is a tiled product
    assert not gpu_search.sites(lowered, program)
    assert [s.name for s in gpu_search.sites(lowered, plain)] == ["matmul0"]

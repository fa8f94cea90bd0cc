"""A user's OpenCL kernel inside a graph (`lm.custom_kernel(..., backend="opencl")`):
launched with one work-item per output element and its element counts, checked against
its numpy reference, refused by the CPU backend with a clear error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import luminal as lm
from tests.conftest import uniform

SOURCE = """
__kernel void scaled_add(__global float* out, __global const float* a,
                         __global const float* b, const long n_out, const long n_a,
                         const long n_b) {
    const long i = get_global_id(0);
    if (i < n_out) out[i] = 2.0f * a[i] + b[i % n_b];
}
"""


@dataclass(frozen=True)
class ScaledAdd:
    """The kernel's numpy equivalent (the reference runtime's oracle)."""

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return 2 * a + b


def _graph(rng):
    cx = lm.Graph()
    a = cx.tensor(("n", 5)).set(uniform(rng, (70, 5)))
    b = cx.tensor((5,)).set(uniform(rng, (5,)))
    out = lm.custom_kernel([a.exp(), b], SOURCE, ("n", 5), reference=ScaledAdd(), backend="opencl")
    return cx, a, b, (out + 1).sum(-1).retrieve()


def test_an_opencl_kernel_runs_between_generated_ones(rng):
    cx, a, b, out = _graph(rng)
    cx.compile(lm.OpenCLCompiler())  # verified against the numpy reference
    for rows in (70, 3):
        data = uniform(rng, (rows, 5))
        a.set(data)
        cx.execute()
        expected = (2 * np.exp(data) + b.numpy() + 1).sum(-1)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_other_backends_and_missing_references_are_refused(rng):
    cx, *_ = _graph(rng)
    with pytest.raises(lm.CompileError, match="scaled_add.*is opencl source"):
        cx.compile(lm.CPUCompiler())
    other = lm.Graph()
    x = other.tensor((3,)).set(np.ones(3, np.float32))
    with pytest.raises(lm.GraphError, match="needs reference="):
        lm.custom_kernel([x], SOURCE, (3,), backend="opencl")
    with pytest.raises(lm.GraphError, match="backend 'vulkan' is not one of"):
        lm.custom_kernel([x], SOURCE, (3,), backend="vulkan", reference=ScaledAdd())

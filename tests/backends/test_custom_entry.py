"""custom_kernel's default function name: the entry point, not a helper defined before it
(a CUDA `__device__` helper, a Metal or OpenCL helper without `static`, a C helper that is
`static` behind another qualifier); a kernel written that way used to be named after its
helper, which the runtime then failed to launch."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from tests.backends.cuda.test_custom import ScaledAdd

HELPERS = {
    "cuda": """
__device__ void twice(float* x) { *x *= 2.0f; }
extern "C" __global__ void scaled_add(float* out, const float* a, long long n_out,
                                      long long n_a) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_out) { float v = a[i]; twice(&v); out[i] = v; }
}
""",
    "metal": """
inline void twice(thread float& x) { x *= 2.0f; }
kernel void scaled_add(device float* out [[buffer(0)]], device const float* a [[buffer(1)]],
                       constant long& n_out [[buffer(2)]], constant long& n_a [[buffer(3)]],
                       uint3 gid [[thread_position_in_grid]]) {
    float v = a[gid.x]; twice(v); out[gid.x] = v;
}
""",
    "opencl": """
void twice(float* x) { *x *= 2.0f; }
__kernel void scaled_add(__global float* out, __global const float* a, const long n_out,
                         const long n_a) {
    const long i = get_global_id(0);
    if (i < n_out) { float v = a[i]; twice(&v); out[i] = v; }
}
""",
    "c": """
static __inline__ void twice(float* x) { *x *= 2.0f; }
void scaled_add(float* out, const float* a, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++) { float v = a[i]; twice(&v); out[i] = v; }
}
""",
}


@pytest.mark.parametrize("backend", sorted(HELPERS))
def test_the_default_name_is_the_entry_point_not_a_helper(backend: str) -> None:
    cx = lm.Graph()
    a = cx.tensor((6,)).set(np.arange(6, dtype=np.float32))
    reference = None if backend == "c" else ScaledAdd()
    out = lm.custom_kernel([a], HELPERS[backend], (6,), reference=reference, backend=backend)
    assert out.node.op.function == "scaled_add"
    if backend == "c":  # the C runs: on the reference runtime and compiled
        out.retrieve()
        cx.execute()
        np.testing.assert_array_equal(out.numpy(), 2 * np.arange(6, dtype=np.float32))

"""CUDA C from the kernel IR: the GPU renderer (`OpenCLRenderer`, which writes what every
GPU dialect shares: work-item loops as ids, dims as kernel arguments, one program per
graph, the fault record) with CUDA's spellings.

- Kernels are `extern "C" __global__` (unmangled names for `cuModuleGetFunction`);
  buffers are `__restrict__` pointers, dims `long long` arguments.
- A work-item's global id on axis 0/1/2 is `blockIdx.x * blockDim.x + threadIdx.x`
  (y, z), its local id `threadIdx`; local memory is `__shared__`, a barrier
  `__syncthreads()`.
- float16 is stored as `half` (`cuda_fp16.h`) and computes in float, as everywhere;
  bfloat16 is stored as its bits (`unsigned short`), converted as on the CPU.
- Work-item loops on axes 1 and 2 are grid-stride loops: a grid holds at most 65535
  blocks on y and z, so the runtime caps the grid there and the kernel loops over the
  rest (`luminal.backends.launch_limits`); a block over 1024 threads is a CompileError.
- A custom kernel (`lm.custom_kernel(..., backend="cuda")`) is the user's source as it
  is, in the same module.
- An index out of range records {1, value, bound, launch} in the fault record with
  `atomicCAS`: the first fault of the run wins.
"""

from __future__ import annotations

from luminal.backends import launch_limits
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.gpu import Launch, custom_kernel_source
from luminal.render.c import CRenderer, dim_name

PRELUDE = r"""/* luminal CUDA helpers: numpy's semantics where C's differ or trap */
#include <cuda_fp16.h>
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
__device__ inline float lm_bf16_load(unsigned short v) {
    return __uint_as_float(((unsigned)v) << 16);
}
__device__ inline unsigned short lm_bf16_store(float f) {
    unsigned bits = __float_as_uint(f);
    if (f != f) return (unsigned short)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1); return (unsigned short)(bits >> 16);
}
__device__ inline float lm_f16_round(float x) { return __half2float(__float2half_rn(x)); }
__device__ inline float lm_fmod_floor(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
__device__ inline float lm_max_nan(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ inline int lm_max_int(int a, int b) { return b > a ? b : a; }
__device__ inline int lm_imod_floor(int a, int b) {
    int r = a % ((b == 0) | (b == -1) ? 1 : b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ inline int lm_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (-2147483647 - 1);
}
__device__ inline int lm_iadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ inline int lm_imul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
/* an index out of range: the first fault of the run records {1, index, rows, launch} */
__device__ inline void lm_fault_index(int* f, long long index, long long rows, int site) {
    if (atomicCAS(&f[0], 0, -1) == 0) {
        f[1] = (int)max(min(index, 2147483647LL), -2147483647LL - 1);
        f[2] = (int)max(min(rows, 2147483647LL), 0LL);
        f[3] = site;
        __threadfence();
        atomicExch(&f[0], 1);
    }
}
"""

AXES = "xyz"


class CUDARenderer(OpenCLRenderer):
    """Kernel IR to CUDA C (one `__global__` function per distinct launch kernel)."""

    storage_types = {
        DType.float32: "float",
        DType.float16: "half",
        DType.bfloat16: "unsigned short",
        DType.int32: "int",
        DType.bool: "unsigned char",
    }
    index_type = "long long"
    kernel_prefix = 'extern "C" __global__ void'
    buffer_qualifier = ""
    restrict = " __restrict__"
    math_functions = {"sqrt": "sqrtf", "sin": "sinf", "exp2": "exp2f", "log2": "log2f"}
    fault_param = "int* __restrict__ lm_fault, int lm_site"
    prelude = PRELUDE
    custom_language = "cuda"  # `lm.custom_kernel(..., backend="cuda")` sources run as they are

    def program(self, launches: list[Launch]) -> tuple[list[str], str]:
        """The kernel name of every launch and the module holding them: the helpers, each
        distinct kernel prelude once (the tensor-core device functions), the kernels."""
        names: list[str] = []
        sources: dict[str, str] = {}
        for launch in launches:
            launch_limits.check_block(launch)
            name, source = self.render_launch(launch)
            names.append(name)
            sources.setdefault(name, source)
        own = [x for x in launches if custom_kernel_source(x.kernel) is None]
        preludes = dict.fromkeys(launch.kernel.prelude for launch in own)
        kernels = "".join(sources[n] for n in sorted(sources))
        return names, self.prelude + "".join(preludes) + kernels

    # the C-style base's work-item loops, local memory and barriers, with CUDA's spellings
    # (OpenCLRenderer overrides them with OpenCL built-ins)
    local_qualifier = "__shared__"
    barrier_text = "__syncthreads();"
    stmt_localmemory = CRenderer.stmt_localmemory
    stmt_barrier = CRenderer.stmt_barrier

    def gpu_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        """Axis 0 and work-group loops: one work-item per index, guarded by the extent.
        Axes 1 and 2: a grid-stride loop, since a grid holds at most 65535 blocks there
        (the runtime caps the grid; every block runs the same iterations, so barriers
        inside stay uniform)."""
        axis = self._axes[loop.var]
        if loop.kind == "gpu_local" or axis == 0:
            return CRenderer.gpu_loop(self, loop, depth)
        a, name, extent = AXES[axis], loop.var, self.index(loop.extent)
        step = f"(long long)gridDim.{a} * blockDim.{a}"
        head = f"for ({self.index_type} {name} = {self.gpu_index(loop)}; {name} < {extent}; "
        return [
            *self.line(f"{head}{name} += {step}) {{", depth),
            *self.statements(loop.body, depth + 1),
            *self.line("}", depth),
        ]

    def gpu_index(self, loop: ir.Loop) -> str:
        """The work-item's id on its loop's axis: global for `gpu_global`, within the
        block for `gpu_local`."""
        a = AXES[self._axes[loop.var]]
        if loop.kind == "gpu_local":
            return f"(long long)threadIdx.{a}"
        return f"((long long)blockIdx.{a} * blockDim.{a} + threadIdx.{a})"

    def signature(self, kernel: ir.Kernel, name: str) -> str:
        params = [self.param(position, p) for position, p in enumerate(kernel.params)]
        params += [f"const {self.index_type} {dim_name(n)}" for n in kernel.dims]
        if kernel.reports_faults:
            params.append(self.fault_param)
        return f"{self.kernel_prefix} {name}({', '.join(params)})"

    # ---------------------------------------------------------------- half precision
    # plain loads and stores with converting casts, not OpenCL's vload_half/vstore_half
    value_load = CRenderer.value_load
    stmt_store = CRenderer.stmt_store
    half_load = "__half2float({})"
    half_store = "__float2half_rn({})"

    # ---------------------------------------------------------------- vector values
    # (`transforms.lanes`, a search knob): CUDA's float4/int4 through a cast pointer
    # instead of OpenCL's vload4/vstore4; float16 lanes one by one, converted
    def vector_load(self, pointer: str, vec: ir.Vec) -> str:
        if vec.dtype == DType.float16:
            lanes = ", ".join(f"__half2float(({pointer})[{k}])" for k in range(vec.width))
            return f"make_{self.vector_type(vec)}({lanes})"
        return f"(*(const {self.vector_type(vec)}*)({pointer}))"

    def vector_store(self, pointer: str, vec: ir.Vec, values: list[str]) -> str:
        if vec.dtype == DType.float16:
            lanes = " ".join(
                f"({pointer})[{k}] = __float2half_rn({v});" for k, v in enumerate(values)
            )
            return f"{{ {lanes} }}"
        vector = self.vector_type(vec)
        return f"*({vector}*)({pointer}) = make_{vector}({', '.join(values)});"

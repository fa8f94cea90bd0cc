"""Metal Shading Language from the kernel IR: the GPU renderer (`OpenCLRenderer`, which
writes what every GPU dialect shares: work-item loops as ids, dims as kernel arguments,
one library per graph, the fault record) with Metal's spellings.

- Kernels are `kernel void`; every argument has its binding, in order: buffers
  `device [const] T* bI [[buffer(I)]]`, then dims `constant long& dim_<name>`, then the
  fault record (`device atomic_int*`) and the launch's number; the work-item's position
  comes from `[[thread_position_in_grid]]` / `[[thread_position_in_threadgroup]]`.
- Threadgroup memory is declared at the top of the kernel (Metal allows it only at
  function scope), barriers are `threadgroup_barrier(mem_flags::mem_threadgroup)`.
- float16 is Metal's own `half` (computing in float, as everywhere); bfloat16 is stored
  as its bits (`ushort`) and converted as on the CPU.
- A custom kernel (`lm.custom_kernel(..., backend="metal")`) is the user's source as it
  is, in the same library; a threadgroup over 1024 threads is a CompileError.
- The library is compiled without fast math (`runtime.MetalDevice`), so NaN and the
  infinities keep their meaning.
"""

from __future__ import annotations

from luminal.backends import launch_limits
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.gpu import Launch
from luminal.render.c import CRenderer, dim_name

PRELUDE = r"""/* luminal Metal helpers: numpy's semantics where C's differ or trap */
#include <metal_stdlib>
using namespace metal;
inline float lm_bf16_load(ushort v) { return as_type<float>(((uint)v) << 16); }
inline ushort lm_bf16_store(float f) {
    uint bits = as_type<uint>(f);
    if (f != f) return (ushort)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1); return (ushort)(bits >> 16);
}
inline float lm_f16_round(float x) { return (float)(half)x; }
inline float lm_fmod_floor(float a, float b) {
    float r = fmod(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
inline float lm_max_nan(float a, float b) { return (b > a || b != b) ? b : a; }
inline int lm_max_int(int a, int b) { return b > a ? b : a; }
inline int lm_imod_floor(int a, int b) {
    int r = a % ((b == 0) | (b == -1) ? 1 : b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline int lm_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (-2147483647 - 1);
}
inline int lm_iadd(int a, int b) { return (int)((uint)a + (uint)b); }
inline int lm_imul(int a, int b) { return (int)((uint)a * (uint)b); }
inline int lm_clamp_int(long v, long low) {
    return (int)(v > 2147483647L ? 2147483647L : (v < low ? low : v));
}
/* an index out of range: the first fault of the run records {1, index, rows, launch} */
inline void lm_fault_index(device atomic_int* f, long index, long rows, int site) {
    int expected = 0;
    if (atomic_compare_exchange_weak_explicit(
            &f[0], &expected, -1, memory_order_relaxed, memory_order_relaxed)) {
        atomic_store_explicit(&f[1], lm_clamp_int(index, -2147483647L - 1), memory_order_relaxed);
        atomic_store_explicit(&f[2], lm_clamp_int(rows, 0L), memory_order_relaxed);
        atomic_store_explicit(&f[3], site, memory_order_relaxed);
        atomic_store_explicit(&f[0], 1, memory_order_relaxed);
    }
}
"""

AXES = "xyz"
POSITIONS = (
    "uint3 lm_gid [[thread_position_in_grid]]",
    "uint3 lm_lid [[thread_position_in_threadgroup]]",
)


class MetalRenderer(OpenCLRenderer):
    """Kernel IR to Metal Shading Language (one `kernel` per distinct launch kernel)."""

    storage_types = {
        DType.float32: "float",
        DType.float16: "half",
        DType.bfloat16: "ushort",
        DType.int32: "int",
        DType.bool: "uchar",
    }
    index_type = "long"
    kernel_prefix = "kernel void"
    buffer_qualifier = "device "
    restrict = ""
    math_functions = {"sqrt": "sqrt", "sin": "sin", "exp2": "exp2", "log2": "log2"}
    prelude = PRELUDE
    custom_language = "metal"  # `lm.custom_kernel(..., backend="metal")` sources run as they are

    def __init__(self) -> None:
        super().__init__()
        self._locals: list[ir.LocalMemory] = []

    def program(self, launches: list[Launch]) -> tuple[list[str], str]:
        """The library, once every launch's threadgroup is one a GPU runs (<= 1024)."""
        for launch in launches:
            launch_limits.check_block(launch, "Metal")
        return super().program(launches)

    def signature(self, kernel: ir.Kernel, name: str) -> str:
        params = [self.param(position, p) for position, p in enumerate(kernel.params)]
        for dim in kernel.dims:
            params.append(f"constant long& {dim_name(dim)} [[buffer({len(params)})]]")
        if kernel.reports_faults:
            params.append(f"device atomic_int* lm_fault [[buffer({len(params)})]]")
            params.append(f"constant int& lm_site [[buffer({len(params)})]]")
        params += POSITIONS
        return f"{self.kernel_prefix} {name}({', '.join(params)})"

    def param(self, position: int, param: ir.Param) -> str:
        const = "" if param.output else "const "
        storage = self.storage_types[param.dtype]
        return f"device {const}{storage}* b{position} [[buffer({position})]]"

    def render(self, kernel: ir.Kernel) -> tuple[str, str]:
        """Threadgroup arrays hoisted to the top of the kernel (function scope)."""
        self._locals = list(_local_memory(kernel.body))
        return super().render(kernel)

    def dim_locals(self, kernel: ir.Kernel) -> str:
        return "".join(
            f"    threadgroup {self.storage_types[m.dtype]} {m.name}[{self.index(m.size)}];\n"
            for m in self._locals
        )

    # the C-style base's work-item loops and barriers, with Metal's spellings
    # (OpenCLRenderer overrides them with OpenCL built-ins)
    barrier_text = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    gpu_loop = CRenderer.gpu_loop
    stmt_barrier = CRenderer.stmt_barrier

    def gpu_index(self, loop: ir.Loop) -> str:
        position = "lm_lid" if loop.kind == "gpu_local" else "lm_gid"
        return f"(long){position}.{AXES[self._axes[loop.var]]}"

    def stmt_localmemory(self, stmt: ir.LocalMemory, depth: int) -> list[str]:
        return self.line(f"/* threadgroup {stmt.name}: declared at the top */", depth)

    # ---------------------------------------------------------------- half precision
    # plain loads and stores with converting casts, not OpenCL's vload_half/vstore_half
    value_load = CRenderer.value_load
    stmt_store = CRenderer.stmt_store
    half_store = "(half)({})"

    # ---------------------------------------------------------------- vector values
    # (`transforms.lanes`, a search knob): Metal's float4/int4/half4 through a cast
    # pointer instead of OpenCL's vload4/vstore4; float16 converts as a whole vector
    def vector_load(self, pointer: str, vec: ir.Vec) -> str:
        stored = f"{self.storage_types[vec.dtype]}{vec.width}"
        load = f"(*((device const {stored}*)({pointer})))"
        return f"{self.vector_type(vec)}{load}" if vec.dtype == DType.float16 else load

    def vector_store(self, pointer: str, vec: ir.Vec, values: list[str]) -> str:
        stored = f"{self.storage_types[vec.dtype]}{vec.width}"
        value = f"{self.vector_type(vec)}({', '.join(values)})"
        if vec.dtype == DType.float16:
            value = f"{stored}({value})"
        return f"*((device {stored}*)({pointer})) = {value};"


def _local_memory(body: tuple[ir.Stmt, ...]) -> list[ir.LocalMemory]:
    found: list[ir.LocalMemory] = []
    for stmt in body:
        if isinstance(stmt, ir.LocalMemory):
            found.append(stmt)
        for field in ("body", "then", "otherwise"):
            children = getattr(stmt, field, None)
            if isinstance(children, tuple):
                found += _local_memory(children)
    return found

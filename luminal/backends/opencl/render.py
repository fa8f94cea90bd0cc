"""OpenCL C from the kernel IR: the C-style renderer (`luminal.render.c.CRenderer`) with
OpenCL's spellings.

- Buffers are `__global`; dims are `long` kernel arguments (`dim_<name>`), not an array.
- `gpu_global` / `gpu_local` loops read `get_global_id` / `get_local_id` on their axis
  (`luminal.kernel.gpu`: the innermost is axis 0) and guard the extent.
- float16 is stored as `half` and read and written with `vload_half` / `vstore_half_rte`,
  which need no extension, and computes in float (as on the CPU); bfloat16 is `ushort`
  with bit conversions.
- An index out of range (gather, scatter) records {1, value, bound, launch} in the run's
  fault record with 32-bit atomics: the first fault wins, the kernel reads row 0 or skips.
"""

from __future__ import annotations

from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.kernel import ir
from luminal.kernel.gpu import Launch, custom_kernel_source
from luminal.render.c import CRenderer, dim_name

PRELUDE = r"""/* luminal OpenCL helpers: numpy's semantics where C's differ or trap */
float lm_bf16_load(ushort v) { return as_float(((uint)v) << 16); }
ushort lm_bf16_store(float f) {
    uint bits = as_uint(f);
    if (f != f) return (ushort)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1); return (ushort)(bits >> 16);
}
float lm_f16_round(float x) {
    ushort h; vstore_half_rte(x, 0, (half*)&h); return vload_half(0, (const half*)&h);
}
float lm_fmod_floor(float a, float b) {
    float r = fmod(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
float lm_max_nan(float a, float b) { return (b > a || b != b) ? b : a; }
int lm_max_int(int a, int b) { return b > a ? b : a; }
int lm_imod_floor(int a, int b) {
    int r = a % (((b == 0) | (b == -1)) ? 1 : b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int lm_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (-2147483647 - 1);
}
int lm_iadd(int a, int b) { return (int)((uint)a + (uint)b); }
int lm_imul(int a, int b) { return (int)((uint)a * (uint)b); }
/* an index out of range: the first fault of the run records {1, index, rows, launch} */
void lm_fault_index(__global int* f, long index, long rows, int site) {
    if (atomic_cmpxchg(&f[0], 0, -1) == 0) {
        f[1] = (int)clamp(index, (long)(-2147483647 - 1), (long)2147483647);
        f[2] = (int)clamp(rows, (long)0, (long)2147483647);
        f[3] = site;
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        atomic_xchg(&f[0], 1);
    }
}
"""

ID_FUNCTIONS = {"gpu_global": "get_global_id", "gpu_local": "get_local_id"}


class OpenCLRenderer(CRenderer):
    """Kernel IR to OpenCL C (one `__kernel` per launch; helpers once per program)."""

    storage_types = {
        DType.float32: "float",
        DType.float16: "half",
        DType.bfloat16: "ushort",
        DType.int32: "int",
        DType.bool: "uchar",
    }
    index_type = "long"
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    math_functions = {"sqrt": "sqrt", "sin": "sin", "exp2": "exp2", "log2": "log2"}
    fault_param = "__global int* restrict lm_fault, int lm_site"
    prelude = PRELUDE

    def __init__(self) -> None:
        self._axes: dict[str, int] = {}

    # ------------------------------------------------------------------ programs
    custom_language = "opencl"  # the custom kernels this dialect runs as they are

    def render_launch(self, launch: Launch) -> tuple[str, str]:
        """(kernel name, source) of one launch; its work-item loops are numbered by axis
        (see `_axes`). A custom kernel is the user's source, unchanged."""
        custom = custom_kernel_source(launch.kernel)
        if custom is not None:
            language, function, source = custom
            if language != self.custom_language:
                raise CompileError(
                    f"custom kernel '{function}' is {language} source; "
                    f"{type(self).__name__} runs {self.custom_language} kernels"
                )
            return function, f"\n/* custom kernel {function} */\n{source}\n"
        self._axes = _axes(launch.kernel.body)
        return self.render(launch.kernel)

    def program(self, launches: list[Launch]) -> tuple[list[str], str]:
        """The kernel name of every launch and the program holding them all (each distinct
        kernel once, after the helpers)."""
        names: list[str] = []
        sources: dict[str, str] = {}
        for launch in launches:
            name, source = self.render_launch(launch)
            names.append(name)
            sources.setdefault(name, source)
        return names, self.prelude + "".join(sources[n] for n in sorted(sources))

    # ------------------------------------------------------------------ kernel
    def helpers(self, kernel: ir.Kernel) -> str:
        return ""  # once per program (`prelude`)

    def signature(self, kernel: ir.Kernel, name: str) -> str:
        params = [self.param(position, p) for position, p in enumerate(kernel.params)]
        params += [f"const long {dim_name(n)}" for n in kernel.dims]
        if kernel.reports_faults:
            params.append(self.fault_param)
        return f"{self.kernel_prefix} {name}({', '.join(params)})"

    def dim_locals(self, kernel: ir.Kernel) -> str:
        return ""  # dims are arguments

    def gpu_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        axis = self._axes[loop.var]
        head = f"const long {loop.var} = (long){ID_FUNCTIONS[loop.kind]}({axis});"
        guard = f"if ({loop.var} < {self.index(loop.extent)}) {{"
        return [
            *self.line(head, depth),
            *self.line(guard, depth),
            *self.statements(loop.body, depth + 1),
            *self.line("}", depth),
        ]

    def stmt_localmemory(self, stmt: ir.LocalMemory, depth: int) -> list[str]:
        size = stmt.size.as_int()
        return self.line(f"__local {self.compute_types[stmt.dtype]} {stmt.name}[{size}];", depth)

    def stmt_barrier(self, stmt: ir.Barrier, depth: int) -> list[str]:
        return self.line("barrier(CLK_LOCAL_MEM_FENCE);", depth)

    def stmt_checkindex(self, stmt: ir.CheckIndex, depth: int) -> list[str]:
        bound = self.index(stmt.bound)
        then = f"{stmt.name} = 0;" if stmt.action == "clamp" else "continue;"
        return self.line(
            f"if ({stmt.name} < 0 || {stmt.name} >= {bound}) "
            f"{{ lm_fault_index(lm_fault, {stmt.name}, {bound}, lm_site); {then} }}",
            depth,
        )

    def value_indexvalue(self, v: ir.IndexValue) -> str:
        if v.dtype == ir.INDEX:  # a work-item index decoded from a merged axis
            return f"({self.index_type})({self.index(v.expr)})"
        return super().value_indexvalue(v)

    # ------------------------------------------------------------------ half precision
    def value_load(self, load: ir.Load) -> str:
        if load.dtype == DType.float16 and isinstance(load.param, int):
            return f"vload_half({self.index(load.index)}, b{load.param})"
        return super().value_load(load)

    def stmt_store(self, stmt: ir.Store, depth: int) -> list[str]:
        if stmt.dtype == DType.float16 and isinstance(stmt.param, int):
            value, index = self.value(stmt.value), self.index(stmt.index)
            return self.line(f"vstore_half_rte({value}, {index}, b{stmt.param});", depth)
        return super().stmt_store(stmt, depth)

    def value_cast(self, cast: ir.Cast) -> str:
        if cast.target == DType.float16 and cast.source.is_float:
            return f"lm_f16_round({self.value(cast.value)})"
        return super().value_cast(cast)


def _axes(body: tuple[ir.Stmt, ...]) -> dict[str, int]:
    """Each gpu_global / gpu_local loop's axis: work-items of a work-group (gpu_local)
    take the first axes, innermost first; gpu_global loops the next ones, innermost
    first (with no gpu_local loop, from axis 0)."""
    local = _chain(body, "gpu_local")
    axes = {name: depth for depth, name in enumerate(reversed(local))}
    for depth, name in enumerate(reversed(_chain(body, "gpu_global"))):
        axes[name] = len(local) + depth
    return axes


def _chain(body: tuple[ir.Stmt, ...], kind: str) -> list[str]:
    """Names of the loops of `kind` met descending from `body` (outermost first)."""
    for stmt in body:
        if isinstance(stmt, ir.Loop):
            inner = _chain(stmt.body, kind)
            if stmt.kind == kind:
                return [stmt.var, *inner]
            if inner:
                return inner
        for field in ("then", "otherwise", "body"):
            children = getattr(stmt, field, None)
            if isinstance(children, tuple) and not isinstance(stmt, ir.Loop):
                inner = _chain(children, kind)
                if inner:
                    return inner
    return []

"""OpenCL C from the kernel IR: the C-style renderer (`luminal.render.c.CRenderer`) with
OpenCL's spellings.

- Buffers are `__global`; dims are `long` kernel arguments (`dim_<name>`), not an array.
- `gpu_global` / `gpu_local` loops read `get_global_id` / `get_local_id` on their axis
  (`luminal.kernel.gpu`: the innermost is axis 0) and guard the extent.
- float16 is stored as `half` and read and written with `vload_half` / `vstore_half_rte`,
  which need no extension, and computes in float (as on the CPU); bfloat16 is `ushort`
  with bit conversions. With `half_arithmetic` (devices reporting `cl_khr_fp16`), a
  kernel with no reduction computes its float16 values in `half` (rounded to half
  after every op, which is what the reference runtime computes); reductions and matrix
  products keep float accumulators.
- Vector values (`ir.VectorLoad`, `ir.VectorStore`: the `lanes` transform) are
  `vload4` / `vstore4` (`vload_half4` / `vstore_half4_rte` for float16) into `float4`.
- An index out of range (gather, scatter) records {1, value, bound, launch} in the run's
  fault record with 32-bit atomics: the first fault wins, the kernel reads row 0 or skips.
"""

from __future__ import annotations

from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.kernel import ir
from luminal.kernel.gpu import Launch, custom_kernel_source
from luminal.kernel.transforms import walk
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
FP16_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
LANE_NAMES = "xyzw"


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

    def __init__(self, half_arithmetic: bool = False) -> None:
        self._axes: dict[str, int] = {}
        self.half_arithmetic = half_arithmetic
        self._half = False  # the kernel being rendered computes float16 in half

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
        pragma = FP16_PRAGMA if self.half_arithmetic else ""
        return names, pragma + self.prelude + "".join(sources[n] for n in sorted(sources))

    def render(self, kernel: ir.Kernel) -> tuple[str, str]:
        self._half = self.half_arithmetic and half_kernel(kernel)
        try:
            return super().render(kernel)
        finally:
            self._half = False

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
    def type_name(self, dtype: ir.Type) -> str:
        if self._half and dtype == DType.float16:
            return "half"
        return super().type_name(dtype)

    def value_const(self, c: ir.Const) -> str:
        if self._half and c.dtype == DType.float16:
            return f"((half){super().value_const(c)})"
        return super().value_const(c)

    def value_alu(self, alu: ir.Alu) -> str:
        if self._half and alu.dtype == DType.float16 and alu.op == "recip":
            return f"((half)1.0f / {self.value(alu.args[0])})"
        return super().value_alu(alu)

    def value_load(self, load: ir.Load) -> str:
        if load.dtype == DType.float16 and isinstance(load.param, int) and not self._half:
            return f"vload_half({self.index(load.index)}, b{load.param})"
        if load.dtype == DType.float16:  # half arithmetic, or local memory (compute type)
            return f"{self.buffer(load.param)}[{self.index(load.index)}]"
        return super().value_load(load)

    def stmt_store(self, stmt: ir.Store, depth: int) -> list[str]:
        if stmt.dtype != DType.float16:
            return super().stmt_store(stmt, depth)
        value, index = self.value(stmt.value), self.index(stmt.index)
        if isinstance(stmt.param, int) and not self._half:
            return self.line(f"vstore_half_rte({value}, {index}, b{stmt.param});", depth)
        cast = "(half)" if self._half else ""
        return self.line(f"{self.buffer(stmt.param)}[{index}] = {cast}({value});", depth)

    def value_cast(self, cast: ir.Cast) -> str:
        if cast.target == DType.float16 and self._half:
            return f"((half)({self.value(cast.value)}))"
        if cast.target == DType.float16 and cast.source.is_float:
            return f"lm_f16_round({self.value(cast.value)})"
        return super().value_cast(cast)

    # ------------------------------------------------------------------ vectors
    def vector_type(self, vec: ir.Vec) -> str:
        return f"{self.type_name(vec.dtype)}{vec.width}"

    def value_lane(self, lane: ir.Lane) -> str:
        return f"{self.value(lane.vector)}.{LANE_NAMES[lane.lane]}"

    def value_vectorload(self, load: ir.VectorLoad) -> str:
        pointer = f"{self.buffer(load.param)} + ({self.index(load.index)})"
        return self.vector_load(pointer, ir.Vec(load.dtype, load.width))

    def stmt_vectorstore(self, stmt: ir.VectorStore, depth: int) -> list[str]:
        pointer = f"{self.buffer(stmt.param)} + ({self.index(stmt.index)})"
        values = [self.value(v) for v in stmt.values]
        text = self.vector_store(pointer, ir.Vec(stmt.dtype, len(values)), values)
        return self.line(text, depth)

    def vector_load(self, pointer: str, vec: ir.Vec) -> str:
        """A wide read of `vec.width` elements at `pointer` (aligned), as `vector_type`."""
        half = vec.dtype == DType.float16 and not self._half
        return f"vload{'_half' if half else ''}{vec.width}(0, {pointer})"

    def vector_store(self, pointer: str, vec: ir.Vec, values: list[str]) -> str:
        """A wide write of the lanes' `values` at `pointer` (aligned), one statement."""
        vector = f"({self.vector_type(vec)})({', '.join(values)})"
        if vec.dtype == DType.float16 and not self._half:
            return f"vstore_half{vec.width}_rte({vector}, 0, {pointer});"
        return f"vstore{vec.width}({vector}, 0, {pointer});"


def half_kernel(kernel: ir.Kernel) -> bool:
    """Whether `kernel` may compute its float16 values in half: it has some, and no
    reduction, accumulator or local memory (sums and products accumulate in float)."""
    nodes = list(walk(kernel.body))
    if any(isinstance(x, ir.Accumulate | ir.Reduction | ir.LocalMemory | ir.Call) for x in nodes):
        return False
    return any(getattr(x, "dtype", None) == DType.float16 for x in nodes)


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

"""The C-style renderer: kernel IR (`luminal.kernel.ir`) to C source text.

`CRenderer` writes portable C99 (no threads, no pragmas): every loop kind becomes a
plain `for`. Dialects subclass it and override the class attributes and hooks below:
type names, buffer qualifiers, the kernel prefix, math functions, how a parallel or
reduce loop is written, GPU index spellings, barriers and local memory. The CPU
backend's OpenMP renderer is `luminal.backends.cpu.codegen.CpuRenderer`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable

from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.kernel import ir
from luminal.kernel.cse import share_common
from luminal.kernel.indexing import is_loop_index, loop_name
from luminal.shape.expr import Expr, var

# helpers every C kernel may call (numpy's semantics where C's differ or trap)
PRELUDE = """#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lm_bf16_load(unsigned short v) {
    uint32_t bits = ((uint32_t)v) << 16; float f; memcpy(&f, &bits, 4); return f;
}
static inline unsigned short lm_bf16_store(float f) {
    uint32_t bits; memcpy(&bits, &f, 4);
    if (f != f) return (unsigned short)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1); return (unsigned short)(bits >> 16);
}
static inline float lm_fmod_floor(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
/* max propagating NaN, as two selects (one `||` of the two tests keeps gcc from
   vectorising: a 3x3 max pool ran 18x slower) */
static inline float lm_max_nan(float a, float b) {
    const float m = b > a ? b : a;
    return b != b ? b : m;
}
static inline int lm_max_int(int a, int b) { return b > a ? b : a; }
/* integer semantics are numpy's and never trap: x % 0 == 0 and INT_MIN % -1 == 0 (C's %
   raises SIGFPE for both); a divisor of 0 or -1 is replaced by 1, whose remainder is 0 too */
static inline int lm_imod_floor(int a, int b) {
    int r = a % ((b == 0) | (b == -1) ? 1 : b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
/* float -> int32 truncates; NaN, infinities and values outside int32 give INT_MIN (what
   numpy, PyTorch and the x86 instruction give; a plain C cast is undefined there) */
static inline int lm_float_to_int(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (int)x : (-2147483647 - 1);
}
/* int32 + and * wrap around as numpy's do (signed overflow is undefined in C) */
static inline int lm_iadd(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
static inline int lm_imul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
/* a failed malloc: the run's fault record gets {ALLOC_FAULT, bytes asked for} and the
   kernel returns without computing (called outside parallel regions) */
static inline void lm_fault_alloc(long long* f, long long bytes) {
    f[1] = bytes; f[2] = 0; f[0] = 2;
}
"""

# the fault code of a failed allocation in generated C (`lm_fault_alloc`)
ALLOC_FAULT = 2

# C: record an index out of range in the run's fault record {code, value, bound}; threads
# racing here store whole values, and any offending index is a true report
FAULT_INDEX = """static inline void lm_fault_index(long long* f, long long index, long long rows) {
    __atomic_store_n(&f[1], index, __ATOMIC_RELAXED);
    __atomic_store_n(&f[2], rows, __ATOMIC_RELAXED);
    __atomic_store_n(&f[0], 1, __ATOMIC_RELAXED);
}
"""

INT_MIN = -(2**31)
INDENT = "    "


def float_literal(value: float) -> str:
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"{float(value)!r}f"


class CRenderer:
    """Kernel IR to C. Class attributes name the dialect's spellings; methods render one
    IR node each and are the hooks a dialect overrides."""

    storage_types = {
        DType.float32: "float",
        DType.float16: "_Float16",
        DType.bfloat16: "unsigned short",
        DType.int32: "int",
        DType.bool: "unsigned char",
    }
    # how a float16 element is read into float and written back (format strings)
    half_load = "((float){})"
    half_store = "(_Float16)({})"
    compute_types = {
        DType.float32: "float",
        DType.float16: "float",
        DType.bfloat16: "float",
        DType.int32: "int",
        DType.bool: "int",
    }
    index_type = "long long"
    kernel_prefix = "void"  # OpenCL: "__kernel void"; CUDA: 'extern "C" __global__ void'
    buffer_qualifier = ""  # OpenCL: "__global "; Metal: "device "
    restrict = " restrict"
    math_functions = {"sqrt": "sqrtf", "sin": "sinf", "exp2": "exp2f", "log2": "log2f"}
    fault_param = "long long* restrict lm_fault"
    prelude = PRELUDE
    # GPU dialects: the barrier statement and the local-memory qualifier (None: none)
    barrier_text: str | None = None  # OpenCL: "barrier(CLK_LOCAL_MEM_FENCE);"
    local_qualifier: str | None = None  # OpenCL: "__local"; CUDA: "__shared__"

    # ------------------------------------------------------------------ kernel
    def render(self, kernel: ir.Kernel) -> tuple[str, str]:
        """(symbol name, source) of `kernel`: the name is `lm_<label>_<hash of source>`,
        so identical kernels share one compiled object. Values a statement reads more
        than once are computed once into `const` locals first (`kernel/cse.py`)."""
        kernel = _aligned_bases(share_common(kernel))
        placeholder = "KERNEL_NAME"
        body = "\n".join(self.statements(kernel.body, 1))
        source = (
            f"{self.helpers(kernel)}\n/* {kernel.label} */\n"
            f"{self.signature(kernel, placeholder)} {{\n{self.dim_locals(kernel)}{body}\n}}\n"
        )
        name = f"lm_{kernel.label}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
        return name, source.replace(placeholder, name)

    def helpers(self, kernel: ir.Kernel) -> str:
        """Source a kernel needs before its function: malloc's declaration when it
        allocates scratch (gcc otherwise warns of an implicit declaration, and compilers
        that make that an error refuse the unit), the fault helper, its own prelude."""
        heap = "#include <stdlib.h>\n" if _contains(kernel.body, ir.Alloc) else ""
        faults = FAULT_INDEX if _contains(kernel.body, ir.CheckIndex) else ""
        return heap + faults + kernel.prelude

    def signature(self, kernel: ir.Kernel, name: str) -> str:
        params = [self.param(position, p) for position, p in enumerate(kernel.params)]
        params.append(f"const {self.index_type}*{self.restrict} d")
        if kernel.reports_faults:
            params.append(self.fault_param)
        return f"{self.attributes(kernel)}{self.kernel_prefix} {name}({', '.join(params)})"

    def attributes(self, kernel: ir.Kernel) -> str:
        return ""

    def param(self, position: int, param: ir.Param) -> str:
        const = "" if param.output else "const "
        storage = self.storage_types[param.dtype]
        return f"{self.buffer_qualifier}{const}{storage}*{self.restrict} b{position}"

    def dim_locals(self, kernel: ir.Kernel) -> str:
        return "".join(
            f"{INDENT}const {self.index_type} {dim_name(n)} = d[{i}]; (void){dim_name(n)};\n"
            for i, n in enumerate(kernel.dims)
        )

    # ------------------------------------------------------------------ statements
    def statements(self, body: tuple[ir.Stmt, ...], depth: int) -> list[str]:
        lines: list[str] = []
        for stmt in body:
            lines.extend(self.statement(stmt, depth))
        return lines

    def statement(self, stmt: ir.Stmt, depth: int) -> list[str]:
        render = getattr(self, "stmt_" + type(stmt).__name__.lower(), None)
        if render is None:
            raise CompileError(f"{type(self).__name__} cannot render {type(stmt).__name__}")
        return render(stmt, depth)

    def line(self, text: str, depth: int) -> list[str]:
        return [INDENT * depth + text]

    def stmt_declare(self, stmt: ir.Declare, depth: int) -> list[str]:
        const = "const " if stmt.const else ""
        text = f"{const}{self.type_name(stmt.dtype)} {stmt.name} = {self.value(stmt.value)};"
        return self.line(text, depth)

    def stmt_assign(self, stmt: ir.Assign, depth: int) -> list[str]:
        return self.line(f"{stmt.name} = {self.value(stmt.value)};", depth)

    def stmt_store(self, stmt: ir.Store, depth: int) -> list[str]:
        target = f"{self.buffer(stmt.param)}[{self.index(stmt.index)}]"
        value = self.to_storage(self.value(stmt.value), stmt.dtype)
        return self.line(f"{target} = {value};", depth)

    def stmt_accumulate(self, stmt: ir.Accumulate, depth: int) -> list[str]:
        """An update outside a reduce loop (an unrolled short reduction)."""
        name, v = stmt.name, self.value(stmt.value)
        dtype = ir.type_of(stmt.value)
        floating = dtype != ir.INDEX and dtype.is_float
        if stmt.op == "add":
            text = f"{name} += {v};" if floating else f"{name} = lm_iadd({name}, {v});"
        elif floating or not isinstance(stmt.value, ir.Var):  # not a local: read it once
            text = f"{name} = {'lm_max_nan' if floating else 'lm_max_int'}({name}, {v});"
        else:
            text = f"{name} = {v} > {name} ? {v} : {name};"
        return self.line(text, depth)

    def stmt_scope(self, stmt: ir.Scope, depth: int) -> list[str]:
        inner = self.statements(stmt.body, 0)
        if all(isinstance(s, ir.Declare | ir.Assign | ir.Accumulate) for s in stmt.body):
            return self.line("{ " + " ".join(inner) + " }", depth)
        return [
            *self.line("{", depth),
            *self.statements(stmt.body, depth + 1),
            *self.line("}", depth),
        ]

    def stmt_if(self, stmt: ir.If, depth: int) -> list[str]:
        lines = [
            *self.line(f"if ({self.condition(stmt.cond)}) {{", depth),
            *self.statements(stmt.then, depth + 1),
        ]
        if stmt.otherwise:
            lines += [*self.line("} else {", depth), *self.statements(stmt.otherwise, depth + 1)]
        return lines + self.line("}", depth)

    def stmt_checkindex(self, stmt: ir.CheckIndex, depth: int) -> list[str]:
        bound = self.index(stmt.bound)
        then = f"{stmt.name} = 0;" if stmt.action == "clamp" else "continue;"
        return self.line(
            f"if ({stmt.name} < 0 || {stmt.name} >= {bound}) "
            f"{{ lm_fault_index(lm_fault, {stmt.name}, {bound}); {then} }}",
            depth,
        )

    def stmt_call(self, stmt: ir.Call, depth: int) -> list[str]:
        args = [f"b{p}" for p in stmt.params]
        lines: list[str] = []
        if stmt.counts:
            counts = ", ".join(f"({self.index_type})({self.index(c)})" for c in stmt.counts)
            lines += self.line(f"const {self.index_type} numel[] = {{{counts}}};", depth)
            args.append("numel")
        return lines + self.line(f"{stmt.function}({', '.join(args)});", depth)

    def stmt_librarycall(self, stmt: ir.LibraryCall, depth: int) -> list[str]:
        call = f"{stmt.function}({', '.join(self.argument(a) for a in stmt.args)})"
        if not stmt.reports_alloc:
            return self.line(f"{call};", depth)
        return [
            *self.line(f"const {self.index_type} failed_ = {call};", depth),
            *self.line("if (failed_) lm_fault_alloc(lm_fault, failed_);", depth),
        ]

    def argument(self, arg: Expr | ir.Pointer | ir.Value) -> str:
        if isinstance(arg, Expr):
            return self.index(arg)
        if isinstance(arg, ir.Pointer):
            return f"{self.buffer(arg.param)} + {self.index(arg.offset)}"
        return self.value(arg)

    def stmt_alloc(self, stmt: ir.Alloc, depth: int) -> list[str]:
        """A checked malloc: on failure free the earlier scratch, record the bytes asked
        for in the run's fault record and return. With an `align`, `align - 1` bytes more
        into `<name>_base` (what `Free` releases, see `_aligned_bases`) and the name
        rounded up to the alignment: glibc's `aligned_alloc` maps large blocks afresh on
        every call (MiniLM's attention scratch: page faults were 15 % of the kernel)."""
        storage = self.storage_types[stmt.dtype]
        size = self.index(stmt.elements * stmt.dtype.itemsize)
        frees = " ".join(f"free({name});" for name in stmt.release)
        base = stmt.name if stmt.align is None else f"{stmt.name}_base"
        extra = "" if stmt.align is None else f" + {stmt.align - 1}"
        failed = f"if (!{base}) {{ {frees} lm_fault_alloc(lm_fault, {size}); return; }}"
        lines = [
            *self.line(f"{storage}* {base} = ({storage}*)malloc((size_t)({size}){extra});", depth),
            *self.line(failed, depth),
        ]
        if stmt.align is not None:
            mask = f"(uintptr_t){stmt.align - 1}"
            aligned = f"({storage}*)(((uintptr_t){base} + {mask}) & ~{mask})"
            lines += self.line(f"{storage}* {stmt.name} = {aligned};", depth)
        return lines

    def stmt_free(self, stmt: ir.Free, depth: int) -> list[str]:
        return self.line(f"free({stmt.name});", depth)

    def stmt_localmemory(self, stmt: ir.LocalMemory, depth: int) -> list[str]:
        if self.local_qualifier is None:
            raise CompileError(f"{type(self).__name__}: no local memory ({stmt.name})")
        storage = self.storage_types[stmt.dtype]
        return self.line(
            f"{self.local_qualifier} {storage} {stmt.name}[{self.index(stmt.size)}];", depth
        )

    def stmt_barrier(self, stmt: ir.Barrier, depth: int) -> list[str]:
        if self.barrier_text is None:
            raise CompileError(f"{type(self).__name__}: no barriers")
        return self.line(self.barrier_text, depth)

    def stmt_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        if loop.kind == "reduce":
            return self.reduce_loop(loop, depth)
        if loop.kind == "parallel":
            return self.parallel_loop(loop, depth)
        if loop.kind in ("gpu_global", "gpu_local"):
            return self.gpu_loop(loop, depth)
        return self.for_loop(loop, depth, loop.body)

    def for_loop(self, loop: ir.Loop, depth: int, body: tuple[ir.Stmt, ...]) -> list[str]:
        name, extent = loop.var, self.index(loop.extent)
        head = f"for ({self.index_type} {name} = 0; {name} < {extent}; {name}++) {{"
        return [*self.line(head, depth), *self.statements(body, depth + 1), *self.line("}", depth)]

    def parallel_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        """Plain C runs a parallel loop in order; dialects add threads here."""
        return self.for_loop(loop, depth, loop.body)

    def gpu_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        """One work-item per iteration: the index from `gpu_index`, guarded by the
        extent (a launch rounds the grid up)."""
        name, extent = loop.var, self.index(loop.extent)
        return [
            *self.line(f"const {self.index_type} {name} = {self.gpu_index(loop)};", depth),
            *self.line(f"if ({name} < {extent}) {{", depth),
            *self.statements(loop.body, depth + 1),
            *self.line("}", depth),
        ]

    def gpu_index(self, loop: ir.Loop) -> str:
        """A GPU loop's work-item index (e.g. OpenCL `get_global_id(0)`); dialects
        decide which grid axis a loop takes."""
        raise CompileError(f"{type(self).__name__}: no GPU work-items ({loop.kind} loop)")

    def reduce_loop(self, loop: ir.Loop, depth: int) -> list[str]:
        """Accumulators declared at their identity, the loop, then the finished values.
        int32 sums accumulate unsigned (wrapping, as numpy's); float max keeps a NaN flag
        so the loop stays a plain max reduction a compiler vectorises."""
        lines: list[str] = []
        for r in loop.reductions:
            lines += [INDENT * depth + text for text in self.reduction_start(r)]
        lines += self.reduce_pragma(loop, depth)
        body = tuple(self._reduction_step(s, loop.reductions) for s in loop.body)
        lines += self.for_loop(loop, depth, body)
        for r in loop.reductions:
            lines += [INDENT * depth + text for text in self.reduction_end(r)]
        return lines

    def reduce_pragma(self, loop: ir.Loop, depth: int) -> list[str]:
        return []

    def reduction_start(self, r: ir.Reduction) -> list[str]:
        if r.op == "add" and not r.dtype.is_float:
            return [f"unsigned {r.name}_bits = 0u;"]
        if r.op == "add":
            return [f"{self.compute_types[r.dtype]} {r.name} = 0.0f;"]
        if not r.dtype.is_float:
            return [f"int {r.name} = (-2147483647 - 1);"]
        return [f"float {r.name} = (-INFINITY);", f"int {r.name}_nan = 0;"]

    def reduction_end(self, r: ir.Reduction) -> list[str]:
        if r.op == "add" and not r.dtype.is_float:
            return [f"int {r.name} = (int){r.name}_bits;"]
        if r.op == "max" and r.dtype.is_float:
            return [f"if ({r.name}_nan) {r.name} = NAN;"]
        return []

    def _reduction_step(self, stmt: ir.Stmt, reductions: tuple[ir.Reduction, ...]) -> ir.Stmt:
        for r in reductions:
            if isinstance(stmt, ir.Accumulate) and stmt.name == r.name:
                return _Step(r, stmt.value)
        return stmt

    def stmt__step(self, step: _Step, depth: int) -> list[str]:
        r, v = step.reduction, self.value(step.value)
        if r.op == "add" and not r.dtype.is_float:
            return self.line(f"{r.name}_bits += (unsigned)({v});", depth)
        if r.op == "add":
            return self.line(f"{r.name} += {v};", depth)
        lines = self.line(f"{r.name} = {v} > {r.name} ? {v} : {r.name};", depth)
        if r.dtype.is_float:
            lines += self.line(f"{r.name}_nan |= ({v} != {v});", depth)
        return lines

    # ------------------------------------------------------------------ values
    def value(self, value: ir.Value) -> str:
        render: Callable[[ir.Value], str] | None = getattr(
            self, "value_" + type(value).__name__.lower(), None
        )
        if render is None:
            raise CompileError(f"{type(self).__name__} cannot render {type(value).__name__}")
        return render(value)

    def value_const(self, c: ir.Const) -> str:
        if c.dtype.is_float:
            return float_literal(float(c.value))
        if int(c.value) == INT_MIN:
            return "(-2147483647 - 1)"
        return f"({int(c.value)})"

    def value_indexvalue(self, v: ir.IndexValue) -> str:
        return f"(({self.type_name(v.dtype)})({self.index(v.expr)}))"

    def value_load(self, load: ir.Load) -> str:
        return self.from_storage(f"{self.buffer(load.param)}[{self.index(load.index)}]", load.dtype)

    def value_var(self, v: ir.Var) -> str:
        return v.name

    def value_select(self, s: ir.Select) -> str:
        return f"({self.condition(s.cond)} ? {self.value(s.a)} : {self.value(s.b)})"

    def value_alu(self, alu: ir.Alu) -> str:
        args = [self.value(a) for a in alu.args]
        floating = alu.dtype.is_float
        op = alu.op
        if op in self.math_functions:
            return f"{self.math_functions[op]}({args[0]})"
        if op == "recip":
            return f"(1.0f / {args[0]})"
        if op == "lt":
            one, zero = ("1.0f", "0.0f") if floating else ("1", "0")
            return f"(({args[0]} < {args[1]}) ? {one} : {zero})"
        if op == "mod":
            return f"lm_{'fmod' if floating else 'imod'}_floor({args[0]}, {args[1]})"
        if op in ("add", "mul") and alu.dtype != DType.int32:
            return "(" + f" {'+' if op == 'add' else '*'} ".join(args) + ")"
        combine = {"add": "lm_iadd", "mul": "lm_imul"}.get(op)
        if op == "max":
            combine = "lm_max_nan" if floating else "lm_max_int"
        if combine is None:
            raise CompileError(f"{type(self).__name__}: unknown ALU op {op!r}")
        text = args[0]
        for arg in args[1:]:
            text = f"{combine}({text}, {arg})"
        return text

    def value_cast(self, cast: ir.Cast) -> str:
        x, target = self.value(cast.value), cast.target
        if target == ir.INDEX:
            return f"({self.index_type})({x})"
        if target == DType.bool:
            return f"(({x}) != 0)"
        if target == DType.int32:
            return f"lm_float_to_int({x})" if cast.source.is_float else f"((int)({x}))"
        if not cast.source.is_float:
            return f"((float)({x}))"
        if target == DType.float16:
            return f"((float)(_Float16)({x}))"
        if target == DType.bfloat16:
            return f"lm_bf16_load(lm_bf16_store({x}))"
        return x

    # ------------------------------------------------------------------ helpers
    def from_storage(self, text: str, dtype: DType) -> str:
        if dtype == DType.bfloat16:
            return f"lm_bf16_load({text})"
        if dtype == DType.float16:
            return self.half_load.format(text)
        if dtype == DType.bool:
            return f"((int){text})"
        return text

    def to_storage(self, text: str, dtype: DType) -> str:
        if dtype == DType.bfloat16:
            return f"lm_bf16_store({text})"
        if dtype == DType.float16:
            return self.half_store.format(text)
        if dtype == DType.bool:
            return f"({self.storage_types[DType.bool]})(({text}) != 0)"
        return text

    def buffer(self, param: int | str) -> str:
        """A buffer parameter by position (`b0`, `b1`, ...), or local / scratch memory by
        its name."""
        return param if isinstance(param, str) else f"b{param}"

    def type_name(self, dtype: ir.Type) -> str:
        if isinstance(dtype, ir.Vec):
            return self.vector_type(dtype)
        return self.index_type if dtype == ir.INDEX else self.compute_types[dtype]

    def vector_type(self, vec: ir.Vec) -> str:
        """A vector value's type (`float4`); plain C has none: the vector width is a GPU
        knob (`transforms.lanes`), and C kernels holding vector values are refused."""
        raise CompileError(
            f"{type(self).__name__}: no vector values ({vec.name}); vector widths "
            "(transforms.lanes) are rendered by the GPU dialects only"
        )

    def condition(self, cond: Expr | ir.Value) -> str:
        return self.index(cond) if isinstance(cond, Expr) else self.value(cond)

    def index(self, expr: Expr) -> str:
        return c_expr(expr)


class _Step(ir.Stmt):
    """A reduce loop's step for one of its reductions (rendering only)."""

    def __init__(self, reduction: ir.Reduction, value: ir.Value) -> None:
        self.reduction = reduction
        self.value = value


def dim_name(name: str) -> str:
    """A dimension's C local: `dim_<name>`, a namespace no loop index or local enters."""
    return f"dim_{name}"


@functools.lru_cache(maxsize=1 << 14)
def c_expr(expr: Expr) -> str:
    """An index expression in C: dims as their locals (`dim_<name>`), loop indices and
    index locals by their names (`i0_`, `g0_`): two namespaces that cannot meet.
    Cached (expressions are immutable and compare by structure): kernels write the same
    few indices many times (MiniLM's compile: 2513 calls, 166 distinct, 27 ms)."""
    names = expr.variables()
    dims = {n: var(dim_name(n)) for n in names if not is_loop_index(n)}
    loops = {n: loop_name(n) for n in names if is_loop_index(n)}
    return (expr.substitute(dims) if dims else expr).to_c(loops)


def _aligned_bases(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with `Free`s and failure releases of aligned scratch naming the pointer
    malloc returned (`<name>_base`, see `CRenderer.stmt_alloc`), not the aligned one."""
    aligned = {
        s.name
        for s in ir.statements(kernel.body)
        if isinstance(s, ir.Alloc) and s.align is not None
    }
    if not aligned:
        return kernel

    def base(name: str) -> str:
        return f"{name}_base" if name in aligned else name

    def rewrite(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            if isinstance(s, ir.Free):
                s = ir.Free(base(s.name))
            elif isinstance(s, ir.Alloc):
                s = dataclasses.replace(s, release=tuple(base(n) for n in s.release))
            elif isinstance(s, ir.Loop | ir.Scope):
                s = dataclasses.replace(s, body=rewrite(s.body))
            elif isinstance(s, ir.If):
                s = dataclasses.replace(s, then=rewrite(s.then), otherwise=rewrite(s.otherwise))
            out.append(s)
        return tuple(out)

    return dataclasses.replace(kernel, body=rewrite(kernel.body))


def _contains(body: tuple[ir.Stmt, ...], kind: type) -> bool:
    return any(isinstance(stmt, kind) for stmt in ir.statements(body))

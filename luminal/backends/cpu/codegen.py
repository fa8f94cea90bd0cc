"""C code generation for fused kernels.

Every kernel computes one materialised node. Its loop nest runs over the node's logical
indices; values of inlined producers are C expressions of those indices, built by
composing each edge's view (`index_expression`, `valid_expression`), so permutes,
broadcasts, slices and pads are index arithmetic, never copies. Kernels take their
buffers and the dimension array as arguments, so identical layers share one compiled
object; symbolic dims are read from the dimension array at run time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.kernel.indexing import (
    flat_index,
    is_loop_index,
    loop_index,
    loop_name,
    unravel,
)
from luminal.shape.expr import ONE, Expr, sym, var

C_STORAGE = {
    DType.float32: "float",
    DType.float16: "_Float16",
    DType.bfloat16: "unsigned short",
    DType.int32: "int",
    DType.bool: "unsigned char",
}
C_COMPUTE = {
    DType.float32: "float",
    DType.float16: "float",
    DType.bfloat16: "float",
    DType.int32: "int",
    DType.bool: "int",
}

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
static inline float lm_max_nan(float a, float b) { return (b > a || b != b) ? b : a; }
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

# the last parameter of a kernel that can fault (an index out of range): the run's own
# record {code, offending value, bound}, never a global shared by every graph
FAULT_PARAM = "long long* restrict lm_fault"

# a kernel's outer loop runs on OpenMP threads above this many elements: measured on
# LeNet-5 and MLP training steps (2 threads), 2**14 beats 2**18 by 15-20%; far lower
# (2**9) loses again to thread wake-ups
PARALLEL_THRESHOLD = 1 << 14


class NotRowLocal(Exception):
    """A row kernel would read a per-row value at another row: do not fuse."""


@dataclass
class KernelSource:
    """A kernel's C source and how to call it."""

    name: str
    source: str
    buffers: list[int]  # node ids passed as arguments: output first, then inputs
    nodes: list[int]  # graph nodes computed by this kernel (for LUMINAL_DEBUG)
    # bytes the kernel mallocs while it runs (all held at once), as expressions of the
    # dims: the run checks them against the machine's memory before anything runs
    scratch: tuple[Expr, ...] = ()

    @property
    def reports_faults(self) -> bool:
        """Whether the kernel takes the run's fault record (`FAULT_PARAM`); read from the
        source, so renamed variants of a kernel keep it."""
        return FAULT_PARAM in self.source


def dim_name(name: str) -> str:
    return f"dim_{name}"


def c_expr(expr: Expr) -> str:
    """Render an index expression with dims renamed to their C locals (`dim_<name>`) and
    loop indices to their loop names (`i0_`, `r0_`): two namespaces that cannot meet."""
    names = expr.variables()
    dims = {n: var(dim_name(n)) for n in names if not is_loop_index(n)}
    loops = {n: loop_name(n) for n in names if is_loop_index(n)}
    return (expr.substitute(dims) if dims else expr).to_c(loops)


def _float_literal(value: float) -> str:
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"{float(value)!r}f"


class KernelWriter:
    """Renders the value of any node at given logical indices, inlining what the
    schedule inlined and loading what it materialised."""

    def __init__(self, graph: Graph, materialised: set[int]) -> None:
        self.graph = graph
        self.materialised = materialised
        self.buffers: list[int] = []
        self.nodes: list[int] = []
        # row kernels: per-row values held in C locals, valid at the current row only
        self.scalars: dict[int, str] = {}
        self.row_flat: Expr | None = None
        # row values already stored in the output row (b0), by node: their flat index
        self.row_cache: dict[int, Expr] = {}
        self.extents: dict[str, Expr] = {}  # loop index name -> number of iterations

    def loop_var(self, name: str, extent: Expr) -> Expr:
        """A loop index running over `extent` values (bounded when the extent is known)."""
        index = loop_index(name, extent)
        self.extents[index.terms[0][0][0].args[0]] = extent
        return index

    def loop_vars(self, shape: Sequence[Expr], prefix: str = "i") -> list[Expr]:
        return [self.loop_var(f"{prefix}{axis}_", dim) for axis, dim in enumerate(shape)]

    def scalar(self, node: Node, flat: Expr) -> str:
        """The C local of a per-row value, if `flat` addresses the current row."""
        if flat != self.row_flat:
            raise NotRowLocal(f"node {node.id} is read away from the current row")
        return self.scalars[node.id]

    def buffer(self, node_id: int) -> str:
        if node_id not in self.buffers:
            self.buffers.append(node_id)
        return f"b{self.buffers.index(node_id)}"

    def load(self, node: Node, flat: Expr) -> str:
        text = f"{self.buffer(node.id)}[{c_expr(flat)}]"
        if node.dtype == DType.bfloat16:
            return f"lm_bf16_load({text})"
        if node.dtype == DType.float16:
            return f"((float){text})"
        if node.dtype == DType.bool:
            return f"((int){text})"
        return text

    def edge(self, edge: Edge, indices: Sequence[Expr]) -> str:
        source = self.graph.nodes[edge.source]
        view = edge.view
        if view.valid_expression(indices) == 0:  # reads padding only: no need to render
            return "0.0f" if source.dtype.is_float else "0"
        if view.is_identity():
            value = self.value(source, list(indices))
        else:
            flat = view.index_expression(indices)
            value = self.value_at_flat(source, flat)
        valid = view.valid_expression(indices)
        if valid == 1:
            return value
        zero = "0.0f" if source.dtype.is_float else "0"
        return f"({c_expr(valid)} ? {value} : {zero})"

    def value_at_flat(self, node: Node, flat: Expr) -> str:
        if node.id in self.scalars:
            return self.scalar(node, flat)
        if node.id in self.materialised or isinstance(node.op, ops.Input):
            return self.load(node, flat)
        # comparisons in place of divisions pay off where the indices only address loads
        # (they would nest through a further reshape of an inlined node)
        compare = all(
            e.source in self.materialised
            or isinstance(self.graph.nodes[e.source].op, ops.Input | ops.Constant)
            for e in node.inputs
        )
        return self.value(node, unravel(flat, node.shape, self.extents, compare))

    def value(self, node: Node, indices: list[Expr]) -> str:
        """The C expression of `node` at logical `indices`."""
        if node.id in self.scalars or node.id in self.row_cache:
            flat = flat_index(indices, node.shape)
            if node.id in self.row_cache and flat == self.row_cache[node.id]:
                return f"b0[{c_expr(flat)}]"
            if node.id in self.scalars:
                return self.scalar(node, flat)
        if node.id in self.materialised or isinstance(node.op, ops.Input):
            flat = flat_index(indices, node.shape)
            return self.load(node, flat)
        self.nodes.append(node.id)
        op = node.op
        reduces = isinstance(op, ops.SumReduce | ops.MaxReduce)
        args = [] if reduces else [self.edge(e, indices) for e in node.inputs]
        render = OP_RENDERERS.get(type(op))
        if render is None:
            raise NotImplementedError(f"no C renderer for {op.name}")
        text = render(self, node, args, indices)
        # half-precision values round after every op, as the reference runtime does
        if node.dtype == DType.float16:
            return f"((float)(_Float16)({text}))"
        if node.dtype == DType.bfloat16:
            return f"lm_bf16_load(lm_bf16_store({text}))"
        return text


def _constant(w: KernelWriter, node: Node, args: list[str], idx: list[Expr]) -> str:
    value = node.op.value
    if isinstance(value, Expr):
        text = f"({c_expr(value)})"
        return f"((float){text})" if node.dtype.is_float else f"((int){text})"
    if node.dtype.is_float:
        return _float_literal(float(value))
    return f"({int(value)})"


def _iota(w: KernelWriter, node: Node, args: list[str], idx: list[Expr]) -> str:
    flat = flat_index(idx, node.shape)
    text = f"({c_expr(node.op.expr.substitute({'z': flat}))})"
    return f"((float){text})" if node.dtype.is_float else f"((int){text})"


def _cast(w: KernelWriter, node: Node, args: list[str], idx: list[Expr]) -> str:
    source = w.graph.nodes[node.inputs[0].source]
    target = node.op.dtype
    x = args[0]
    if target == DType.bool:
        return f"(({x}) != 0)"
    if target == DType.int32:
        return f"lm_float_to_int({x})" if source.dtype.is_float else f"((int)({x}))"
    if target.is_float and not source.dtype.is_float:
        return f"((float)({x}))"
    if target == DType.float16:
        return f"((float)(_Float16)({x}))"
    if target == DType.bfloat16:
        return f"lm_bf16_load(lm_bf16_store({x}))"
    return x


def _fn(name: str):  # noqa: ANN202
    return lambda w, node, args, idx: f"{name}({args[0]})"


def _arithmetic(symbol: str, wrapping: str):  # noqa: ANN202
    """Float arithmetic as C operators; int32 through the wrapping helpers."""
    return lambda w, node, args, idx: (
        f"{wrapping}({args[0]}, {args[1]})"
        if node.dtype == DType.int32
        else f"({args[0]} {symbol} {args[1]})"
    )


def _short_reduce(w: KernelWriter, node: Node, args: list[str], idx: list[Expr]) -> str:
    """A reduction over a few elements, inlined as an expression (relu, abs, clip and
    maximum are a max over a stacked pair)."""
    (edge,) = node.inputs
    axis = node.op.axis
    terms = [
        w.edge(edge, idx[:axis] + [sym(k)] + idx[axis:]) for k in range(int(edge.view.shape[axis]))
    ]
    if not terms:  # an empty axis: the identity, as the reference runtime gives
        if isinstance(node.op, ops.SumReduce):
            return "0.0f" if node.dtype.is_float else "0"
        return "(-INFINITY)" if node.dtype.is_float else "(-2147483647 - 1)"
    if isinstance(node.op, ops.SumReduce):
        if node.dtype != DType.int32:
            return "(" + " + ".join(terms) + ")"
        combine = "lm_iadd"  # int32 wraps, as numpy's sum does
    else:
        combine = "lm_max_nan" if node.dtype.is_float else "lm_max_int"
    text = terms[0]
    for term in terms[1:]:
        text = f"{combine}({text}, {term})"
    return text


OP_RENDERERS = {
    ops.SumReduce: _short_reduce,
    ops.MaxReduce: _short_reduce,
    ops.Constant: _constant,
    ops.Iota: _iota,
    ops.Log2: _fn("log2f"),
    ops.Exp2: _fn("exp2f"),
    ops.Sin: _fn("sinf"),
    ops.Sqrt: _fn("sqrtf"),
    ops.Recip: lambda w, node, args, idx: f"(1.0f / {args[0]})",
    ops.Add: _arithmetic("+", "lm_iadd"),
    ops.Mul: _arithmetic("*", "lm_imul"),
    ops.Mod: lambda w, node, args, idx: (
        f"lm_fmod_floor({args[0]}, {args[1]})"
        if node.dtype.is_float
        else f"lm_imod_floor({args[0]}, {args[1]})"
    ),
    ops.LessThan: lambda w, node, args, idx: (
        f"(({args[0]} < {args[1]}) ? {'1.0f' if node.dtype.is_float else '1'} : "
        f"{'0.0f' if node.dtype.is_float else '0'})"
    ),
    ops.Cast: _cast,
    ops.Contiguous: lambda w, node, args, idx: args[0],
    ops.GraphBreak: lambda w, node, args, idx: args[0],
}


def _store(node: Node, value: str) -> str:
    if node.dtype == DType.bfloat16:
        return f"lm_bf16_store({value})"
    if node.dtype == DType.float16:
        return f"(_Float16)({value})"
    if node.dtype == DType.bool:
        return f"(unsigned char)(({value}) != 0)"
    return value


def _loops(shape: Sequence[Expr], indices: Sequence[Expr], body: str, total: Expr) -> str:
    """A loop nest over `shape`, outermost parallel when the work is large."""
    if not shape:
        return "    {\n" + body + "\n    }"
    text = ""
    indent = "    "
    for axis, (dim, index) in enumerate(zip(shape, indices, strict=True)):
        name = c_expr(index)
        if axis == 0:
            text += (
                f"{indent}#pragma omp parallel for if(({c_expr(total)}) > {PARALLEL_THRESHOLD})\n"
            )
        text += f"{indent}for (long long {name} = 0; {name} < {c_expr(dim)}; {name}++) {{\n"
        indent += "    "
    text += "\n".join(indent + line for line in body.splitlines()) + "\n"
    for _ in shape:
        indent = indent[:-4]
        text += f"{indent}}}\n"
    return text.rstrip("\n")


def kernel_name(graph: Graph, writer: KernelWriter, node: Node) -> str:
    names = [graph.nodes[n].op.name.lower() for n in reversed(writer.nodes)]
    if node.id not in writer.nodes:
        names.append(node.op.name.lower())
    seen: list[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return "_".join(seen[:4]) or node.op.name.lower()


def _product(shape: Sequence[Expr]) -> Expr:
    total = ONE
    for d in shape:
        total = total * d
    return total


def _finish(
    graph: Graph,
    node: Node,
    writer: KernelWriter,
    dims: Sequence[str],
    loops: str,
    extra: list[Expr],
    faults: bool = False,
) -> KernelSource:
    types = []
    for position, node_id in enumerate(writer.buffers):
        storage = C_STORAGE[graph.nodes[node_id].dtype]
        types.append(
            f"{storage}* restrict b0" if position == 0 else f"const {storage}* restrict b{position}"
        )
    computed = sorted(set(writer.nodes + [node.id]))
    return _finish_source(
        kernel_name(graph, writer, node),
        writer.buffers,
        types,
        dims,
        loops,
        computed,
        faults=faults,
    )


def _finish_source(
    label: str,
    buffers: list[int],
    parameter_types: list[str],
    dims: Sequence[str],
    body: str,
    computed: list[int],
    prelude: str = "",
    faults: bool = False,
    scratch: Sequence[Expr] = (),
) -> KernelSource:
    """Wrap a kernel body into a function named after its ops and its source hash."""
    locals_ = "".join(
        f"    const long long {dim_name(n)} = d[{i}]; (void){dim_name(n)};\n"
        for i, n in enumerate(dims)
    )
    params = ", ".join(
        [*parameter_types, "const long long* restrict d", *([FAULT_PARAM] if faults else [])]
    )
    placeholder = "KERNEL_NAME"
    source = f"{prelude}\n/* {label} */\nvoid {placeholder}({params}) {{\n{locals_}{body}\n}}\n"
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    name = f"lm_{label}_{digest}"
    source = source.replace(placeholder, name)
    return KernelSource(name, source, list(buffers), computed, tuple(scratch))

"""The kernel IR: what one kernel computes, in no language.

Lowering (`kernel/lower.py`) turns a fused group of graph nodes into a `Kernel`;
renderers (`luminal/render/`) turn a `Kernel` into source text (C with OpenMP for the
CPU; OpenCL C, CUDA C, Metal), and schedule knobs rewrite one `Kernel` into another.
Every node is a frozen dataclass, so kernels compare and hash by value.

Values are typed by a `DType` (their *compute* type: float16/bfloat16 values compute
in float32, bool in int32, as the reference runtime does) or by `INDEX`, the signed
64-bit type of positions. Index arithmetic is a `luminal.shape.expr.Expr` over three
kinds of variables, told apart by name, never by pattern:

- loop variables and index locals: `loop_index(name, extent)` variables, whose names
  carry `LOOP_MARK` (no identifier can), bound by `Loop.var` / `Declare` of an INDEX
  local with the same `name`;
- dims: the kernel's symbolic dimensions (`Kernel.dims`), read from the dimension array;
- nothing else.

So no user dim name can clash with a loop or a local, whatever a renderer calls them.
Names of value locals (`Declare`, `Reduction`) are chosen by lowering and unique in
their scope.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.shape.expr import Expr

INDEX: Literal["index"] = "index"


@dataclass(frozen=True)
class Vec:
    """The type of `width` consecutive lanes of `dtype`'s compute type (a `VectorLoad`
    and the local it is declared in): OpenCL/CUDA/Metal `float4`, `float2`, `int4`."""

    dtype: DType
    width: int

    @property
    def name(self) -> str:
        return f"{self.dtype.name}x{self.width}"


Type = DType | Literal["index"] | Vec
# element types a vector access may move: 4-byte types and float16 (read as float)
VECTOR_DTYPES = (DType.float32, DType.int32, DType.float16)

# ALU operations, one per primitive computation (plus `max`, the reduction combine).
# Integer ones wrap (add, mul) and never trap (mod by 0 or -1 gives 0) and float mod is
# a floor modulo, as numpy's: the renderer picks the spelling from `Alu.dtype`.
UNARY = ("recip", "sqrt", "sin", "exp2", "log2")
BINARY = ("add", "mul", "mod", "lt", "max")  # add, mul and max may take more than two
ALU_OPS = UNARY + BINARY

LoopKind = Literal["serial", "parallel", "reduce", "vector", "gpu_global", "gpu_local"]
ReduceOp = Literal["add", "max"]


# ----------------------------------------------------------------------------- values
class Value:
    """Base of every value node (an expression with a type)."""


@dataclass(frozen=True)
class Const(Value):
    """A literal of `dtype` (NaN and infinities allowed for floats)."""

    value: float | int
    dtype: DType


@dataclass(frozen=True)
class IndexValue(Value):
    """An index expression (loop variables, index locals, dims) as a value of `dtype`:
    symbolic constants, iotas."""

    expr: Expr
    dtype: DType


@dataclass(frozen=True)
class Load(Value):
    """Element `index` of buffer parameter `param` (or of the `LocalMemory` / `Alloc`
    named `param`), stored as `dtype` (the value has `dtype`'s compute type)."""

    param: int | str
    index: Expr
    dtype: DType


@dataclass(frozen=True)
class VectorLoad(Value):
    """Elements `index` .. `index + width - 1` of buffer parameter `param`, stored as
    `dtype` (one of `VECTOR_DTYPES`), as one `Vec(dtype, width)` value. `index` is a
    multiple of `width` (the transform that makes it proves so), so the address is
    aligned to the whole vector; renderers emit one wide access (`vload4`, `float4`)."""

    param: int
    index: Expr
    dtype: DType
    width: int


@dataclass(frozen=True)
class Lane(Value):
    """Lane `lane` (0-based) of a vector value (a `Var` of a `Vec` local)."""

    vector: Value
    lane: int


@dataclass(frozen=True)
class Alu(Value):
    """`op` (one of `ALU_OPS`) of `args`, computed in `dtype`'s compute type. For `lt`,
    `dtype` is the result's type (1 or 0); `max` propagates NaN for floats."""

    op: str
    args: tuple[Value, ...]
    dtype: DType


@dataclass(frozen=True)
class Select(Value):
    """`a` where `cond` is nonzero, else `b`. `cond` is an index predicate (a view's
    validity mask) or a value."""

    cond: Expr | Value
    a: Value
    b: Value


@dataclass(frozen=True)
class Cast(Value):
    """`value` (of `source`'s compute type) converted to `target`: float to int32
    truncates (NaN and out-of-range give INT_MIN), to bool tests != 0, to float16 or
    bfloat16 rounds to that precision (`source == target` rounds a half-precision
    result after an op, as the reference runtime does), to INDEX widens an integer."""

    value: Value
    source: DType
    target: Type


@dataclass(frozen=True)
class Var(Value):
    """Read a local (a `Declare`d value or a `Reduction`'s accumulator)."""

    name: str
    dtype: Type


def type_of(value: Value) -> Type:
    """The type a value computes in (a Load's storage dtype stands for its compute type;
    a Select has its branches' type)."""
    if isinstance(value, Select):
        return type_of(value.a)
    if isinstance(value, Cast):
        return value.target
    if isinstance(value, VectorLoad):
        return Vec(value.dtype, value.width)
    if isinstance(value, Lane):
        vector = type_of(value.vector)
        return vector.dtype if isinstance(vector, Vec) else vector
    return value.dtype  # type: ignore[attr-defined]


# ------------------------------------------------------------------------- statements
class Stmt:
    """Base of every statement node."""


@dataclass(frozen=True)
class Declare(Stmt):
    """A new local `name` of `dtype`, set to `value`; `const` when never assigned again.
    An INDEX local is read in index expressions as `loop_index(name, bound)`."""

    name: str
    dtype: Type
    value: Value
    const: bool = False


@dataclass(frozen=True)
class Assign(Stmt):
    name: str
    value: Value


@dataclass(frozen=True)
class Accumulate(Stmt):
    """`name = name <op> value`: inside a reduce loop that lists `name` in its
    `reductions`, the loop's reduction step; elsewhere a plain update (a short
    reduction unrolled). Float max propagates NaN, int32 add wraps."""

    name: str
    op: ReduceOp
    value: Value


@dataclass(frozen=True)
class Store(Stmt):
    """Buffer parameter `param`'s (or the `LocalMemory` / `Alloc` named `param`'s)
    element `index` = `value`, converted to `dtype` (the buffer's storage type)."""

    param: int | str
    index: Expr
    value: Value
    dtype: DType


@dataclass(frozen=True)
class VectorStore(Stmt):
    """Elements `index` .. `index + len(values) - 1` of buffer parameter `param` =
    `values` (scalars, one per lane), converted to `dtype` (one of `VECTOR_DTYPES`), as
    one wide store; `index` is a multiple of the width, as for `VectorLoad`."""

    param: int
    index: Expr
    values: tuple[Value, ...]
    dtype: DType


@dataclass(frozen=True)
class Reduction:
    """An accumulator a reduce loop declares (at `op`'s identity) before it runs and
    whose value is final after it: `Accumulate(name, op, ...)` in the body updates it."""

    name: str
    op: ReduceOp
    dtype: DType


@dataclass(frozen=True)
class Loop(Stmt):
    """`for var in range(extent): body`. `kind` says how iterations may run:

    - serial: in order;
    - parallel: on threads; `work` (elements the loop nest touches) lets a renderer run
      small nests serially (the C renderer's `if(work > threshold)`); None: always;
    - reduce: iterations combine into `reductions` (vectorisable, order-free);
    - vector: iterations are SIMD lanes;
    - gpu_global / gpu_local: one GPU work-item per iteration (grid / work-group axis).
    """

    var: str
    extent: Expr
    kind: LoopKind
    body: tuple[Stmt, ...]
    work: Expr | None = None
    reductions: tuple[Reduction, ...] = ()


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr | Value
    then: tuple[Stmt, ...]
    otherwise: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Scope(Stmt):
    """A nested block: locals declared in `body` end with it."""

    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class CheckIndex(Stmt):
    """The INDEX local `name` must lie in [0, bound): otherwise record a fault (the
    run's fault record gets {1, value, bound}; the runtime raises ExecutionError) and
    `clamp` it to 0 or `skip` the rest of the innermost loop's iteration."""

    name: str
    bound: Expr
    action: Literal["clamp", "skip"]


@dataclass(frozen=True)
class LocalMemory(Stmt):
    """GPU work-group local memory: `size` elements of `dtype` named `name` (CPU
    renderers reject it)."""

    name: str
    dtype: DType
    size: Expr


@dataclass(frozen=True)
class Barrier(Stmt):
    """Every work-item of a work-group waits here; local memory is consistent after."""


@dataclass(frozen=True)
class Call(Stmt):
    """A library or user function: `function(params..., counts)`, where `counts` are the
    element counts of each parameter as an array (the custom-kernel ABI of
    `luminal/custom.py`)."""

    function: str
    params: tuple[int, ...]
    counts: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Pointer:
    """A call argument: element `offset` of buffer parameter `param` (an int) or of the
    scratch buffer / local named `param` (a str)."""

    param: int | str
    offset: Expr


@dataclass(frozen=True)
class LibraryCall(Stmt):
    """`function(args...)`: a library routine (BLAS sgemm) or one the kernel's prelude
    defines (the generated matmul). Args: index Exprs, Pointers, Values. With
    `reports_alloc` the function returns 0 or the bytes it could not allocate, which go
    to the run's fault record (the kernel must have `reports_faults`)."""

    function: str
    args: tuple[Expr | Pointer | Value, ...]
    reports_alloc: bool = False


@dataclass(frozen=True)
class Alloc(Stmt):
    """Scratch memory: `elements` of `dtype` named `name` (released by `Free`). If it
    cannot be allocated: free `release` (earlier Allocs), record an allocation fault of
    the bytes asked for and return (the kernel must have `reports_faults`). `align`: the
    start's alignment in bytes (a power of two), for blocks read as whole vectors: a
    512-bit load from malloc's 16-byte-aligned memory spans two cache lines; None: the
    allocator's own."""

    name: str
    dtype: DType
    elements: Expr
    release: tuple[str, ...] = ()
    align: int | None = None

    def __post_init__(self) -> None:
        # the renderer rounds the pointer up with the mask align - 1: anything but a power
        # of two gives a misaligned pointer, or one outside the block
        if self.align is not None and (self.align < 1 or self.align & (self.align - 1)):
            raise CompileError(
                f"Alloc {self.name!r}: align must be a power of two (bytes) or None, "
                f"got {self.align!r}"
            )


@dataclass(frozen=True)
class Free(Stmt):
    name: str


@functools.cache
def is_node_type(cls: type) -> bool:
    """Instances of `cls` are IR nodes (dataclasses), for passes that walk any node:
    once per type, since `dataclasses.is_dataclass` on an enum member (a dtype) goes
    through the enum's slow `__getattr__`, for every node visited."""
    return dataclasses.is_dataclass(cls)


def blocks(stmt: Stmt) -> tuple[tuple[Stmt, ...], ...]:
    """The statement blocks `stmt` holds: a loop's or scope's body, an if's branches."""
    if isinstance(stmt, Loop | Scope):
        return (stmt.body,)
    if isinstance(stmt, If):
        return (stmt.then, stmt.otherwise)
    return ()


def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of `body`, each before those of the blocks it holds (values are
    not visited: no statement sits inside a value)."""
    for stmt in body:
        yield stmt
        for block in blocks(stmt):
            yield from statements(block)


def local_names(body: tuple[Stmt, ...]) -> set[str]:
    """Every local, loop variable, reduction and scratch name `body` declares: a pass
    that adds locals picks names outside it."""
    used: set[str] = set()
    for stmt in statements(body):
        if isinstance(stmt, Declare | Alloc | LocalMemory):
            used.add(stmt.name)
        if isinstance(stmt, Loop):
            used.add(stmt.var)
            used.update(r.name for r in stmt.reductions)
    return used


class FreshNames:
    """Local names `<prefix>1`, `<prefix>2`, ... that none of `used` (a kernel's
    `local_names`) is: the names a pass gives the locals it adds."""

    def __init__(self, prefix: str, used: set[str]) -> None:
        self.prefix = prefix
        self.used = used
        self.count = 0

    def fresh(self) -> str:
        while True:
            self.count += 1
            name = f"{self.prefix}{self.count}"
            if name not in self.used:
                return name


# ----------------------------------------------------------------------------- kernel
@dataclass(frozen=True)
class Param:
    """A buffer parameter: the graph node whose buffer it binds, its storage dtype,
    whether the kernel writes it (the output, always parameter 0) and its number of
    elements where lowering knows it (None: unknown), which proves a load in bounds
    (`kernel/hoist.py`)."""

    node: int
    dtype: DType
    output: bool = False
    elements: Expr | None = None


@dataclass(frozen=True)
class Kernel:
    """One kernel: `label` names it after its ops; `params` are buffers (output first),
    `dims` the dimension array's order; `nodes` the graph nodes it computes. `scratch`
    are bytes it allocates while running (expressions of the dims), `prelude` source
    text it needs (a user's custom C), `reports_faults` whether it takes the run's fault
    record, `vector_width` a preferred SIMD width in bits (None: the toolchain's)."""

    label: str
    params: tuple[Param, ...]
    dims: tuple[str, ...]
    body: tuple[Stmt, ...]
    nodes: tuple[int, ...]
    scratch: tuple[Expr, ...] = ()
    prelude: str = ""
    reports_faults: bool = False
    vector_width: int | None = None

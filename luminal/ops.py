"""The primitive operations: small frozen dataclasses, one per op.

Everything that *does* something with a primitive (the reference runtime, autograd,
renderers, the e-graph encoder) keeps its own table keyed by the primitive's type;
nothing dispatches on an op's printed form. This module also holds the one table
every layer needs: the type rule giving an op's output dtype and checking its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.shape.expr import Expr

Shape = tuple[Expr, ...]


class Op:
    """Base class of primitives. `arity` is the number of inputs (None: any)."""

    arity: int | None = 0

    @property
    def name(self) -> str:
        return type(self).__name__


# ---------------------------------------------------------------- sources
@dataclass(frozen=True)
class Input(Op):
    label: str
    arity = 0


@dataclass(frozen=True)
class Constant(Op):
    """A scalar: a number, or a symbolic expression evaluated with the dimension map."""

    value: float | int | Expr
    arity = 0


@dataclass(frozen=True)
class Iota(Op):
    """A tensor of `shape` whose element at flat row-major index z is `expr(z)`."""

    expr: Expr
    arity = 0


# ---------------------------------------------------------------- unary
@dataclass(frozen=True)
class Log2(Op):
    arity = 1


@dataclass(frozen=True)
class Exp2(Op):
    arity = 1


@dataclass(frozen=True)
class Sin(Op):
    arity = 1


@dataclass(frozen=True)
class Sqrt(Op):
    arity = 1


@dataclass(frozen=True)
class Recip(Op):
    arity = 1


# ---------------------------------------------------------------- binary
@dataclass(frozen=True)
class Add(Op):
    arity = 2


@dataclass(frozen=True)
class Mul(Op):
    arity = 2


@dataclass(frozen=True)
class Mod(Op):
    """Floor modulo (the sign of the divisor), as torch.remainder and Python's %."""

    arity = 2


@dataclass(frozen=True)
class LessThan(Op):
    """1 where a < b else 0, in the inputs' dtype."""

    arity = 2


# ---------------------------------------------------------------- reductions
@dataclass(frozen=True)
class SumReduce(Op):
    axis: int
    arity = 1


@dataclass(frozen=True)
class MaxReduce(Op):
    axis: int
    arity = 1


# ---------------------------------------------------------------- data movement
@dataclass(frozen=True)
class Contiguous(Op):
    """Materialise the input view into a fresh row-major buffer."""

    arity = 1


@dataclass(frozen=True)
class Gather(Op):
    """inputs (table, indices): rows of `table` along axis 0,
    shape indices.shape + table.shape[1:]."""

    arity = 2


@dataclass(frozen=True)
class Scatter(Op):
    """inputs (base, indices, updates): `base` with `updates` rows added at `indices`
    along axis 0 (torch.index_add semantics; repeated indices accumulate)."""

    arity = 3


# ---------------------------------------------------------------- other
@dataclass(frozen=True)
class Cast(Op):
    dtype: DType
    arity = 1


@dataclass(frozen=True)
class Function(Op):
    """An opaque Python callable on numpy arrays; never rewritten by compilers.
    `side_effect` ops (print, diff) run even when nothing consumes them."""

    label: str
    fn: Callable = field(compare=False)
    side_effect: bool = False
    arity = None


@dataclass(frozen=True)
class GraphBreak(Op):
    """Identity that marks a boundary between search regions."""

    arity = 1


# ---------------------------------------------------------------- lowered (backend-level)
@dataclass(frozen=True)
class Contract(Op):
    """sum(a * b, axis) for two inputs read as views of one logical shape: a matrix
    product with given strides. Never built by the frontend: the e-graph's `cpu` ruleset
    lowers a recognised contraction to it, and backends run it as BLAS or a loop."""

    axis: int
    arity = 2

    @property
    def summed(self) -> tuple[int, ...]:
        """The summed axes of the logical input shape, ascending."""
        return (self.axis,)


@dataclass(frozen=True)
class ContractSum(Contract):
    """sum(a * b) over `axis` and `outer`, two axes of the logical input shape along
    which both operands vary: a weight gradient summed over the batch, one sgemm with
    the batch merged into K instead of a product per batch index and a sum."""

    outer: int

    @property
    def summed(self) -> tuple[int, ...]:
        return tuple(sorted((self.axis, self.outer)))


@dataclass(frozen=True)
class FusedAttention(Op):
    """softmax(q kᵀ * scale + mask) v in one pass (flash-style online softmax), never
    holding the (L, S) scores. Built by the attention pass (`compiler/attention.py`)
    from the lowered product, softmax and product it replaces. Inputs are read through
    the views those products used, so the logical index spaces are theirs: q and k as
    (*batch, L, S, D) (q constant along S, k along L), v as (*batch, L, Dv, S) (constant
    along L), the optional additive mask as (*batch, L, S) (a fourth input); the
    output is (*batch, L, Dv). A causal mask built from an iota is held as data
    instead: with `causal_offset`, the scores of query row r also get `causal_value`
    where r + causal_offset < key (so a kernel may skip the key blocks it hides)."""

    scale: float
    causal_offset: Expr | None = None
    causal_value: float = 0.0
    arity = None


@dataclass(frozen=True)
class WinogradConv(Op):
    """A whole Winograd convolution F(tile x tile, 3x3) (`nn/winograd.py`): the input
    windows' transform, the alpha^2 products with the transformed weights and the output
    transform in one node, so a backend can run the tiles through all three in cache.
    Built by the Winograd pass (`compiler/winograd.py`) from the four lowered nodes it
    replaces, and read through their views: the windows (alpha, alpha, C', N, TH, TW),
    the transformed weights (alpha^2, K', T, C), kron(B^T, B^T) (alpha^2, alpha^2, C', T)
    and kron(A^T, A^T) (N, K, TH, tile, TW, tile, alpha^2); the output is
    (N, K, TH, tile, TW, tile)."""

    tile: int
    arity = 4


UNARY_OPS = (Log2, Exp2, Sin, Sqrt, Recip)
BINARY_OPS = (Add, Mul, Mod, LessThan)
REDUCE_OPS = (SumReduce, MaxReduce)
PRIMITIVES = (
    Input,
    Constant,
    Iota,
    *UNARY_OPS,
    *BINARY_OPS,
    *REDUCE_OPS,
    Contiguous,
    Gather,
    Scatter,
    Cast,
    Function,
    GraphBreak,
)
# ops that lowering produces and every runtime runs, but no user graph holds (so autograd
# and the encoders meet them only in lowered graphs)
LOWERED_OPS = (Contract, ContractSum, FusedAttention, WinogradConv)


def _describe(shapes: Sequence[Shape], dtypes: Sequence[DType]) -> str:
    return ", ".join(
        f"({', '.join(str(d) for d in s)}){':' + d.value}"
        for s, d in zip(shapes, dtypes, strict=True)
    )


def check_inputs(op: Op, shapes: Sequence[Shape], dtypes: Sequence[DType]) -> None:
    """Raise ShapeError/DTypeError when inputs do not fit the primitive."""
    if op.arity is not None and len(shapes) != op.arity:
        raise ShapeError(f"{op.name} takes {op.arity} inputs, got {len(shapes)}")
    if isinstance(op, UNARY_OPS) and not dtypes[0].is_float:
        raise DTypeError(f"{op.name} needs a floating dtype, got {dtypes[0].value}")
    if isinstance(op, BINARY_OPS):
        if shapes[0] != shapes[1]:
            raise ShapeError(
                f"{op.name} needs inputs of one shape, got {_describe(shapes, dtypes)}"
            )
        if dtypes[0] != dtypes[1] or dtypes[0] == DType.bool:
            raise DTypeError(
                f"{op.name} needs two inputs of one numeric dtype, got {_describe(shapes, dtypes)}"
            )
    if isinstance(op, REDUCE_OPS):
        if not 0 <= op.axis < len(shapes[0]):
            raise ShapeError(
                f"{op.name} axis {op.axis} is out of range for {_describe(shapes, dtypes)}"
            )
        if dtypes[0] == DType.bool:
            raise DTypeError(f"{op.name} does not reduce bool; cast first")
    if isinstance(op, Gather | Scatter) and dtypes[1] != DType.int32:
        raise DTypeError(f"{op.name} indices must be int32, got {_describe(shapes, dtypes)}")
    if isinstance(op, Gather) and len(shapes[0]) < 1:
        raise ShapeError(
            f"Gather table must have at least one axis, got {_describe(shapes, dtypes)}"
        )
    if isinstance(op, Scatter):
        expected = tuple(shapes[1]) + tuple(shapes[0][1:])
        if tuple(shapes[2]) != expected or dtypes[0] != dtypes[2]:
            raise ShapeError(
                f"Scatter updates must have shape indices.shape + base.shape[1:] = "
                f"({', '.join(str(d) for d in expected)}) and the base dtype, "
                f"got {_describe(shapes, dtypes)}"
            )


def output_shape(op: Op, shapes: Sequence[Shape]) -> Shape | None:
    """The output shape the primitive implies, or None when the op carries it itself."""
    if isinstance(op, (*UNARY_OPS, *BINARY_OPS, Contiguous, Cast, GraphBreak)):
        return tuple(shapes[0])
    if isinstance(op, REDUCE_OPS):
        return tuple(shapes[0][: op.axis]) + tuple(shapes[0][op.axis + 1 :])
    if isinstance(op, Gather):
        return tuple(shapes[1]) + tuple(shapes[0][1:])
    if isinstance(op, Scatter):
        return tuple(shapes[0])
    if isinstance(op, Constant):
        return ()
    return None


def output_dtype(op: Op, dtypes: Sequence[DType]) -> DType | None:
    """The output dtype the primitive implies, or None when the op carries it itself."""
    if isinstance(op, Cast):
        return op.dtype
    if isinstance(op, Gather):
        return dtypes[0]
    if dtypes and not isinstance(op, Function):
        return dtypes[0]
    return None

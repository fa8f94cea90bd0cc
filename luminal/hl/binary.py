"""Binary ops with numpy broadcasting, dtype promotion and Python scalars on either side."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import ops
from luminal.dtype import DType, float32, int32, promote
from luminal.errors import DTypeError, GraphError, ShapeError
from luminal.shape.expr import Expr

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Operand = Any  # GraphTensor | int | float | bool | numpy scalar

# integer scalar exponents up to this size are computed by exact repeated squaring
_MAX_SQUARING_EXPONENT = 64


def broadcast_shapes(a: tuple[Expr, ...], b: tuple[Expr, ...], op: str) -> tuple[Expr, ...]:
    """numpy's broadcasting rule, symbolically; ShapeError naming both shapes."""
    out: list[Expr] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else None
        y = b[-i] if i <= len(b) else None
        if x is None or (x == 1 and y is not None):
            out.append(y)  # type: ignore[arg-type]
        elif y is None or y == 1 or x == y:
            out.append(x)
        else:
            sa = "(" + ", ".join(str(d) for d in a) + ")"
            sb = "(" + ", ".join(str(d) for d in b) + ")"
            raise ShapeError(f"{op}: shapes {sa} and {sb} cannot be broadcast together")
    return tuple(reversed(out))


def python_scalar(value: Any) -> bool | int | float | None:
    """A Python or numpy scalar (or 0-d array) as a Python number; None for anything else."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, np.generic | np.ndarray) and np.ndim(value) == 0:
        item = value.item()
        return item if isinstance(item, bool | int | float) else None
    return None


def not_nan(x: GraphTensor) -> GraphTensor:
    """1 where x is not NaN, else 0, in x's dtype (ints are never NaN). Every number,
    infinities included, is below +inf or above -inf; NaN is neither."""
    if not x.dtype.is_float:
        return x.graph.constant(1, x.dtype).expand(x.view.shape)
    return (x.lt(math.inf) + x.gt(-math.inf)).gt(0)


def _is_operand(value: Any) -> bool:
    """Whether a binary op accepts `value` (a tensor or a scalar)."""
    from luminal.tensor import GraphTensor

    return isinstance(value, GraphTensor) or python_scalar(value) is not None


def _scalar_dtype(tensor_dtype: DType, value: bool | int | float) -> DType:
    """PyTorch's rule for a tensor with a Python scalar: the scalar only widens the
    category (bool -> int -> float), never the tensor's float width."""
    if isinstance(value, float) and not tensor_dtype.is_float:
        return float32
    if tensor_dtype == DType.bool and not isinstance(value, bool):
        return int32
    return tensor_dtype


class BinaryOps:
    """Arithmetic, comparisons, maximum/minimum/clip/pow."""

    # ---------------------------------------------------------------- plumbing
    def _operands(
        self: GraphTensor, other: Operand, op: str, float_only: bool = False
    ) -> tuple[GraphTensor, GraphTensor]:
        """Promote dtypes and broadcast both sides to one shape (NotImplemented for an
        operand that is neither a tensor nor a scalar, so Python can try the other side)."""
        from luminal.tensor import GraphTensor

        value = None
        if isinstance(other, GraphTensor):
            if other.graph is not self.graph:
                raise GraphError(f"{op}: operands belong to different graphs")
            dtype = promote(self.dtype, other.dtype)
            other_shape = other.view.shape
        else:
            value = python_scalar(other)
            if value is None:
                return NotImplemented  # type: ignore[return-value]
            dtype = _scalar_dtype(self.dtype, value)
            other_shape = ()
        if dtype == DType.bool:
            dtype = int32
        if float_only and not dtype.is_float:
            dtype = float32
        shape = broadcast_shapes(self.view.shape, other_shape, op)  # before adding nodes
        lhs = self.cast(dtype)
        rhs = other.cast(dtype) if value is None else self.graph.constant(value, dtype)
        return lhs.expand(shape), rhs.expand(shape)

    def _pair(
        self: GraphTensor, other: Operand, op: str, float_only: bool = False
    ) -> tuple[GraphTensor, GraphTensor]:
        """`_operands` for named methods: an unsupported operand is a TypeError."""
        operands = self._operands(other, op, float_only)
        if operands is NotImplemented:
            raise TypeError(f"{op}: cannot combine a tensor with {type(other).__name__} {other!r}")
        return operands

    def _binary(
        self: GraphTensor, other: Operand, op: ops.Op, name: str, reverse: bool = False
    ) -> GraphTensor:
        operands = self._operands(other, name)
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        if reverse:
            a, b = b, a
        return self.graph.add_node(op, [a, b])

    # ---------------------------------------------------------------- arithmetic
    def __add__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Add(), "add")

    def __radd__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Add(), "add", reverse=True)

    def __mul__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Mul(), "mul")

    def __rmul__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Mul(), "mul", reverse=True)

    def __neg__(self: GraphTensor) -> GraphTensor:
        if self.dtype == DType.bool:
            raise DTypeError("neg: cannot negate a bool tensor; use 1 - x or cast first")
        return self * -1

    def __sub__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "sub")
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        return a + b * -1

    def __rsub__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "sub")
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        return b + a * -1

    def __truediv__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "div", float_only=True)
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        return a * b.reciprocal()

    def __rtruediv__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "div", float_only=True)
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        return b * a.reciprocal()

    def __mod__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Mod(), "mod")

    def __rmod__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.Mod(), "mod", reverse=True)

    def __floordiv__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "floordiv")
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        return _floor_divide(*operands)

    def __rfloordiv__(self: GraphTensor, other: Operand) -> GraphTensor:
        operands = self._operands(other, "floordiv")
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        a, b = operands
        return _floor_divide(b, a)

    def __pow__(self: GraphTensor, exponent: Operand) -> GraphTensor:
        if not _is_operand(exponent):
            return NotImplemented  # type: ignore[return-value]
        return self.pow(exponent)

    def __rpow__(self: GraphTensor, base: Operand) -> GraphTensor:
        operands = self._operands(base, "pow")
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        exponent, base_tensor = operands
        return _tensor_pow(base_tensor, exponent)

    # ---------------------------------------------------------------- comparisons (0/1)
    def lt(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self < other else 0, in the promoted dtype."""
        a, b = self._pair(other, "lt")
        return self.graph.add_node(ops.LessThan(), [a, b])

    def gt(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self > other else 0."""
        a, b = self._pair(other, "gt")
        return self.graph.add_node(ops.LessThan(), [b, a])

    def le(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self <= other else 0 (0 where either side is NaN)."""
        return self._unless_nan(other, 1 - self.gt(other))

    def ge(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self >= other else 0 (0 where either side is NaN)."""
        return self._unless_nan(other, 1 - self.lt(other))

    def eq(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self == other else 0 (0 where either side is NaN)."""
        return self._unless_nan(other, 1 - (self.lt(other) + self.gt(other)))

    def ne(self: GraphTensor, other: Operand) -> GraphTensor:
        """1 where self != other else 0 (1 where either side is NaN)."""
        return 1 - self.eq(other)

    def _unless_nan(self: GraphTensor, other: Operand, result: GraphTensor) -> GraphTensor:
        """`result` (derived from LessThan, which says 0 for NaN) zeroed where an operand is
        NaN, as IEEE comparisons are; integers have no NaN and skip the check."""
        if not result.dtype.is_float:
            return result
        ordered = not_nan(self)
        scalar = python_scalar(other)
        if scalar is None:
            ordered = ordered * not_nan(other)
        elif scalar != scalar:  # a NaN scalar: nothing compares equal or ordered to it
            ordered = ordered * 0
        return result * ordered

    def _compare(self: GraphTensor, other: Operand, name: str) -> GraphTensor:
        """Operator form: NotImplemented for foreign operands, so Python raises TypeError."""
        if not _is_operand(other):
            return NotImplemented  # type: ignore[return-value]
        return getattr(self, name)(other)

    def __lt__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._compare(other, "lt")

    def __gt__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._compare(other, "gt")

    def __le__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._compare(other, "le")

    def __ge__(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._compare(other, "ge")

    # ---------------------------------------------------------------- elementwise extrema
    def maximum(self: GraphTensor, other: Operand) -> GraphTensor:
        """Elementwise max; exact for infinities (a max-reduction over a stacked pair)."""
        if _is_zero_scalar(other) and self.dtype != DType.bool:
            # the pair (x, 0) is one padded view: padding reads 0 (relu needs no Add)
            return self.unsqueeze(-1).pad([None] * self.ndim + [(0, 1)]).max(-1)
        a, b = self._pair(other, "maximum")
        return _stack_pair(a, b).max(-1)

    def minimum(self: GraphTensor, other: Operand) -> GraphTensor:
        """Elementwise min."""
        a, b = self._pair(other, "minimum")
        return -_stack_pair(-a, -b).max(-1)

    def clip(self: GraphTensor, low: Operand = None, high: Operand = None) -> GraphTensor:
        """Clamp to [low, high]; either bound may be None (torch.clamp: high wins when
        low > high)."""
        result = self
        if low is not None:
            result = result.maximum(low)
        if high is not None:
            result = result.minimum(high)
        return result

    clamp = clip

    def pow(self: GraphTensor, exponent: Operand) -> GraphTensor:
        """self ** exponent with PyTorch's results: integer scalar exponents multiply
        exactly; otherwise exp2(e * log2|x|) with the sign restored for negative bases
        and integral exponents (NaN for fractional ones), and x ** 0 == 1."""
        scalar = python_scalar(exponent)
        if scalar is not None and not isinstance(scalar, bool):
            result = _scalar_pow(self, scalar)
            if result is not None:
                return result
        base, power = self._pair(exponent, "pow")
        return _tensor_pow(base, power)


def _scalar_pow(base: GraphTensor, exponent: int | float) -> GraphTensor | None:
    """x ** c for a scalar c, using what is known about c at build time; None for an
    integer tensor with a large exponent (the general path rounds its result)."""
    keeps_int = isinstance(exponent, int) and not base.dtype.is_float
    if keeps_int and exponent < 0:
        raise DTypeError(
            f"pow: integers to negative integer powers are not allowed (as in PyTorch); "
            f"cast the {base.dtype.value} tensor of shape {base._shape_text()} to float first"
        )
    base = base.cast(int32 if keeps_int else base.dtype if base.dtype.is_float else float32)
    integral = float(exponent).is_integer()
    if integral and abs(exponent) <= _MAX_SQUARING_EXPONENT:
        n = int(exponent)
        if n == 0:
            return base.graph.constant(1, base.dtype).expand(base.view.shape)
        result = _power_by_squaring(base, abs(n))
        return result.reciprocal() if n < 0 else result
    if keeps_int:
        return None
    if exponent == 0.5:
        return base.sqrt()
    if not integral:  # a negative base gives NaN through log2, as in PyTorch
        return (base.log2() * exponent).exp2()
    magnitude = (base.abs().log2() * exponent).exp2()
    return magnitude * (1 - 2 * base.lt(0)) if int(exponent) % 2 else magnitude


def _tensor_pow(base: GraphTensor, exponent: GraphTensor) -> GraphTensor:
    """base ** exponent for operands already promoted and broadcast to one shape. Integer
    results are computed in float32 and rounded (ties toward zero, so 2 ** -1 == 0)."""
    if base.dtype.is_float:
        magnitude, sign = _float_pow(base, exponent)
        return magnitude * sign
    magnitude, sign = _float_pow(base.cast(float32), exponent.cast(float32))
    rounded = (magnitude - 0.5) + ((0.5 - magnitude) % 1)  # ceil(m - 0.5)
    return (rounded * sign).cast(base.dtype)


def _float_pow(base: GraphTensor, exponent: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
    """(|base| ** exponent, sign): the magnitude through exp2/log2 and the sign -1 for a
    negative base raised to an odd integral power. A negative base with a fractional
    exponent keeps its sign inside log2, which gives NaN as PyTorch does."""
    integral = (exponent % 1).eq(0)
    flip = base.lt(0) * integral
    magnitude_base = base * (1 - 2 * flip)
    magnitude_base = magnitude_base + exponent.eq(0) * (1 - magnitude_base)  # 0 ** 0 == 1
    magnitude = (exponent * magnitude_base.log2()).exp2()
    odd = (exponent % 2).eq(1)
    return magnitude, 1 - 2 * flip * odd


def _floor_divide(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """floor(a / b) (torch.floor_divide, Python's //). Floats divide the exact multiple
    a - a % b, so the quotient only needs rounding to the nearest integer."""
    if not a.dtype.is_float:
        return _floor_divide_int(a, b)
    quotient = (a - a % b) * b.reciprocal()
    return quotient - quotient % 1 + (quotient % 1).ge(0.5)  # round the exact quotient


# Added before truncating a quotient known to lie within 2**9 + 2 of zero: the sum is
# positive, so truncation is floor, and half of it rounds to the nearest integer.
_ROUNDING_OFFSET = 1024


def _floor_divide_int(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """Exact int32 floor division for the whole range, built from primitives (there is no
    integer divide): a float32 estimate, one exact integer correction step, then the
    exact floor modulo decides between the two integers left. numpy's results where C
    would trap: x // 0 == 0 and INT_MIN // -1 == INT_MIN (the quotient 2**31 wraps).

    Why it is exact (q = floor(a / b), int32 `+ *` wrap modulo 2**32):
    - `first` = trunc(fl(a) * fl(1 / fl(b))): the product is within 2**-22 relative, so
      |a / b - first| < 2**9 + 1 (2**31 itself casts to INT_MIN, equal modulo 2**32).
    - `residual` = a - first * b is below 2**31 in magnitude, so the wrapped value is exact,
      and residual / b lies within 2**9 + 2 of zero; its float32 estimate is within 2**-12,
      so `second` rounds it to within 1/2 + 2**-12.
    - first + second is then q or q + 1: a - (q + 1) * b = r - b differs from the floor
      modulo r = a % b (exact, the Mod primitive) modulo 2**32, a - q * b equals it.
    """
    zero = b.eq(0)  # x // 0 is 0, as in numpy: divide by 1 there, then mask
    divisor = b + zero
    inverse = divisor.cast(float32).reciprocal()
    first = (a.cast(float32) * inverse).cast(a.dtype)
    residual = a - first * divisor
    offset = residual.cast(float32) * inverse + (_ROUNDING_OFFSET + 0.5)
    second = offset.cast(a.dtype) - _ROUNDING_OFFSET
    left = residual - second * divisor  # a - (first + second) * b
    remainder = a % divisor
    overshoot = left.lt(remainder) + left.gt(remainder)  # 1 when first + second == q + 1
    return (first + second - overshoot) * (1 - zero)


def _power_by_squaring(base: GraphTensor, n: int) -> GraphTensor:
    result = None
    square = base
    while n:
        if n & 1:
            result = square if result is None else result * square
        n >>= 1
        if n:
            square = square * square
    return result  # type: ignore[return-value]


def _is_zero_scalar(value: Operand) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def _stack_pair(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """(..., 2) holding a and b: two padded views added (padding reads 0)."""
    a2 = a.unsqueeze(-1).pad([None] * a.ndim + [(0, 1)])
    b2 = b.unsqueeze(-1).pad([None] * b.ndim + [(1, 0)])
    return a2 + b2

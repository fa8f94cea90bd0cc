"""Binary ops with numpy broadcasting, dtype promotion and Python scalars on either side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from luminal import ops
from luminal.dtype import DType, float32, int32, promote
from luminal.errors import DTypeError, ShapeError
from luminal.shape.expr import Expr

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Operand = Any  # GraphTensor | int | float | bool


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


class BinaryOps:
    """Arithmetic, comparisons, maximum/minimum/clip/pow."""

    # ---------------------------------------------------------------- plumbing
    def _scalar(self: GraphTensor, value: Operand, dtype: DType) -> GraphTensor:
        return self.graph.constant(value, dtype)

    def _operands(
        self: GraphTensor, other: Operand, op: str, float_only: bool = False
    ) -> tuple[GraphTensor, GraphTensor]:
        """Promote dtypes and broadcast both sides to one shape."""
        from luminal.tensor import GraphTensor

        if isinstance(other, GraphTensor):
            if other.graph is not self.graph:
                raise ShapeError(f"{op}: operands belong to different graphs")
            dtype = promote(self.dtype, other.dtype)
            rhs = other
        elif isinstance(other, bool | int | float) or hasattr(other, "dtype"):
            try:
                value = float(other) if not isinstance(other, bool | int) else other
            except TypeError:
                raise DTypeError(f"{op}: cannot combine a tensor with {other!r}") from None
            dtype = self.dtype
            if isinstance(value, float) and not dtype.is_float:
                dtype = float32
            if dtype == DType.bool:
                dtype = int32 if isinstance(value, int) else float32
            rhs = None
        else:
            return NotImplemented  # type: ignore[return-value]
        if dtype == DType.bool:
            dtype = int32
        if float_only and not dtype.is_float:
            dtype = float32
        lhs = self.cast(dtype)
        if rhs is None:
            rhs = self._scalar(value, dtype)
        else:
            rhs = rhs.cast(dtype)
        shape = broadcast_shapes(lhs.view.shape, rhs.view.shape, op)
        return lhs.expand(shape), rhs.expand(shape)

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

    def __pow__(self: GraphTensor, exponent: Operand) -> GraphTensor:
        return self.pow(exponent)

    def __rpow__(self: GraphTensor, base: Operand) -> GraphTensor:
        operands = self._operands(base, "pow", float_only=True)
        if operands is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        exponent, base_tensor = operands
        return base_tensor.pow(exponent)

    # ---------------------------------------------------------------- comparisons (0/1)
    def lt(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.LessThan(), "lt")

    def gt(self: GraphTensor, other: Operand) -> GraphTensor:
        return self._binary(other, ops.LessThan(), "gt", reverse=True)

    def le(self: GraphTensor, other: Operand) -> GraphTensor:
        return 1 - self.gt(other)

    def ge(self: GraphTensor, other: Operand) -> GraphTensor:
        return 1 - self.lt(other)

    def ne(self: GraphTensor, other: Operand) -> GraphTensor:
        return self.lt(other) + self.gt(other)

    def eq(self: GraphTensor, other: Operand) -> GraphTensor:
        return 1 - self.ne(other)

    __lt__ = lt
    __gt__ = gt
    __le__ = le
    __ge__ = ge

    # ---------------------------------------------------------------- elementwise extrema
    def maximum(self: GraphTensor, other: Operand) -> GraphTensor:
        """Elementwise max; exact for infinities (a max-reduction over a stacked pair)."""
        a, b = self._operands(other, "maximum")
        return _stack_pair(a, b).max(-1)

    def minimum(self: GraphTensor, other: Operand) -> GraphTensor:
        """Elementwise min."""
        a, b = self._operands(other, "minimum")
        return -_stack_pair(-a, -b).max(-1)

    def clip(self: GraphTensor, low: Operand = None, high: Operand = None) -> GraphTensor:
        """Clamp to [low, high]; either bound may be None."""
        result = self
        if low is not None:
            result = result.maximum(low)
        if high is not None:
            result = result.minimum(high)
        return result

    clamp = clip

    def pow(self: GraphTensor, exponent: Operand) -> GraphTensor:
        """self ** exponent. Small integer scalar exponents multiply exactly (negative bases
        allowed); otherwise exp2(e * log2(x)), NaN for negative bases like PyTorch."""
        from luminal.tensor import GraphTensor

        if isinstance(exponent, int | float) and not isinstance(exponent, bool):
            if float(exponent).is_integer() and abs(exponent) <= 16:
                n = int(exponent)
                base = self if self.dtype.is_float else self.cast(float32)
                if n == 0:
                    return base * 0 + 1
                result = _power_by_squaring(base, abs(n))
                return result.reciprocal() if n < 0 else result
            if exponent == 0.5:
                return self.sqrt()
        if not isinstance(exponent, GraphTensor):
            a, e = self._operands(exponent, "pow", float_only=True)
        else:
            a, e = self._operands(exponent, "pow", float_only=True)
        return (e * a.log2()).exp2()


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


def _stack_pair(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """(..., 2) holding a and b: two padded views added (padding reads 0)."""
    a2 = a.unsqueeze(-1).pad([None] * a.ndim + [(0, 1)])
    b2 = b.unsqueeze(-1).pad([None] * b.ndim + [(1, 0)])
    return a2 + b2

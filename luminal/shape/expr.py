"""Symbolic integer expressions for shapes, strides and indices.

An `Expr` is an immutable polynomial with integer coefficients over *atoms*: named
variables and the non-polynomial operations (`//`, `%`, `min`, `max`, `<`, `>=`,
`and`, `or`). Keeping the polynomial part in a canonical form (sorted monomials,
merged coefficients) makes structural equality meaningful: `x*2 + x == 3*x`, and
`(a*b) % b` simplifies to 0, which is what view arithmetic needs to decide whether
two strides line up.

Conventions (documented in docs/symbolic-shapes.md):
- variables are non-negative integers (dimension sizes and indices);
- `//` and `%` are floor division and floor modulo, and a divisor is assumed positive;
- comparisons and `and`/`or` evaluate to 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Union

from luminal.errors import ShapeError

Term = tuple[tuple["Atom", ...], int]
ExprLike = Union["Expr", int, str]

_INF = math.inf


class Atom:
    """A non-polynomial leaf: a variable or an operation on expressions."""

    __slots__ = ("op", "args", "upper", "key", "_hash")

    def __init__(self, op: str, args: tuple, upper: int | None = None) -> None:
        self.op = op
        self.args = args
        self.upper = upper  # inclusive upper bound, variables only
        if op == "var":
            self.key = args[0]
        else:
            self.key = f"{op}({', '.join(str(a) for a in args)})"
        self._hash = hash((op, self.key))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and self.op == other.op and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return self.key


class Expr:
    """A canonical symbolic integer expression. Build with `sym`, `var` or operators."""

    __slots__ = ("terms", "_hash", "_str")

    def __init__(self, terms: tuple[Term, ...]) -> None:
        self.terms = terms
        self._hash: int | None = None
        self._str: str | None = None

    # ---------------------------------------------------------------- queries
    @property
    def is_const(self) -> bool:
        return not self.terms or (len(self.terms) == 1 and not self.terms[0][0])

    def as_int(self) -> int | None:
        """The value if this expression is a constant, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and not self.terms[0][0]:
            return self.terms[0][1]
        return None

    def __int__(self) -> int:
        value = self.as_int()
        if value is None:
            raise ShapeError(f"expression {self} is symbolic; it has no integer value yet")
        return value

    __index__ = __int__

    def variables(self) -> set[str]:
        names: set[str] = set()
        for mono, _ in self.terms:
            for atom in mono:
                if atom.op == "var":
                    names.add(atom.args[0])
                else:
                    for arg in atom.args:
                        names |= arg.variables()
        return names

    @property
    def is_boolean(self) -> bool:
        """True when the value is known to be 0 or 1."""
        value = self.as_int()
        if value is not None:
            return value in (0, 1)
        return (
            len(self.terms) == 1
            and self.terms[0][1] == 1
            and len(self.terms[0][0]) == 1
            and self.terms[0][0][0].op in ("lt", "ge", "and", "or")
        )

    def bounds(self) -> tuple[float, float]:
        """Inclusive interval (lo, hi) containing every value; infinities when unknown."""
        lo_total: float = 0
        hi_total: float = 0
        for mono, coef in self.terms:
            lo, hi = 1.0, 1.0
            for atom in mono:
                lo, hi = _interval_mul((lo, hi), _atom_bounds(atom))
            lo, hi = _interval_mul((lo, hi), (coef, coef))
            lo_total += lo
            hi_total += hi
        return lo_total, hi_total

    # ---------------------------------------------------------------- equality
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.as_int() == other
        if isinstance(other, Expr):
            return self.terms == other.terms
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        if self._hash is None:
            value = self.as_int()
            self._hash = hash(value) if value is not None else hash(self.terms)
        return self._hash

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, other: ExprLike) -> Expr:
        return _add(self, sym(other))

    def __radd__(self, other: ExprLike) -> Expr:
        return _add(sym(other), self)

    def __sub__(self, other: ExprLike) -> Expr:
        return _add(self, _scale(sym(other), -1))

    def __rsub__(self, other: ExprLike) -> Expr:
        return _add(sym(other), _scale(self, -1))

    def __neg__(self) -> Expr:
        return _scale(self, -1)

    def __mul__(self, other: ExprLike) -> Expr:
        return _mul(self, sym(other))

    def __rmul__(self, other: ExprLike) -> Expr:
        return _mul(sym(other), self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return floordiv(self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return floordiv(other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return mod(self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return mod(other, self)

    def ceildiv(self, other: ExprLike) -> Expr:
        return ceildiv(self, other)

    def min(self, other: ExprLike) -> Expr:
        return minimum(self, other)

    def max(self, other: ExprLike) -> Expr:
        return maximum(self, other)

    def lt(self, other: ExprLike) -> Expr:
        return less_than(self, other)

    def ge(self, other: ExprLike) -> Expr:
        return greater_equal(self, other)

    def and_(self, other: ExprLike) -> Expr:
        return logical_and(self, other)

    def or_(self, other: ExprLike) -> Expr:
        return logical_or(self, other)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, env: Mapping[str, int] | None = None) -> int:
        """The integer value given values for every variable in `env`."""
        value = self.as_int()
        if value is not None:
            return value
        env = env or {}
        total = 0
        for mono, coef in self.terms:
            product = coef
            for atom in mono:
                product *= _evaluate_atom(atom, env)
            total += product
        return total

    def substitute(self, mapping: Mapping[str, ExprLike]) -> Expr:
        """Replace variables by expressions, simplifying the result."""
        if not mapping:
            return self
        replacement = {name: sym(value) for name, value in mapping.items()}
        return self._substitute(replacement)

    def _substitute(self, mapping: Mapping[str, Expr]) -> Expr:
        total = ZERO
        for mono, coef in self.terms:
            product = const(coef)
            for atom in mono:
                product = _mul(product, _substitute_atom(atom, mapping))
            total = _add(total, product)
        return total

    # ---------------------------------------------------------------- rendering
    def __str__(self) -> str:
        if self._str is None:
            self._str = _render(self, c_syntax=False)
        return self._str

    def __repr__(self) -> str:
        return f"Expr({self})"

    def to_c(self) -> str:
        """C source for this expression (`/` and `%` match floor semantics for the
        non-negative operands that shapes and indices have)."""
        return _render(self, c_syntax=True)


# ---------------------------------------------------------------------------
# construction
# ---------------------------------------------------------------------------

_CONST_CACHE: dict[int, Expr] = {}


def const(value: int) -> Expr:
    """The constant expression `value`."""
    cached = _CONST_CACHE.get(value)
    if cached is not None:
        return cached
    expr = Expr((((), value),)) if value != 0 else Expr(())
    if -64 <= value <= 4096:
        _CONST_CACHE[value] = expr
    return expr


def var(name: str, upper: int | None = None) -> Expr:
    """A named non-negative integer variable, optionally with an inclusive upper bound."""
    if not name.isidentifier():
        raise ShapeError(f"symbolic dimension name {name!r} must be an identifier")
    return Expr((((Atom("var", (name,), upper),), 1),))


def sym(value: ExprLike) -> Expr:
    """Coerce an int, a variable name or an Expr to an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return const(int(value))
    if isinstance(value, int):
        return const(value)
    if isinstance(value, str):
        return var(value)
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return const(int(value))
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    raise ShapeError(f"cannot use {value!r} ({type(value).__name__}) as a dimension")


ZERO = Expr(())
ONE = Expr((((), 1),))


def _mono_key(mono: tuple[Atom, ...]) -> tuple:
    return (len(mono) == 0, tuple(a.key for a in mono))


def _from_dict(coefs: dict[tuple[Atom, ...], int]) -> Expr:
    items = [(mono, coef) for mono, coef in coefs.items() if coef != 0]
    if not items:
        return ZERO
    items.sort(key=lambda item: _mono_key(item[0]))
    return Expr(tuple(items))


def _add(a: Expr, b: Expr) -> Expr:
    if not a.terms:
        return b
    if not b.terms:
        return a
    coefs: dict[tuple[Atom, ...], int] = dict(a.terms)
    for mono, coef in b.terms:
        coefs[mono] = coefs.get(mono, 0) + coef
    return _from_dict(coefs)


def _scale(a: Expr, factor: int) -> Expr:
    if factor == 0:
        return ZERO
    if factor == 1:
        return a
    return Expr(tuple((mono, coef * factor) for mono, coef in a.terms))


def _mul(a: Expr, b: Expr) -> Expr:
    value = a.as_int()
    if value is not None:
        return _scale(b, value)
    value = b.as_int()
    if value is not None:
        return _scale(a, value)
    coefs: dict[tuple[Atom, ...], int] = {}
    for mono_a, coef_a in a.terms:
        for mono_b, coef_b in b.terms:
            mono = tuple(sorted(mono_a + mono_b, key=lambda atom: atom.key))
            coefs[mono] = coefs.get(mono, 0) + coef_a * coef_b
    return _from_dict(coefs)


def _atom_expr(op: str, *args: Expr) -> Expr:
    return Expr((((Atom(op, args),), 1),))


def _content(a: Expr) -> int:
    """Greatest common divisor of all coefficients (0 for the zero expression)."""
    g = 0
    for _, coef in a.terms:
        g = math.gcd(g, coef)
    return g


def _split_by_divisor(a: Expr, divisor: int) -> tuple[Expr, Expr]:
    """a = divisor * quotient + rest, putting each term whose coefficient divides."""
    quotient: dict[tuple[Atom, ...], int] = {}
    rest: dict[tuple[Atom, ...], int] = {}
    for mono, coef in a.terms:
        if coef % divisor == 0:
            quotient[mono] = coef // divisor
        else:
            rest[mono] = coef
    return _from_dict(quotient), _from_dict(rest)


def _divide_monomial(a: Expr, mono: tuple[Atom, ...]) -> Expr | None:
    """a / mono when every term of a contains the monomial, else None."""
    result: dict[tuple[Atom, ...], int] = {}
    for term_mono, coef in a.terms:
        remaining = list(term_mono)
        for atom in mono:
            if atom in remaining:
                remaining.remove(atom)
            else:
                return None
        result[tuple(remaining)] = coef
    return _from_dict(result)


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    """Floor division `a // b` (b > 0)."""
    a, b = sym(a), sym(b)
    a_value, b_value = a.as_int(), b.as_int()
    if b_value is not None:
        if b_value == 0:
            raise ShapeError(f"division of {a} by zero")
        if b_value == 1:
            return a
        if a_value is not None:
            return const(a_value // b_value)
        if b_value < 0:
            return _atom_expr("floordiv", a, b)
        g = math.gcd(_content(a), b_value)
        if g > 1:
            return floordiv(_scale_exact(a, g), b_value // g)
        quotient, rest = _split_by_divisor(a, b_value)
        if quotient.terms:
            return _add(quotient, floordiv(rest, b_value))
        lo, hi = a.bounds()
        if 0 <= lo and hi < b_value:
            return ZERO
        inner = _single_atom(a, "floordiv")
        if inner is not None:
            inner_b = inner.args[1].as_int()
            if inner_b is not None and inner_b > 0:
                return floordiv(inner.args[0], inner_b * b_value)
        return _atom_expr("floordiv", a, b)
    if a_value == 0:
        return ZERO
    if a == b:
        return ONE
    if len(b.terms) == 1 and b.terms[0][1] == 1:
        divided = _divide_monomial(a, b.terms[0][0])
        if divided is not None:
            return divided
    return _atom_expr("floordiv", a, b)


def _scale_exact(a: Expr, divisor: int) -> Expr:
    return Expr(tuple((mono, coef // divisor) for mono, coef in a.terms))


def _single_atom(a: Expr, op: str) -> Atom | None:
    if len(a.terms) == 1 and a.terms[0][1] == 1 and len(a.terms[0][0]) == 1:
        atom = a.terms[0][0][0]
        if atom.op == op:
            return atom
    return None


def mod(a: ExprLike, b: ExprLike) -> Expr:
    """Floor modulo `a % b` (b > 0)."""
    a, b = sym(a), sym(b)
    a_value, b_value = a.as_int(), b.as_int()
    if b_value is not None:
        if b_value == 0:
            raise ShapeError(f"modulo of {a} by zero")
        if b_value == 1:
            return ZERO
        if a_value is not None:
            return const(a_value % b_value)
        if b_value < 0:
            return _atom_expr("mod", a, b)
        _, rest = _split_by_divisor(a, b_value)
        if not rest.terms:
            return ZERO
        lo, hi = rest.bounds()
        if 0 <= lo and hi < b_value:
            return rest
        inner = _single_atom(rest, "mod")
        if inner is not None:
            inner_b = inner.args[1].as_int()
            if inner_b is not None and inner_b > 0 and inner_b % b_value == 0:
                return mod(inner.args[0], b_value)
        return _atom_expr("mod", rest, b)
    if a_value == 0 or a == b:
        return ZERO
    if len(b.terms) == 1 and b.terms[0][1] == 1:
        mono = b.terms[0][0]
        kept: dict[tuple[Atom, ...], int] = {}
        for term_mono, coef in a.terms:
            if _divide_monomial(Expr(((term_mono, 1),)), mono) is None:
                kept[term_mono] = coef
        rest = _from_dict(kept)
        if not rest.terms:
            return ZERO
        if rest is not a and rest != a:
            return mod(rest, b)
    return _atom_expr("mod", a, b)


def ceildiv(a: ExprLike, b: ExprLike) -> Expr:
    """Ceiling division, `(a + b - 1) // b` for b > 0."""
    a, b = sym(a), sym(b)
    return floordiv(a + b - 1, b)


def _ordered(a: Expr, b: Expr) -> int | None:
    """-1 if a <= b always, 1 if a >= b always, None when unknown."""
    lo, hi = (a - b).bounds()
    if hi <= 0:
        return -1
    if lo >= 0:
        return 1
    return None


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = sym(a), sym(b)
    if a == b:
        return a
    order = _ordered(a, b)
    if order is not None:
        return a if order < 0 else b
    first, second = sorted((a, b), key=str)
    return _atom_expr("min", first, second)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = sym(a), sym(b)
    if a == b:
        return a
    order = _ordered(a, b)
    if order is not None:
        return b if order < 0 else a
    first, second = sorted((a, b), key=str)
    return _atom_expr("max", first, second)


def less_than(a: ExprLike, b: ExprLike) -> Expr:
    """1 if a < b else 0."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if hi < 0:
        return ONE
    if lo >= 0:
        return ZERO
    return _atom_expr("lt", a, b)


def greater_equal(a: ExprLike, b: ExprLike) -> Expr:
    """1 if a >= b else 0."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if lo >= 0:
        return ONE
    if hi < 0:
        return ZERO
    return _atom_expr("ge", a, b)


def logical_and(a: ExprLike, b: ExprLike) -> Expr:
    """1 if both are non-zero else 0."""
    a, b = sym(a), sym(b)
    for x, y in ((a, b), (b, a)):
        value = x.as_int()
        if value is not None:
            if value == 0:
                return ZERO
            if y.is_boolean:
                return y
            return _atom_expr("and", ONE, y)
    if a == b and a.is_boolean:
        return a
    first, second = sorted((a, b), key=str)
    return _atom_expr("and", first, second)


def logical_or(a: ExprLike, b: ExprLike) -> Expr:
    """1 if either is non-zero else 0."""
    a, b = sym(a), sym(b)
    for x, y in ((a, b), (b, a)):
        value = x.as_int()
        if value is not None:
            if value != 0:
                return ONE
            if y.is_boolean:
                return y
            return _atom_expr("or", ZERO, y)
    if a == b and a.is_boolean:
        return a
    first, second = sorted((a, b), key=str)
    return _atom_expr("or", first, second)


def product(values: Iterable[ExprLike]) -> Expr:
    result = ONE
    for value in values:
        result = result * sym(value)
    return result


_BUILDERS = {
    "floordiv": floordiv,
    "mod": mod,
    "min": minimum,
    "max": maximum,
    "lt": less_than,
    "ge": greater_equal,
    "and": logical_and,
    "or": logical_or,
}


def _substitute_atom(atom: Atom, mapping: Mapping[str, Expr]) -> Expr:
    if atom.op == "var":
        replacement = mapping.get(atom.args[0])
        return replacement if replacement is not None else Expr((((atom,), 1),))
    return _BUILDERS[atom.op](*(arg._substitute(mapping) for arg in atom.args))


def _evaluate_atom(atom: Atom, env: Mapping[str, int]) -> int:
    op = atom.op
    if op == "var":
        name = atom.args[0]
        try:
            return int(env[name])
        except KeyError:
            raise ShapeError(
                f"symbolic dimension {name!r} has no value; set it with "
                f"Graph.set_dim({name!r}, size) or by setting an input that uses it"
            ) from None
    a = atom.args[0].evaluate(env)
    b = atom.args[1].evaluate(env)
    if op == "floordiv":
        if b == 0:
            raise ShapeError(f"division by zero evaluating {atom.key}")
        return a // b
    if op == "mod":
        if b == 0:
            raise ShapeError(f"modulo by zero evaluating {atom.key}")
        return a % b
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if op == "lt":
        return int(a < b)
    if op == "ge":
        return int(a >= b)
    if op == "and":
        return int(bool(a) and bool(b))
    if op == "or":
        return int(bool(a) or bool(b))
    raise AssertionError(f"unknown atom {op}")


def _interval_mul(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    products = []
    for x in a:
        for y in b:
            if (x == 0 and math.isinf(y)) or (y == 0 and math.isinf(x)):
                products.append(0.0)
            else:
                products.append(x * y)
    return min(products), max(products)


def _atom_bounds(atom: Atom) -> tuple[float, float]:
    op = atom.op
    if op == "var":
        return 0, (atom.upper if atom.upper is not None else _INF)
    if op in ("lt", "ge", "and", "or"):
        return 0, 1
    a_lo, a_hi = atom.args[0].bounds()
    b_lo, b_hi = atom.args[1].bounds()
    if op == "min":
        return min(a_lo, b_lo), min(a_hi, b_hi)
    if op == "max":
        return max(a_lo, b_lo), max(a_hi, b_hi)
    if b_lo <= 0:
        return -_INF, _INF
    if op == "mod":
        if a_lo >= 0 and a_hi < b_lo:
            return a_lo, a_hi
        return 0, b_hi - 1
    # floordiv with a positive divisor
    candidates = [
        math.floor(x / y) if not (math.isinf(x) or math.isinf(y)) else x / y
        for x in (a_lo, a_hi)
        for y in (b_lo, b_hi)
    ]
    return min(candidates), max(candidates)


def _render_atom(atom: Atom, c_syntax: bool) -> str:
    if atom.op == "var":
        return atom.args[0]
    a = _render(atom.args[0], c_syntax)
    b = _render(atom.args[1], c_syntax)
    if atom.op == "floordiv":
        return f"({a} / {b})" if c_syntax else f"({a} // {b})"
    if atom.op == "mod":
        return f"({a} % {b})"
    if atom.op in ("min", "max"):
        if c_syntax:
            sign = "<" if atom.op == "min" else ">"
            return f"(({a}) {sign} ({b}) ? ({a}) : ({b}))"
        return f"{atom.op}({a}, {b})"
    symbol = {"lt": "<", "ge": ">=", "and": "&&" if c_syntax else "and"}.get(atom.op)
    if symbol is None:
        symbol = "||" if c_syntax else "or"
    return f"({a} {symbol} {b})"


def _render(expr: Expr, c_syntax: bool) -> str:
    if not expr.terms:
        return "0"
    parts: list[str] = []
    for mono, coef in expr.terms:
        factors = [_render_atom(atom, c_syntax) for atom in mono]
        if not factors:
            text = str(abs(coef))
        elif abs(coef) == 1:
            text = "*".join(factors)
        else:
            text = "*".join(factors) + f"*{abs(coef)}"
        sign = "-" if coef < 0 else "+"
        parts.append((sign, text))
    first_sign, first_text = parts[0]
    out = ("-" if first_sign == "-" else "") + first_text
    for sign, text in parts[1:]:
        out += f" {sign} {text}"
    return f"({out})" if len(parts) > 1 else out

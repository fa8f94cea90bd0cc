"""Symbolic integer expressions for shapes, strides and indices.

An `Expr` is an immutable polynomial with integer coefficients over *atoms*: named
variables and the non-polynomial operations (`//`, `%`, `min`, `max`, `<`, `>=`,
`and`, `or`). Keeping the polynomial part in a canonical form (sorted monomials,
merged coefficients) makes structural equality meaningful: `x*2 + x == 3*x`, and
`(a*b) % b` simplifies to 0, which is what view arithmetic needs to decide whether
two strides line up.

Conventions (documented in docs/symbolic-shapes.md):
- variables are non-negative integers (dimension sizes and indices);
- `//` and `%` are floor division and floor modulo; a symbolic divisor is assumed
  positive (a negative constant divisor is allowed and folded away);
- comparisons and `and`/`or` evaluate to 0 or 1.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Union

from luminal.errors import ShapeError
from luminal.shape.atoms import BOOLEAN_OPS, Interval, atom_bounds, evaluate_atom, interval_mul
from luminal.shape.atoms import render as _render

Term = tuple[tuple["Atom", ...], int]
ExprLike = Union["Expr", int, str]


class Atom:
    """A non-polynomial leaf: a variable or an operation on expressions."""

    __slots__ = ("op", "args", "upper", "key", "_hash")

    def __init__(self, op: str, args: tuple, upper: int | None = None) -> None:
        self.op = op
        self.args = args
        self.upper = upper  # inclusive upper bound, variables only
        if op == "var":
            self.key = args[0]
        else:  # fully parenthesised, so distinct trees get distinct keys
            self.key = f"{op}({', '.join(_render(a, c_syntax=False) for a in args)})"
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
        return _single_atom(self) is not None and _single_atom(self).op in BOOLEAN_OPS

    def bounds(self) -> Interval:
        """Inclusive interval (lo, hi) containing every value; infinities when unknown."""
        lo_total: float = 0
        hi_total: float = 0
        for mono, coef in self.terms:
            interval: Interval = (coef, coef)
            for atom in mono:
                interval = interval_mul(interval, atom_bounds(atom))
            lo_total += interval[0]
            hi_total += interval[1]
        return lo_total, hi_total

    # ---------------------------------------------------------------- equality
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.as_int() == other
        if isinstance(other, Expr):
            return self.terms == other.terms
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            value = self.as_int()
            self._hash = hash(value) if value is not None else hash(self.terms)
        return self._hash

    def __deepcopy__(self, memo: dict) -> Expr:
        """Expressions are immutable: a copied graph shares them (copying a graph of
        25,000 nodes for verification spent seconds rebuilding its dims and strides)."""
        return self

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, other: ExprLike) -> Expr:
        return _add(self, sym(other))

    def __sub__(self, other: ExprLike) -> Expr:
        return _add(self, _scale(sym(other), -1))

    def __rsub__(self, other: ExprLike) -> Expr:
        return _add(sym(other), _scale(self, -1))

    __radd__ = __add__  # canonical sums and products do not depend on operand order

    def __neg__(self) -> Expr:
        return _scale(self, -1)

    def __mul__(self, other: ExprLike) -> Expr:
        return _mul(self, sym(other))

    __rmul__ = __mul__

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
            term = coef
            for atom in mono:
                term *= evaluate_atom(atom, env)
            total += term
        return total

    def substitute(self, mapping: Mapping[str, ExprLike]) -> Expr:
        """Replace variables (simultaneously) by expressions, simplifying the result."""
        if not mapping:
            return self
        replacement = {name: sym(value) for name, value in mapping.items()}
        return self._substitute(replacement)

    def _substitute(self, mapping: Mapping[str, Expr]) -> Expr:
        total = ZERO
        for mono, coef in self.terms:
            term = const(coef)
            for atom in mono:
                term = _mul(term, _substitute_atom(atom, mapping))
            total = _add(total, term)
        return total

    # ---------------------------------------------------------------- rendering
    def __str__(self) -> str:
        if self._str is None:
            self._str = _render(self, c_syntax=False, top=True)
        return self._str

    def __repr__(self) -> str:
        # shapes print as users write them: (batch, 3), not (Expr(batch), 3)
        return str(self)

    def to_c(self, names: Mapping[str, str] | None = None) -> str:
        """C source for this expression, fully parenthesised, over `long long` variables
        (renamed by `names` where given). `/` and `%` keep floor semantics: they are plain
        C operators where the numerator is provably non-negative (shapes and indices) and
        guarded otherwise."""
        return _render(self, c_syntax=True, names=names)


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
    if not isinstance(name, str) or not name.isidentifier():
        raise ShapeError(f"symbolic dimension name {name!r} must be an identifier")
    return Expr((((Atom("var", (name,), upper),), 1),))


def sym(value: ExprLike) -> Expr:
    """Coerce an int (numpy ints included), a variable name or an Expr to an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, numbers.Integral):
        return const(int(value))
    if isinstance(value, str):
        return var(value)
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


def _single_atom(a: Expr, op: str | None = None) -> Atom | None:
    """The atom when `a` is exactly one atom (of kind `op` if given), else None."""
    if len(a.terms) == 1 and a.terms[0][1] == 1 and len(a.terms[0][0]) == 1:
        atom = a.terms[0][0][0]
        if op is None or atom.op == op:
            return atom
    return None


def _content(a: Expr) -> int:
    """Greatest common divisor of all coefficients (0 for the zero expression)."""
    g = 0
    for _, coef in a.terms:
        g = math.gcd(g, coef)
    return g


def _scale_exact(a: Expr, divisor: int) -> Expr:
    return Expr(tuple((mono, coef // divisor) for mono, coef in a.terms))


def _split_by_constant(a: Expr, divisor: int, reduce_all: bool) -> tuple[Expr, Expr]:
    """a = divisor * quotient + rest exactly. Divisible terms and the constant go to the
    quotient; with `reduce_all` (for modulo) every coefficient is reduced into
    [0, divisor), which keeps `a % d` canonical."""
    quotient: dict[tuple[Atom, ...], int] = {}
    rest: dict[tuple[Atom, ...], int] = {}
    for mono, coef in a.terms:
        if coef % divisor == 0 or reduce_all or not mono:
            quotient[mono] = coef // divisor
            if coef % divisor:
                rest[mono] = coef % divisor
        else:
            rest[mono] = coef
    return _from_dict(quotient), _from_dict(rest)


def _split_small(a: Expr, divisor: int) -> tuple[int, Expr, Expr] | None:
    """(k, big, small) with a == k * big + small, k > 1 a divisor of `divisor` and
    0 <= small < k (by bounds), or None. Then a // divisor == big // (divisor / k): the
    index of a 2-wide window row, (x + 28 * y) // 56 for x < 28, is y // 2, which keeps
    a pooling gradient's loads affine in x."""
    factors = {math.gcd(coef, divisor) for mono, coef in a.terms if mono} - {1}
    for k in sorted(factors, reverse=True):
        big: dict[tuple[Atom, ...], int] = {}
        small: dict[tuple[Atom, ...], int] = {}
        for mono, coef in a.terms:
            if mono and coef % k == 0:
                big[mono] = coef // k
            else:
                small[mono] = coef
        small_part = _from_dict(small)
        lo, hi = small_part.bounds()
        if lo >= 0 and hi < k:
            return k, _from_dict(big), small_part
    return None


def _split_by_term(a: Expr, divisor: Expr) -> tuple[Expr, Expr]:
    """a = divisor * quotient + rest exactly, for a single-term divisor `k*m`: the terms
    of `a` that are multiples of it go to the quotient."""
    ((mono, k),) = divisor.terms
    quotient: dict[tuple[Atom, ...], int] = {}
    rest: dict[tuple[Atom, ...], int] = {}
    for term_mono, coef in a.terms:
        remaining = list(term_mono)
        for atom in mono:
            if atom not in remaining:
                break
            remaining.remove(atom)
        else:
            if coef % k == 0:
                quotient[tuple(remaining)] = coef // k
                continue
        rest[term_mono] = coef
    return _from_dict(quotient), _from_dict(rest)


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    """Floor division `a // b`."""
    a, b = sym(a), sym(b)
    b_value = b.as_int()
    if b_value is not None:
        return _floordiv_by_constant(a, b_value)
    if a == 0:
        return ZERO
    if a == b:
        return ONE
    if len(b.terms) == 1:
        quotient, rest = _split_by_term(a, b)
        if quotient.terms:
            return _add(quotient, floordiv(rest, b))
    lo, hi = a.bounds()
    if lo >= 0 and hi < max(b.bounds()[0], 1):
        return ZERO
    return _atom_expr("floordiv", a, b)


def _floordiv_by_constant(a: Expr, divisor: int) -> Expr:
    if divisor == 0:
        raise ShapeError(f"division of {a} by zero")
    if divisor < 0:  # a // -d == (-a) // d
        return _floordiv_by_constant(_scale(a, -1), -divisor)
    a_value = a.as_int()
    if a_value is not None:
        return const(a_value // divisor)
    if divisor == 1:
        return a
    g = math.gcd(_content(a), divisor)
    if g > 1:
        return _floordiv_by_constant(_scale_exact(a, g), divisor // g)
    quotient, rest = _split_by_constant(a, divisor, reduce_all=False)
    if quotient.terms:
        return _add(quotient, _floordiv_by_constant(rest, divisor))
    lo, hi = a.bounds()
    if lo >= 0 and hi < divisor:
        return ZERO
    split = _split_small(a, divisor)
    if split is not None:  # (k * big + small) // (k * d) == big // d
        k, big, _ = split
        return _floordiv_by_constant(big, divisor // k)
    inner = _single_atom(a, "floordiv")
    if inner is not None and inner.args[1].as_int() is not None:
        # (x // c1) // c2 == x // (c1 * c2) for positive c1, c2
        return _floordiv_by_constant(inner.args[0], inner.args[1].as_int() * divisor)
    return _atom_expr("floordiv", a, const(divisor))


def mod(a: ExprLike, b: ExprLike) -> Expr:
    """Floor modulo `a % b` (the result has the sign of `b`)."""
    a, b = sym(a), sym(b)
    b_value = b.as_int()
    if b_value is not None:
        return _mod_by_constant(a, b_value)
    if a == 0 or a == b:
        return ZERO
    rest = a
    if len(b.terms) == 1:
        _, rest = _split_by_term(a, b)
        if not rest.terms:
            return ZERO
    lo, hi = rest.bounds()
    if lo >= 0 and hi < max(b.bounds()[0], 1):
        return rest
    return _atom_expr("mod", rest, b)


def _mod_by_constant(a: Expr, divisor: int) -> Expr:
    if divisor == 0:
        raise ShapeError(f"modulo of {a} by zero")
    if divisor < 0:  # a % -d == -((-a) % d)
        return _scale(_mod_by_constant(_scale(a, -1), -divisor), -1)
    if divisor == 1:
        return ZERO
    _, rest = _split_by_constant(a, divisor, reduce_all=True)
    if rest.is_const:
        return rest
    g = math.gcd(_content(rest), divisor)
    if g > 1:  # (g*x) % (g*d) == g * (x % d)
        return _scale(_mod_by_constant(_scale_exact(rest, g), divisor // g), g)
    lo, hi = rest.bounds()
    if lo >= 0 and hi < divisor:
        return rest
    split = _split_small(rest, divisor)
    if split is not None:  # (k * big + small) % (k * d) == k * (big % d) + small
        k, big, small = split
        return _add(_scale(_mod_by_constant(big, divisor // k), k), small)
    inner = _single_atom(rest, "mod")
    if inner is not None:
        inner_divisor = inner.args[1].as_int()
        if inner_divisor is not None and inner_divisor % divisor == 0:
            # (x % (k*d)) % d == x % d
            return _mod_by_constant(inner.args[0], divisor)
    return _atom_expr("mod", rest, const(divisor))


def ceildiv(a: ExprLike, b: ExprLike) -> Expr:
    """Ceiling division, `(a + b - 1) // b` for b > 0."""
    a, b = sym(a), sym(b)
    return floordiv(a + b - 1, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    """The smaller of a and b."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if hi <= 0 or lo >= 0:
        return a if hi <= 0 else b
    return _atom_expr("min", *sorted((a, b), key=str))


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    """The larger of a and b."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if hi <= 0 or lo >= 0:
        return b if hi <= 0 else a
    return _atom_expr("max", *sorted((a, b), key=str))


def less_than(a: ExprLike, b: ExprLike) -> Expr:
    """1 if a < b else 0."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if hi < 0 or lo >= 0:
        return ONE if hi < 0 else ZERO
    return _atom_expr("lt", a, b)


def greater_equal(a: ExprLike, b: ExprLike) -> Expr:
    """1 if a >= b else 0."""
    a, b = sym(a), sym(b)
    lo, hi = (a - b).bounds()
    if hi < 0 or lo >= 0:
        return ONE if lo >= 0 else ZERO
    return _atom_expr("ge", a, b)


def _truth(a: Expr) -> bool | None:
    """Whether `a` is known to be non-zero (True), zero (False), or unknown (None)."""
    lo, hi = a.bounds()
    if lo > 0 or hi < 0:
        return True
    if lo == 0 and hi == 0:
        return False
    return None


def _as_boolean(a: Expr) -> Expr:
    """`a != 0` as 0/1."""
    truth = _truth(a)
    if truth is not None:
        return ONE if truth else ZERO
    return a if a.is_boolean else _atom_expr("and", ONE, a)


def logical_and(a: ExprLike, b: ExprLike) -> Expr:
    """1 if both are non-zero else 0."""
    return _logical("and", sym(a), sym(b))


def logical_or(a: ExprLike, b: ExprLike) -> Expr:
    """1 if either is non-zero else 0."""
    return _logical("or", sym(a), sym(b))


def _logical(op: str, a: Expr, b: Expr) -> Expr:
    """Folded where one side's truth is known, else an atom with sorted operands."""
    decisive = op == "or"  # the operand truth that decides the result on its own
    for x, y in ((a, b), (b, a)):
        truth = _truth(x)
        if truth is not None:
            return const(int(decisive)) if truth == decisive else _as_boolean(y)
    if a == b:
        return _as_boolean(a)
    return _atom_expr(op, *sorted((a, b), key=str))


def product(values: Iterable[ExprLike]) -> Expr:
    result = ONE
    for value in values:
        result = result * sym(value)
    return result


def known_ints(values: Iterable[Expr]) -> tuple[int, ...] | None:
    """The values as ints when every one is a known integer, else None."""
    ints = tuple(v.as_int() for v in values)
    return None if None in ints else ints  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# rebuilding an atom after substitution (evaluation, bounds, printing: atoms.py)
# ---------------------------------------------------------------------------

_BUILDERS: dict[str, Callable[[Expr, Expr], Expr]] = {
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

"""What each atom of an expression means: its value, its interval and its printed forms.

`expr.py` keeps expressions canonical; this module holds the per-atom tables it
consults (one row per atom kind, in the JAX style), so evaluation, interval reasoning
and rendering stay next to each other. It works on `Expr`/`Atom` by duck typing and
imports nothing from `expr.py`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from luminal.errors import ShapeError

if TYPE_CHECKING:
    from luminal.shape.expr import Atom, Expr

Interval = tuple[float, float]  # inclusive; finite ends are ints, unknown ends are +-inf
BOOLEAN_OPS = ("lt", "ge", "and", "or")

EVALUATORS: dict[str, Callable[[int, int], int]] = {
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "min": min,
    "max": max,
    "lt": lambda a, b: int(a < b),
    "ge": lambda a, b: int(a >= b),
    "and": lambda a, b: int(a != 0 and b != 0),
    "or": lambda a, b: int(a != 0 or b != 0),
}


def evaluate_atom(atom: Atom, env: Mapping[str, int]) -> int:
    """The value of one atom; unbound variables and zero divisors raise ShapeError."""
    if atom.op == "var":
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
    if b == 0 and atom.op in ("floordiv", "mod"):
        raise ShapeError(f"division by zero evaluating {atom.key}")
    return EVALUATORS[atom.op](a, b)


def interval_mul(a: Interval, b: Interval) -> Interval:
    """The interval of x*y; 0 times an unbounded end is 0 (never NaN)."""
    products = [0 if x == 0 or y == 0 else x * y for x in a for y in b]
    return min(products), max(products)


def _div_bound(x: float, y: float) -> float:
    """floor(x / y) for y > 0, where either may be infinite."""
    if math.isinf(x):
        return x
    if math.isinf(y):
        return 0 if x >= 0 else -1
    return x // y


def atom_bounds(atom: Atom) -> Interval:
    """An inclusive interval holding every value of the atom (variables are >= 0)."""
    op = atom.op
    if op == "var":
        return 0, (atom.upper if atom.upper is not None else math.inf)
    if op in BOOLEAN_OPS:
        return 0, 1
    a_lo, a_hi = atom.args[0].bounds()
    b_lo, b_hi = atom.args[1].bounds()
    if op == "min":
        return min(a_lo, b_lo), min(a_hi, b_hi)
    if op == "max":
        return max(a_lo, b_lo), max(a_hi, b_hi)
    b_lo = max(b_lo, 1)  # divisors are positive (negative constants are folded away)
    if op == "mod":
        if a_lo >= 0:
            return (a_lo, a_hi) if a_hi < b_lo else (0, min(a_hi, b_hi - 1))
        return 0, b_hi - 1
    # floordiv grows with a; it shrinks with b where a >= 0 and grows where a < 0
    lo = _div_bound(a_lo, b_lo if a_lo < 0 else b_hi)
    hi = _div_bound(a_hi, b_hi if a_hi < 0 else b_lo)
    return lo, hi


_INFIX = {"floordiv": "//", "mod": "%", "lt": "<", "ge": ">=", "and": "and", "or": "or"}
_C_INFIX = {**_INFIX, "floordiv": "/", "and": "&&", "or": "||"}


_SIMPLE = re.compile(r"^-?[A-Za-z_0-9]+$")


def _operand(text: str) -> str:
    """Parenthesise an operand unless it is a name or a number: `x / (2*n)`, not
    `x / 2*n` (which C and Python read as `(x / 2)*n`)."""
    if _SIMPLE.match(text) or _wrapped(text):
        return text
    return f"({text})"


def _wrapped(text: str) -> bool:
    """Whether the whole text is one parenthesised group."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += char == "("
        depth -= char == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def _render_atom(
    atom: Atom, c_syntax: bool, bare: bool = False, names: Mapping[str, str] | None = None
) -> str:
    if atom.op == "var":
        name = atom.args[0]
        return names.get(name, name) if names else name
    a = _operand(render(atom.args[0], c_syntax, names=names))
    b = _operand(render(atom.args[1], c_syntax, names=names))
    if atom.op in ("min", "max"):
        if not c_syntax:
            return f"{atom.op}({a}, {b})"
        sign = "<" if atom.op == "min" else ">"
        return f"({a} {sign} {b} ? {a} : {b})"
    if c_syntax and atom.op in ("floordiv", "mod"):
        return _c_division(atom, a, b, bare)
    text = f"{a} {(_C_INFIX if c_syntax else _INFIX)[atom.op]} {b}"
    return text if bare else f"({text})"


def _c_division(atom: Atom, a: str, b: str, bare: bool) -> str:
    """C's / and % truncate toward zero: floor semantics are rebuilt where the numerator
    may be negative (the divisor is positive). A divisor that is not a constant (a dim)
    may be 0 at run time: the result is then 0, as numpy gives, never a SIGFPE."""
    if atom.args[0].bounds()[0] < 0:
        if atom.op == "floordiv":
            text = f"({a} >= 0 ? {a} / {b} : ({a} + 1) / {b} - 1)"
        else:
            text = f"(({a} % {b} + {b}) % {b})"
    else:
        text = f"{a} {_C_INFIX[atom.op]} {b}"
        text = text if bare else f"({text})"
    if atom.args[1].as_int() is None:
        return f"({b} != 0 ? {text} : 0)"
    return text


def render(
    expr: Expr, c_syntax: bool, top: bool = False, names: Mapping[str, str] | None = None
) -> str:
    """Coefficients first (`2*a + 1`); sums and infix atoms are parenthesised unless
    they are the whole (`top`) expression. `names` renames variables as they are written
    (the order of terms stays that of the expression's own names)."""
    if not expr.terms:
        return "0"
    bare = top and len(expr.terms) == 1
    out = ""
    for i, (mono, coef) in enumerate(expr.terms):
        factors = [
            _render_atom(a, c_syntax, bare and coef == 1 and len(mono) == 1, names) for a in mono
        ]
        if abs(coef) != 1 or not factors:
            factors.insert(0, str(abs(coef)))
        text = "*".join(factors)
        if i == 0:
            out = ("-" if coef < 0 else "") + text
        else:
            out += (" - " if coef < 0 else " + ") + text
    return out if top or len(expr.terms) == 1 else f"({out})"

"""Symbolic expressions: simplification never changes a value (property-based), and the
C rendering computes what `evaluate` computes."""

from __future__ import annotations

import operator
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from luminal.shape import expr as ex
from luminal.shape.expr import Expr, ceildiv, const, sym, var

VARIABLES = ("a", "b", "c")

# An operation tree is ("var", name) | ("const", k) | (op, left, right). It is built
# both into an Expr (simplified on construction) and evaluated directly in Python.
Tree = tuple


def _py_ceildiv(x: int, y: int) -> int:
    return -((-x) // y)


PY_OPS: dict[str, Callable[[int, int], int]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "ceildiv": _py_ceildiv,
    "min": min,
    "max": max,
    "lt": lambda x, y: int(x < y),
    "ge": lambda x, y: int(x >= y),
    "and": lambda x, y: int(bool(x) and bool(y)),
    "or": lambda x, y: int(bool(x) or bool(y)),
}

# Operators, methods and module functions are all public spellings: use each.
EXPR_OPS: dict[str, Callable[[Expr, Expr], Expr]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": ex.mod,
    "ceildiv": ceildiv,
    "min": lambda x, y: x.min(y),
    "max": ex.maximum,
    "lt": lambda x, y: x.lt(y),
    "ge": ex.greater_equal,
    "and": lambda x, y: x.and_(y),
    "or": ex.logical_or,
}

COMMUTATIVE = {"add", "mul", "min", "max", "and", "or"}


def py_eval(tree: Tree, env: Mapping[str, int]) -> int:
    """The value of the operation tree, computed directly (Python floor semantics)."""
    kind = tree[0]
    if kind == "var":
        return env[tree[1]]
    if kind == "const":
        return tree[1]
    return PY_OPS[kind](py_eval(tree[1], env), py_eval(tree[2], env))


def build(tree: Tree) -> Expr:
    kind = tree[0]
    if kind == "var":
        return var(tree[1])
    if kind == "const":
        return const(tree[1])
    return EXPR_OPS[kind](build(tree[1]), build(tree[2]))


def commuted(tree: Tree) -> Tree:
    """The same tree with the operands of every commutative op swapped."""
    if tree[0] in ("var", "const"):
        return tree
    left, right = commuted(tree[1]), commuted(tree[2])
    return (tree[0], right, left) if tree[0] in COMMUTATIVE else (tree[0], left, right)


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

VAR_LEAVES = st.sampled_from(VARIABLES).map(lambda name: ("var", name))
LEAVES = st.one_of(VAR_LEAVES, st.integers(-5, 9).map(lambda k: ("const", k)))
POSITIVE = st.integers(1, 7).map(lambda k: ("const", k))

# Divisors are positive (the documented contract): constants and variable expressions.
DIVISORS = st.one_of(
    POSITIVE,
    st.tuples(st.just("add"), VAR_LEAVES, POSITIVE),
    st.tuples(st.just("add"), st.tuples(st.just("mul"), VAR_LEAVES, POSITIVE), POSITIVE),
    st.tuples(st.just("mul"), st.tuples(st.just("add"), VAR_LEAVES, POSITIVE), POSITIVE),
)

BINARY = ["add", "sub", "mul", "min", "max", "lt", "ge", "and", "or"]
DIVISIONS = ["floordiv", "mod", "ceildiv"]


def _extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    return st.one_of(
        st.tuples(st.sampled_from(BINARY), children, children),
        st.tuples(st.sampled_from(DIVISIONS), children, DIVISORS),
    )


# at most 8 leaves keeps every value (and every C intermediate) inside 63 bits
TREES = st.recursive(LEAVES, _extend, max_leaves=8)


def _extend_non_negative(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    return st.one_of(
        st.tuples(st.sampled_from(["add", "mul", "min", "max", "lt", "ge"]), children, children),
        st.tuples(st.sampled_from(DIVISIONS), children, DIVISORS),
    )


NON_NEGATIVE_TREES = st.recursive(
    st.one_of(VAR_LEAVES, st.integers(0, 6).map(lambda k: ("const", k))),
    _extend_non_negative,
    max_leaves=4,
)

ENVS = st.fixed_dictionaries({name: st.integers(0, 50) for name in VARIABLES})


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------


@given(TREES, ENVS)
def test_simplified_expression_evaluates_like_the_operation_tree(tree, env):
    assert build(tree).evaluate(env) == py_eval(tree, env)


@given(TREES, ENVS, st.dictionaries(st.sampled_from(VARIABLES), NON_NEGATIVE_TREES))
def test_substitute_then_evaluate_equals_evaluate_with_combined_env(tree, env, replacements):
    expr = build(tree)
    mapping = {name: build(rep) for name, rep in replacements.items()}
    combined = dict(env)
    combined.update({name: py_eval(rep, env) for name, rep in replacements.items()})
    assert expr.substitute(mapping).evaluate(env) == expr.evaluate(combined)


@given(TREES, ENVS)
def test_substituting_integers_folds_to_the_value(tree, env):
    folded = build(tree).substitute(env)
    assert folded.as_int() == py_eval(tree, env)
    assert folded == py_eval(tree, env)


@given(TREES, TREES)
def test_equal_expressions_hash_equal(first, second):
    a, b = build(first), build(second)
    if a == b:
        assert hash(a) == hash(b)
    again, swapped = build(first), build(commuted(first))
    assert again == a and hash(again) == hash(a)
    assert swapped == a and hash(swapped) == hash(a)
    if a.as_int() is not None:
        assert a == a.as_int() and hash(a) == hash(a.as_int())


@given(TREES, ENVS)
def test_bounds_contain_every_value(tree, env):
    expr = build(tree)
    lo, hi = expr.bounds()
    assert lo <= expr.evaluate(env) <= hi


@given(TREES, st.integers(1, 9), st.data())
def test_algebraic_identities(tree, c, data):
    x = build(tree)
    r = data.draw(st.integers(0, c - 1))
    assert x + 0 == x and 0 + x == x
    assert x * 1 == x and x * 0 == 0
    assert x - x == 0 and x + x == 2 * x
    assert x // 1 == x and x % 1 == 0
    assert x.min(x) == x and x.max(x) == x
    assert (x * c + r) // c == x
    assert (x * c + r) % c == r
    assert (x * c) % c == 0
    assert ceildiv(x * c, c) == x


@given(TREES, st.integers(1, 6), st.integers(1, 6), ENVS)
def test_nested_division_and_modulo(tree, c1, c2, env):
    x = build(tree)
    value = py_eval(tree, env)
    assert ((x // c1) // c2).evaluate(env) == value // (c1 * c2)
    assert ((x % (c1 * c2)) % c2).evaluate(env) == value % c2
    assert ((x % c1) // c1) == 0
    a = var("a")
    assert (a // c1) // c2 == a // (c1 * c2)
    assert (a % (c1 * c2)) % c2 == a % c2


@given(NON_NEGATIVE_TREES)
def test_product_modulo_its_factor_is_zero(tree):
    x, b = build(tree), var("b")
    assert (x * b) % b == 0
    assert (x * b + b * 3) % b == 0


# ---------------------------------------------------------------------------
# C rendering: one compiled program checks a batch of expressions
# ---------------------------------------------------------------------------

C_ENVS = st.lists(ENVS, min_size=1, max_size=4)


def _run_c(exprs: list[Expr], envs: list[dict[str, int]], workdir: Path) -> list[list[int]]:
    lines = ["#include <stdio.h>", "int main(void) {"]
    for env in envs:
        values = ", ".join(f"{name} = {env[name]}LL" for name in VARIABLES)
        lines.append(f"  {{ long long {values};")
        lines.append("    (void)a; (void)b; (void)c;")
        lines.extend(f'    printf("%lld\\n", (long long)({e.to_c()}));' for e in exprs)
        lines.append("  }")
    lines += ["  return 0;", "}"]
    source, binary = workdir / "exprs.c", workdir / "exprs"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-O0", "-w", str(source), "-o", str(binary)], check=True)
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    values = [int(v) for v in output.split()]
    return [values[i * len(exprs) : (i + 1) * len(exprs)] for i in range(len(envs))]


@given(st.lists(TREES, min_size=50, max_size=50), C_ENVS)
def test_c_rendering_matches_evaluate(tmp_path_factory, trees, envs):
    exprs = [build(tree) for tree in trees]
    printed = _run_c(exprs, envs, tmp_path_factory.mktemp("c"))
    for env, row in zip(envs, printed, strict=True):
        for expr, value in zip(exprs, row, strict=True):
            assert value == expr.evaluate(env), (str(expr), expr.to_c(), env)


def test_c_rendering_of_negative_numerators_uses_floor_semantics(tmp_path):
    a = var("a")
    exprs = [(a - 7) // 2, (a - 7) % 3, ceildiv(a - 9, 4), (2 - a) // (a + 1), a // -2, a % -3]
    envs = [{"a": 0, "b": 0, "c": 0}, {"a": 4, "b": 0, "c": 0}, {"a": 12, "b": 0, "c": 0}]
    printed = _run_c(exprs, envs, tmp_path)
    assert printed == [[e.evaluate(env) for e in exprs] for env in envs]


def test_c_rendering_of_non_negative_indices_is_plain():
    z = var("z")
    assert (z // 4 % 3).to_c() == "((z / 4) % 3)"
    assert (z * 2 + 1).to_c() == "(2*z + 1)"


# ---------------------------------------------------------------------------
# unit tests: printing, errors, symbolic divisors
# ---------------------------------------------------------------------------


def test_readable_printing():
    a, b = var("a"), var("b")
    assert str(a * 2 + 1) == "2*a + 1"
    assert str(a - b) == "a - b"
    assert str(-a) == "-a"
    assert str(a * b) == "a*b"
    assert str((a + 1) // 3) == "(a + 1) // 3"
    assert str(a % 4 + b) == "b + (a % 4)"
    assert str(ceildiv(a, 4)) == "(a + 3) // 4"
    assert str(a.min(b)) == "min(a, b)"
    assert str(a.lt(b).and_(b.ge(2))) == "(a < b) and (b >= 2)"
    assert str(const(-3)) == "-3" and str(const(0)) == "0"
    assert repr(a + 1) == "a + 1"  # shapes print as users write them


def test_python_ints_work_on_either_side():
    a = var("a")
    assert 3 - a == -(a - 3)
    assert (7 // (a + 1)).evaluate({"a": 2}) == 2
    assert (7 % (a + 2)).evaluate({"a": 2}) == 3
    assert 2 * a == a + a and 2 + a == a + 2
    assert sym("a") == a and sym(5) == 5


def test_division_by_zero_raises_shape_error():
    a = var("a")
    with pytest.raises(lm.ShapeError, match="zero"):
        a // 0
    with pytest.raises(lm.ShapeError, match="zero"):
        a % 0
    with pytest.raises(lm.ShapeError, match="zero"):
        (a - a) % (a - a)
    with pytest.raises(lm.ShapeError, match="zero"):
        (a // var("b")).evaluate({"a": 3, "b": 0})
    with pytest.raises(lm.ShapeError, match="zero"):
        (a % var("b")).evaluate({"a": 3, "b": 0})


def test_unbound_variable_raises_shape_error():
    with pytest.raises(lm.ShapeError, match="'n' has no value"):
        (var("n") * 2).evaluate({})
    with pytest.raises(lm.ShapeError, match="symbolic"):
        int(var("n") + 1)
    with pytest.raises(lm.ShapeError):
        var("not a name")
    with pytest.raises(lm.ShapeError):
        sym(1.5)


def test_symbolic_monomial_divisors():
    a, b, c = var("a"), var("b"), var("c")
    assert (a * b + a * c) // a == b + c
    assert (a * b + 3) % b == 3 % b
    assert (a * b * c) // (b * c) == a
    assert (a + b) // (a + b) == 1
    assert ((a * b + c) // b).evaluate({"a": 4, "b": 3, "c": 7}) == 6


def test_bounds_use_variable_upper_bounds():
    n = var("n", upper=7)
    assert n.bounds() == (0, 7)
    assert n % 8 == n
    assert n // 8 == 0
    assert n.lt(8) == 1
    assert (n + 1).min(9) == n + 1


def test_boolean_helpers():
    a = var("a")
    assert ex.logical_and(3, 5) == 1 and ex.logical_or(0, 5) == 1
    assert ex.logical_and(a.lt(3), 1) == a.lt(3)
    assert ex.logical_or(0, a.ge(3)) == a.ge(3)
    assert ex.logical_and(a, 0) == 0 and ex.logical_or(a, 2) == 1
    assert ex.product([a, 2, "b"]) == a * var("b") * 2
    assert (a * var("b") + 1).variables() == {"a", "b"}


def test_product_divisors_are_parenthesised_in_c_and_python():
    """Regression: `x // (2*n)` once rendered as `x / 2*n`, read as `(x / 2) * n`."""
    n, i = var("n"), var("i")
    expr = (n * i + 3) // (n * 2) + (n * i) % (n * 3)
    assert "/ (2*n)" in expr.to_c() and "% (3*n)" in expr.to_c()
    env = {"n": 3, "i": 5}
    assert eval(str(expr), {}, env) == expr.evaluate(env)  # noqa: S307 - our own rendering


@given(
    st.integers(0, 40),  # x's upper bound
    st.integers(1, 12),  # k
    st.integers(1, 6),  # divisor / k
    st.integers(-3, 30),  # constant added to the small part
    st.integers(-4, 4),  # y's coefficient over k
    st.data(),
)
def test_division_with_a_bounded_part_below_the_common_factor(upper, k, m, offset, c, data):
    """(k * big + small) // (k * m) and % with small bounded: the split into big // m
    (and k * (big % m) + small) only happens where 0 <= small < k, and never changes a
    value."""
    x, y = var("x", upper=upper), var("y")
    expression = x + offset + k * c * y
    xs = data.draw(st.lists(st.integers(0, upper), min_size=1, max_size=5))
    for xv in xs:
        for yv in (0, 1, 5, 17):
            env = {"x": xv, "y": yv}
            value = xv + offset + k * c * yv
            assert (expression // (k * m)).evaluate(env) == value // (k * m)
            assert (expression % (k * m)).evaluate(env) == value % (k * m)


def test_window_row_index_is_affine_in_the_column():
    """A 2x2 pooling gradient reads row (x + 28 y) // 56 for a column x < 28: it is y // 2,
    and the modulo 28 * (y % 2) + x, so the load stays affine in x."""
    x, y = var("x", upper=27), var("y", upper=27)
    assert (x + 28 * y) // 56 == y // 2
    assert (x + 28 * y) % 56 == 28 * (y % 2) + x
    assert (x + 28 * y + 1) // 56 != y // 2  # x + 1 may reach 28

"""The HLIR as egglog terms.

A `Term` is a node's output; an `Edge` is a term read through a `View`. Views are
interned Python-side (`View.table(id)`), except the shapes rules match on: the identity
view of the source (`View.ident()`), an identity view with one broadcast dim inserted
(`View.bcast(axis, id)`, also how `unsqueeze` looks), and an identity view whose size-1
dim is stretched (`View.stretch(axis, id)`, how `keepdim` results broadcast back).
Sources that rules never look into (inputs, region boundaries, opaque Python functions)
are ids into tables kept by the encoder.

Costs are static, declared here: primitives cost a little each so that extraction
prefers fewer ops; structural forms (`contract`, `normalize`) are expensive unless a
backend supplies a cheaper lowering. See docs/egraph.md.
"""

from __future__ import annotations

from egglog import Expr, StringLike, f64Like, i64Like, method

PRIMITIVE_COST = 10
STRUCTURE_COST = 1_000_000


class View(Expr):
    @method(cost=0)
    @classmethod
    def ident(cls) -> View: ...

    @method(cost=0)
    @classmethod
    def bcast(cls, axis: i64Like, id: i64Like) -> View: ...

    @method(cost=0)
    @classmethod
    def stretch(cls, axis: i64Like, id: i64Like) -> View: ...

    @method(cost=0)
    @classmethod
    def table(cls, id: i64Like) -> View: ...


class Term(Expr):
    @method(cost=STRUCTURE_COST)
    @classmethod
    def root(cls, index: i64Like) -> Term:
        """Marks the class of output `index` (never extracted)."""

    @method(cost=STRUCTURE_COST)
    @classmethod
    def named(cls, index: i64Like) -> Term:
        """A shared term's name, unioned with it (never extracted). Used instead of
        egglog's `let`, which also binds each repeated literal to a global, and egglog
        13 can read one such global in place of another (docs/egraph.md)."""

    # sources
    @method(cost=1)
    @classmethod
    def boundary(cls, index: i64Like) -> Term: ...

    @method(cost=1)
    @classmethod
    def const(cls, value: f64Like, dtype: StringLike) -> Term: ...

    @method(cost=1)
    @classmethod
    def source(cls, id: i64Like) -> Term: ...

    # unary
    @method(cost=PRIMITIVE_COST)
    @classmethod
    def log2(cls, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def exp2(cls, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def sin(cls, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def sqrt(cls, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def recip(cls, x: Edge) -> Term: ...

    # binary
    @method(cost=PRIMITIVE_COST)
    @classmethod
    def add(cls, a: Edge, b: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def mul(cls, a: Edge, b: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def mod(cls, a: Edge, b: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def less_than(cls, a: Edge, b: Edge) -> Term: ...

    # reductions
    @method(cost=PRIMITIVE_COST)
    @classmethod
    def sum_reduce(cls, axis: i64Like, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def max_reduce(cls, axis: i64Like, x: Edge) -> Term: ...

    # data movement and other
    @method(cost=PRIMITIVE_COST)
    @classmethod
    def contiguous(cls, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def gather(cls, table: Edge, indices: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def scatter(cls, base: Edge, indices: Edge, updates: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def cast(cls, dtype: StringLike, x: Edge) -> Term: ...

    @method(cost=PRIMITIVE_COST)
    @classmethod
    def function(cls, id: i64Like, inputs: EdgeList) -> Term: ...

    @method(cost=1)
    @classmethod
    def graph_break(cls, x: Edge) -> Term: ...

    # structure recognised by rules (decoded back to primitives unless lowered)
    @method(cost=STRUCTURE_COST)
    @classmethod
    def contract(cls, axis: i64Like, a: Edge, b: Edge) -> Term: ...

    @method(cost=STRUCTURE_COST)
    @classmethod
    def normalize(cls, axis: i64Like, x: Term) -> Term: ...


class Edge(Expr):
    @method(cost=0)
    @classmethod
    def of(cls, term: Term, view: View) -> Edge: ...


class EdgeList(Expr):
    """The inputs of an opaque Function op, as a cons list."""

    @method(cost=0)
    @classmethod
    def nil(cls) -> EdgeList: ...

    @method(cost=0)
    @classmethod
    def cons(cls, head: Edge, tail: EdgeList) -> EdgeList: ...

"""Algebraic identities that hold for every input (IEEE included unless noted).

Each rule keeps the output shape: an operand may only replace a node when it is read
through the identity view (`View.ident()`), because then it has the node's shape.
Bounded on purpose: commutativity and distributivity, no associativity (which explodes
on long sums; see ../shared/ARCHITECTURE.md §7).
"""

from __future__ import annotations

from egglog import String, f64, rewrite, ruleset

from luminal.compiler.terms import Edge, Term, View
from luminal.dtype import DType

FLOAT_DTYPES = tuple(d.value for d in DType if d.is_float)


def _ident(term: Term) -> Edge:
    return Edge.of(term, View.ident())


@ruleset
def algebra(x: Term, y: Term, a: Edge, b: Edge, c: Edge, v: View, p: f64, q: f64, dtype: String):
    # commutativity
    yield rewrite(Term.add(a, b)).to(Term.add(b, a))
    yield rewrite(Term.mul(a, b)).to(Term.mul(b, a))
    # identities (x read through the identity view has the node's shape)
    yield rewrite(Term.add(_ident(x), Edge.of(Term.const(0.0, dtype), v))).to(x)
    yield rewrite(Term.mul(_ident(x), Edge.of(Term.const(1.0, dtype), v))).to(x)
    yield rewrite(Term.recip(_ident(Term.recip(_ident(x))))).to(x)
    # log2(exp2 x) = x except where exp2 overflows (|x| > 126 in float32)
    yield rewrite(Term.log2(_ident(Term.exp2(_ident(x))))).to(x)
    # exp2(log2 y) = y for y >= 0: y known non-negative because it is an exp2
    yield rewrite(Term.exp2(_ident(Term.log2(_ident(Term.exp2(a)))))).to(Term.exp2(a))
    # distributivity where it saves a multiply: a*b + a*c = a*(b+c)
    yield rewrite(Term.add(_ident(Term.mul(a, b)), _ident(Term.mul(a, c)))).to(
        Term.mul(a, _ident(Term.add(b, c)))
    )
    # constant folding of float scalars: exact after rounding to the dtype (an f64 sum or
    # product of two floats of 24 bits or fewer rounds to the same value as the dtype's
    # own). Not int32: egglog computes in f64, where 2**31 - 1 + 1 does not wrap and
    # products above 2**53 lose bits
    for name in FLOAT_DTYPES:
        yield rewrite(Term.add(_ident(Term.const(p, name)), _ident(Term.const(q, name)))).to(
            Term.const(p + q, name)
        )
        yield rewrite(Term.mul(_ident(Term.const(p, name)), _ident(Term.const(q, name)))).to(
            Term.const(p * q, name)
        )

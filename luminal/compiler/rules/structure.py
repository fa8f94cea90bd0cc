"""Structure recognition: name the patterns backends lower to one kernel.

- a Mul feeding a SumReduce is a contraction (a matrix product with given strides);
- x * recip(sum(x)) broadcast back along the summed axis is a normalisation (the tail
  of softmax).
The recognised forms cost more than their primitives by default, so without a backend's
cheaper lowering extraction keeps the primitives.
"""

from __future__ import annotations

from egglog import i64, rewrite, ruleset

from luminal.compiler.terms import Edge, Term, View


@ruleset
def structure(x: Term, a: Edge, b: Edge, k: i64, n: i64, m: i64):
    yield rewrite(Term.sum_reduce(k, Edge.of(Term.mul(a, b), View.ident()))).to(
        Term.contract(k, a, b)
    )
    total = Term.sum_reduce(k, Edge.of(x, View.ident()))
    inverse = Term.recip(Edge.of(total, View.ident()))
    yield rewrite(Term.mul(Edge.of(x, View.ident()), Edge.of(inverse, View.bcast(k, n)))).to(
        Term.normalize(k, x)
    )
    # the keepdim spelling: recip(unsqueeze(sum)) stretched back along the axis
    kept = Term.recip(Edge.of(total, View.bcast(k, m)))
    yield rewrite(Term.mul(Edge.of(x, View.ident()), Edge.of(kept, View.stretch(k, n)))).to(
        Term.normalize(k, x)
    )

"""Backend lowering: rewrite a recognised contraction into the lowered ops
`ops.Contract` / `ops.ContractSum` at a low static cost (the `cpu` ruleset).

`cpu_contract(axis, a, b)` is `Contract(axis)`; `cpu_contract_sum(axis, outer, a, b)` is
the contraction summed over one more axis (counted in the contraction's output). Their
decoders live with the others in `egraph/extract.py` (`TERM_DECODERS`), keyed by these
names; the ruleset is listed in `rules.RULESETS` under "cpu".
"""

from __future__ import annotations

from egglog import function, i64, i64Like, rewrite, ruleset

from luminal.compiler.terms import Edge, Term, View


@function(cost=5)
def cpu_contract(axis: i64Like, a: Edge, b: Edge) -> Term: ...


@function(cost=6)
def cpu_contract_sum(axis: i64Like, outer: i64Like, a: Edge, b: Edge) -> Term:
    """sum(cpu_contract(axis, a, b), outer), `outer` counted in the contraction's output."""


@ruleset
def contractions(k: i64, j: i64, a: Edge, b: Edge):
    yield rewrite(Term.contract(k, a, b)).to(cpu_contract(k, a, b))
    yield rewrite(Term.sum_reduce(j, Edge.of(cpu_contract(k, a, b), View.ident()))).to(
        cpu_contract_sum(k, j, a, b)
    )

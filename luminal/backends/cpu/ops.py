"""CPU backend ops and their lowering through the e-graph.

`Contract(axis)` is `sum(a * b, axis)` over two broadcast views: a matrix product with
given strides. The `cpu` ruleset rewrites the e-graph's recognised `contract` into it at
a low static cost; the backend then runs it as BLAS sgemm (batched over leading axes)
when the strides allow, or as a generated loop otherwise. Its reference implementation
is the reference runtime's contraction, so a lowered graph stays checkable.
"""

from __future__ import annotations

from dataclasses import dataclass

from egglog import function, i64, i64Like, rewrite, ruleset

from luminal import ops
from luminal.compiler.egraph import extract
from luminal.compiler.egraph.terms import Edge, Term
from luminal.compiler.rules import register_ruleset
from luminal.reference import kernels
from luminal.reference.contraction import contract


@dataclass(frozen=True)
class Contract(ops.Op):
    """sum(a * b, axis) for two inputs read as views of one logical shape."""

    axis: int
    arity = 2


def _contract_reference(op: Contract, inputs: list, ctx: kernels.KernelContext):  # noqa: ANN202
    return contract(inputs[0], inputs[1], op.axis)


kernels.KERNELS[Contract] = _contract_reference


@function(cost=5)
def cpu_contract(axis: i64Like, a: Edge, b: Edge) -> Term: ...


@ruleset
def cpu(k: i64, a: Edge, b: Edge):
    yield rewrite(Term.contract(k, a, b)).to(cpu_contract(k, a, b))


def _decode_contract(decoder: extract.ProgramDecoder, node: extract.ENode) -> extract.Ref:
    axis = decoder.literal(node.children[0])
    a, b = decoder.edge(node.children[1]), decoder.edge(node.children[2])
    shape = tuple(d for i, d in enumerate(a[1].shape) if i != axis)
    return decoder.emit(Contract(axis), [a, b], shape, decoder.dtype_of(a[0]))


register_ruleset("cpu", cpu)
extract.TERM_DECODERS["cpu_contract"] = _decode_contract

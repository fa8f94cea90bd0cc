"""CPU backend ops and their lowering through the e-graph.

`Contract(axis)` is `sum(a * b, axis)` over two broadcast views: a matrix product with
given strides. The `cpu` ruleset rewrites the e-graph's recognised `contract` into it at
a low static cost; the backend then runs it as BLAS sgemm (batched over leading axes)
when the strides allow, or as a generated loop otherwise. Its reference implementation
is the reference runtime's contraction, so a lowered graph stays checkable.

`ContractSum(axis, outer)` is a contraction whose result is then summed over one more
axis (`outer`, an axis of the same logical input shape) along which both operands vary:
a weight gradient summed over the batch (a convolution's, per image). It becomes one
sgemm with the batch merged into K, instead of a product per batch index and a sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from egglog import function, i64, i64Like, rewrite, ruleset

from luminal import ops
from luminal.compiler.egraph import extract
from luminal.compiler.egraph.terms import Edge, Term, View
from luminal.compiler.rules import register_ruleset
from luminal.reference import kernels
from luminal.reference.contraction import contract
from luminal.shape.tracker import ShapeTracker


@dataclass(frozen=True)
class Contract(ops.Op):
    """sum(a * b, axis) for two inputs read as views of one logical shape."""

    axis: int
    arity = 2

    @property
    def summed(self) -> tuple[int, ...]:
        """The summed axes of the logical input shape, ascending."""
        return (self.axis,)


@dataclass(frozen=True)
class ContractSum(Contract):
    """sum(a * b) over `axis` and `outer`, two axes of the logical input shape."""

    outer: int

    @property
    def summed(self) -> tuple[int, ...]:
        return tuple(sorted((self.axis, self.outer)))


def _contract_reference(op: Contract, inputs: list, ctx: kernels.KernelContext):  # noqa: ANN202
    return contract(inputs[0], inputs[1], op.axis)


def _contract_sum_reference(op: ContractSum, inputs: list, ctx: kernels.KernelContext):  # noqa: ANN202
    product = contract(inputs[0], inputs[1], op.axis)
    return product.sum(axis=op.outer - (op.outer > op.axis), dtype=product.dtype)


kernels.KERNELS[Contract] = _contract_reference
kernels.KERNELS[ContractSum] = _contract_sum_reference


@function(cost=5)
def cpu_contract(axis: i64Like, a: Edge, b: Edge) -> Term: ...


@function(cost=6)
def cpu_contract_sum(axis: i64Like, outer: i64Like, a: Edge, b: Edge) -> Term:
    """sum(cpu_contract(axis, a, b), outer), `outer` counted in the contraction's output."""


@ruleset
def cpu(k: i64, j: i64, a: Edge, b: Edge):
    yield rewrite(Term.contract(k, a, b)).to(cpu_contract(k, a, b))
    yield rewrite(Term.sum_reduce(j, Edge.of(cpu_contract(k, a, b), View.ident()))).to(
        cpu_contract_sum(k, j, a, b)
    )


def _decode_contract(decoder: extract.ProgramDecoder, node: extract.ENode) -> extract.Ref:
    axis = decoder.literal(node.children[0])
    a, b = decoder.edge(node.children[1]), decoder.edge(node.children[2])
    shape = tuple(d for i, d in enumerate(a[1].shape) if i != axis)
    return decoder.emit(Contract(axis), [a, b], shape, decoder.dtype_of(a[0]))


def _decode_contract_sum(decoder: extract.ProgramDecoder, node: extract.ENode) -> extract.Ref:
    """One ContractSum when both operands vary along the outer axis (a batch axis, which
    then joins K); otherwise the Contract and a SumReduce it stands for."""
    axis, outer = decoder.literal(node.children[0]), decoder.literal(node.children[1])
    a, b = decoder.edge(node.children[2]), decoder.edge(node.children[3])
    full = tuple(a[1].shape)
    outer_in = outer + (outer >= axis)  # the outer axis in the logical input shape
    dtype = decoder.dtype_of(a[0])
    varies = all(view.strides[outer_in] != 0 for _, view in (a, b))
    if varies and full[outer_in] != 1:
        shape = tuple(d for i, d in enumerate(full) if i not in (axis, outer_in))
        return decoder.emit(ContractSum(axis, outer_in), [a, b], shape, dtype)
    product_shape = tuple(d for i, d in enumerate(full) if i != axis)
    product = decoder.emit(Contract(axis), [a, b], product_shape, dtype)
    return decoder.emit(ops.SumReduce(outer), [(product, ShapeTracker.contiguous(product_shape))])


register_ruleset("cpu", cpu)
extract.TERM_DECODERS["cpu_contract"] = _decode_contract
extract.TERM_DECODERS["cpu_contract_sum"] = _decode_contract_sum

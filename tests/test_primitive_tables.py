"""Every per-primitive table covers every primitive of luminal/ops.py, or says why not.

The reference runtime, autograd, the e-graph encoder and decoder, and the kernel
lowering (luminal/kernel/values.py, whose IR every renderer shares) each keep one table
keyed by the primitive (STYLE.md: "One IR, many renderers"). A primitive added to
ops.py without its row fails here, naming the table, instead of failing in some graph
that happens to use it.
"""

from __future__ import annotations

import pytest

from luminal import ops
from luminal.compiler.egraph.encode import ENCODERS
from luminal.compiler.egraph.extract import TERM_DECODERS
from luminal.kernel.values import OP_LOWERINGS
from luminal.reference.kernels import KERNELS
from luminal.training.autograd import VJP_RULES, ZERO_GRADIENT

# primitive -> why the table has no row for it, per table
NOT_IN = {
    "autograd": {
        ops.Input: "a leaf: gradients stop there (Autograd reads them off)",
        **{
            op: "piecewise constant: listed in ZERO_GRADIENT"
            for op in ZERO_GRADIENT
            if op not in VJP_RULES
        },
    },
    "kernel lowering": {
        ops.Input: "a buffer: read by ValueLowering.load, never computed",
        ops.Gather: "its own kernel (kernel.lower.gather_kernel): checks indices, records faults",
        ops.Scatter: "its own kernel (kernel.lower.scatter_kernel): sequential index_add",
        ops.Function: "Python between C segments (runtime.CompiledGraph._run_function)",
    },
}

TABLES = {
    "reference": KERNELS,
    "autograd": VJP_RULES,
    "e-graph encoder": ENCODERS,
    "kernel lowering": OP_LOWERINGS,
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_primitive_has_a_row_or_a_reason(table: str) -> None:
    rows, excused = TABLES[table], NOT_IN.get(table, {})
    missing = [op.__name__ for op in ops.PRIMITIVES if op not in rows and op not in excused]
    assert not missing, f"{table} table has no row for {missing} and no reason why"
    stale = [op.__name__ for op in excused if op in rows]
    assert not stale, f"{table}: {stale} have a row and an excuse; drop the excuse"


def test_lowered_ops_run_on_the_reference_and_differentiate() -> None:
    """Contract/ContractSum are in the tables themselves (no backend module to import
    first): the reference runs a lowered graph, autograd differentiates it."""
    assert all(op in KERNELS for op in ops.LOWERED_OPS)
    assert all(op in VJP_RULES for op in ops.LOWERED_OPS)


def test_every_encoded_primitive_decodes() -> None:
    """The decoder's table holds a term for each primitive the encoder writes as one
    (Input and Iota travel as opaque sources, Function as an opaque function)."""
    opaque = {ops.Input: "Term.source", ops.Iota: "Term.source", ops.Function: "Term.function"}
    for op in ops.PRIMITIVES:
        name = opaque.get(op) or "Term." + _snake(op.__name__)
        if op is ops.Constant:
            name = "Term.const"
        assert name in TERM_DECODERS, f"no decoder for {op.__name__} ({name})"


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")

"""Moved: `Contract`/`ContractSum` are lowered ops of `luminal.ops`, their e-graph
lowering is `luminal.compiler.rules.lowering`. (Kept while `tuning.py` imports it.)"""

from luminal.ops import Contract, ContractSum

__all__ = ["Contract", "ContractSum"]

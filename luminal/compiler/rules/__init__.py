"""Rewrite rules as typed egglog rulesets, one module per purpose.

`RULESETS` maps a name to its ruleset; backends register lowering rulesets with
`register_ruleset` (the hook for backend lowering rules and costs).
"""

from __future__ import annotations

from egglog import Ruleset

from luminal.compiler.rules.algebra import algebra
from luminal.compiler.rules.structure import structure

RULESETS: dict[str, Ruleset] = {"algebra": algebra, "structure": structure}


def register_ruleset(name: str, ruleset: Ruleset) -> None:
    """Make a backend's ruleset available to `EGraphCompiler(rulesets=(..., name))`."""
    RULESETS[name] = ruleset

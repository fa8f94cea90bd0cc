"""Rewrite rules as typed egglog rulesets, one module per purpose.

`RULESETS` maps a name to its ruleset, every ruleset luminal has in one table: the
generic ones and each backend's lowering (`cpu`: contractions to `ops.Contract`). A
backend names the ones it compiles with (`Backend.rulesets`); `register_ruleset` adds
one from outside luminal (a test, an experiment).
"""

from __future__ import annotations

from egglog import Ruleset

from luminal.compiler.rules.algebra import algebra
from luminal.compiler.rules.lowering import contractions
from luminal.compiler.rules.structure import structure

RULESETS: dict[str, Ruleset] = {"algebra": algebra, "structure": structure, "cpu": contractions}


def register_ruleset(name: str, ruleset: Ruleset) -> None:
    """Make a backend's ruleset available to `EGraphCompiler(rulesets=(..., name))`."""
    RULESETS[name] = ruleset

"""The e-graph layer: HLIR as egglog terms, rulesets, extraction, candidate enumeration."""

from luminal.compiler.egraph.compiler import EGraphCompiler

__all__ = ["EGraphCompiler"]

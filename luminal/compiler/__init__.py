"""Compilers: the protocol, generic passes, and the e-graph layer."""

from luminal.compiler.base import Compiler, Looped, Timed
from luminal.compiler.fold import FoldChannelScale
from luminal.compiler.passes import (
    ArithmeticElimination,
    CommonSubexpressionElimination,
    DeadCodeElimination,
    DepthFirstSchedule,
    GenericCompiler,
    RemoveUnitReductions,
)

__all__ = [
    "ArithmeticElimination",
    "CommonSubexpressionElimination",
    "Compiler",
    "DeadCodeElimination",
    "DepthFirstSchedule",
    "FoldChannelScale",
    "GenericCompiler",
    "Looped",
    "RemoveUnitReductions",
    "Timed",
]

"""Compilers: the protocol, generic passes, and the e-graph layer."""

from luminal.compiler.base import Compiler, Looped, Timed

__all__ = ["Compiler", "Looped", "Timed"]

"""Measured search: candidates are compiled, run on real buffers in a separate process,
checked against the reference runtime, timed, and the fastest verified one is kept and
cached on disk (see docs/search.md)."""

from luminal.search.budget import TimeBudget

__all__ = ["TimeBudget"]

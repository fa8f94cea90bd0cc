"""`lm.TimeBudget(seconds)`: how long a measured search may run, and the clock it reads."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from luminal.errors import CompileError


@dataclass(frozen=True)
class TimeBudget:
    """`lm.CPUCompiler(mode=lm.TimeBudget(30))`: search for at most `seconds` of wall time
    (the whole compile, static lowering and final check included) and keep the best
    program found when the time is up."""

    seconds: float

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, int | float) or not self.seconds > 0:
            raise CompileError(
                f"TimeBudget: seconds must be a positive number, got {self.seconds!r}"
            )


class Deadline:
    """A point in time (`math.inf` when unbounded) measured from construction."""

    def __init__(self, seconds: float = math.inf) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def expired(self, reserve: float = 0.0) -> bool:
        """Whether less than `reserve` seconds are left."""
        return self.remaining() <= reserve

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.seconds)

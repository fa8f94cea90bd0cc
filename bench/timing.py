"""How a bench turns contestants into seconds: one `Timer` interface, several policies.

Each bench script hands its contestants to a timer as `{name: callable}` and gets
`{name: seconds per call}` back. The scripts' own command lines keep the policy they
always had (best of N, minima in turns), so their output is unchanged; the dashboard
(bench/run_all.py), bench/training.py and bench/attention.py use `Rounds`: interleaved
rounds and medians.
`self_timed` is for contestants that time their own inner part and return seconds
(a decode loop after an untimed prompt).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Protocol

Contestants = dict[str, Callable[[], object]]
SelfTimed = dict[str, Callable[[], float]]


class Seconds(float):
    """A median that remembers its samples (the dashboard records their minimum too: on a
    loaded machine the median measures the scheduler as much as the code)."""

    samples: tuple[float, ...]

    def __new__(cls, samples: list[float]) -> Seconds:
        value = super().__new__(cls, statistics.median(samples))
        value.samples = tuple(samples)
        return value

    def __truediv__(self, other: object) -> float:
        """Per-unit seconds keep their samples (`seconds / tokens`); a ratio is a float."""
        if isinstance(other, int | float) and not isinstance(other, Seconds):
            return Seconds([sample / other for sample in self.samples])
        return float(self) / other


class Timer(Protocol):
    def times(self, fns: Contestants) -> dict[str, float]: ...

    def self_timed(self, fns: SelfTimed) -> dict[str, float]: ...


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of `repeats` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


class BestOf:
    """Each contestant alone, one after the other: the minimum of `repeats` calls."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats

    def times(self, fns: Contestants) -> dict[str, float]:
        return {name: best_of(fn, self.repeats) for name, fn in fns.items()}

    def self_timed(self, fns: SelfTimed) -> dict[str, float]:
        return {name: min(fn() for _ in range(self.repeats + 1)) for name, fn in fns.items()}


class Rounds:
    """Interleaved rounds: every round times each contestant once, in turns, after a
    pause: thread pools spin for a while after a call and would slow the next contestant
    (onnxruntime's spins 20-50 ms: ResNet-18 in luminal timed right after it 70.6 ms,
    20 ms later 52.1, 50-200 ms later 45.8-46.9, on 2 threads; the pause was 20 ms); the
    result is each contestant's median. A fast contestant is timed as a batch of calls
    of at least `batch_seconds` (from its warm-up time) so that timer resolution and
    one-off hiccups do not dominate. Slow cases get fewer rounds: as many as fit in
    `budget` seconds (estimated from the warm-up), never fewer than `least`. With
    `alternate`, every other round runs the contestants in reverse order, so that none
    always runs right after the same other one (whose idle OpenMP threads may still
    spin, and whose buffers are what the cache holds). `clock` replaces the wall clock in
    `times` (`time.process_time`: CPU time, which another process on the same core does
    not inflate; meaningful at one thread, where no idle worker spins); `self_timed`
    contestants keep their own clock."""

    def __init__(
        self,
        rounds: int,
        batch_seconds: float = 0.02,
        pause: float = 0.1,
        budget: float = 60.0,
        least: int = 3,
        alternate: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.rounds = rounds
        self.batch_seconds = batch_seconds
        self.pause = pause
        self.budget = budget
        self.least = least
        self.alternate = alternate
        self.clock = clock

    def times(self, fns: Contestants) -> dict[str, float]:
        calibrated = {name: self._calibrate(fn) for name, fn in fns.items()}
        batches = {name: batch for name, (batch, _) in calibrated.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for index in range(self.count(sum(b * s for b, s in calibrated.values()))):
            for name, fn in self._order(fns, index):
                time.sleep(self.pause)
                start = self._now()
                for _ in range(batches[name]):
                    fn()
                samples[name].append((self._now() - start) / batches[name])
        return {name: Seconds(values) for name, values in samples.items()}

    def self_timed(self, fns: SelfTimed) -> dict[str, float]:
        samples: dict[str, list[float]] = {name: [] for name in fns}
        warm = sum(fn() for fn in fns.values())  # warm-up, and the cost of a round
        for index in range(self.count(warm)):
            for name, fn in self._order(fns, index):
                time.sleep(self.pause)
                samples[name].append(fn())
        return {name: Seconds(values) for name, values in samples.items()}

    def count(self, round_seconds: float) -> int:
        """`rounds`, or as many as fit in `budget` when a round takes `round_seconds`,
        but at least `least` (or `rounds`, if fewer)."""
        fit = int(self.budget // max(round_seconds, 1e-9))
        return max(min(self.rounds, fit), min(self.least, self.rounds))

    def _now(self) -> float:
        return self.clock() if self.clock is not None else time.perf_counter()

    def _order(
        self, fns: dict[str, Callable[[], object]], index: int
    ) -> list[tuple[str, Callable[[], object]]]:
        """The contestants of round `index`: as given, or reversed on odd rounds."""
        order = list(fns.items())
        return order[::-1] if self.alternate and index % 2 else order

    def _calibrate(self, fn: Callable[[], object]) -> tuple[int, float]:
        """(calls per timed batch, seconds per call) from a warm-up and one timed call."""
        fn()  # warm-up (first-call costs are not what is measured)
        start = self._now()
        fn()
        seconds = self._now() - start
        return max(1, math.ceil(self.batch_seconds / max(seconds, 1e-9))), seconds

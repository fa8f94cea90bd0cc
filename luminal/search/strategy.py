"""Beam search over a backend's sites (places where a kernel has alternatives).

The static choice of every site is measured first (the baseline); when the measuring
process cannot time it (it dies, hangs or answers garbage), the search ends there and
keeps the static program, saying why in `stopped_by`. Sites are then taken
in order of their estimated share of the run time; each state in the beam is extended
with each alternative of the site, the candidates are compiled in parallel, measured in
the measuring process and checked against the reference outputs; the `beam` fastest
verified states survive. A final round re-times the winner against the baseline, so the
result is never slower than the static choice. Same seed, same candidates, same order.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from luminal.search.budget import Deadline
from luminal.search.cache import MEASURING_FAILED, Trial
from luminal.search.measure import MeasuringProcess

STATIC_TIMEOUT = 600.0  # seconds for the static program, which fast mode would run anyway
CONFIRM_PAIRS = 3  # winner/static pairs timed side by side before a winner is kept
Config = dict[str, str]  # site key -> chosen option (sites left out keep their default)


@dataclass
class Site:
    key: str
    options: list[str]  # options[0] is the static (mode="fast") choice
    weight: float = 0.0  # estimated work: heavier sites are searched first


@dataclass
class Prepared:
    """A candidate ready to measure (`payload` is sent to the measuring process), or
    the error that stopped it from compiling. `shared` is (token, object) of what many
    candidates have in common (the input arrays), sent once per measuring process."""

    config: Config
    payload: Any = None
    error: str | None = None
    shared: tuple[str, Any] | None = None


class SearchSpace(Protocol):
    sites: list[Site]
    setup: list[tuple[str, str, tuple]]  # calls the measuring process makes first

    def prepare(self, configs: Sequence[Config]) -> list[Prepared]: ...


@dataclass(frozen=True)
class Expected:
    """A reference output and how close a candidate must come to it."""

    value: np.ndarray
    rtol: float
    atol: float


@dataclass
class SearchResult:
    """The chosen configuration (relative to the stage's context) and why the search
    ended; times are read from the trials, which hold every measurement."""

    best: Config
    stopped_by: str = "space exhausted"


def config_key(config: Config) -> tuple:
    return tuple(sorted(config.items()))


def check_outputs(outputs: dict[int, np.ndarray], expected: dict[int, Expected]) -> str | None:
    """None when every output matches its reference; else why not ("nan: ...")."""
    with np.errstate(all="ignore"):  # a broken candidate may leave any bits behind
        return _first_mismatch(outputs, expected)


def _first_mismatch(outputs: dict[int, np.ndarray], expected: dict[int, Expected]) -> str | None:
    for node_id, want in expected.items():
        got = outputs.get(node_id)
        if got is None:
            return f"wrong: output of node {node_id} missing"
        if got.shape != want.value.shape:
            return f"wrong: output {node_id} has shape {got.shape}, expected {want.value.shape}"
        actual = got.astype(np.float64)
        reference = want.value.astype(np.float64)
        bad = ~np.isfinite(actual) & np.isfinite(reference)
        if bad.any():
            return f"nan: output {node_id} has {int(bad.sum())} NaN/inf the reference has not"
        if not np.allclose(actual, reference, rtol=want.rtol, atol=want.atol, equal_nan=True):
            diff = np.nanmax(np.abs(actual - reference))
            return f"wrong: output {node_id} differs from the reference (max abs diff {diff:.3g})"
    return None


class BeamSearch:
    def __init__(
        self,
        space: SearchSpace,
        expected: dict[int, Expected],
        roots: list[tuple[int, Any]],
        deadline: Deadline,
        beam: int = 2,
        seed: int = 0,
        repeats: int = 5,
        slack: float = 2.0,
        reserve: float = 0.0,
        timeout: float = 10.0,
        progress: Callable[[int, float | None, float], None] | None = None,
        process: MeasuringProcess | None = None,
        trials: list[Trial] | None = None,
        context: Config | None = None,
    ) -> None:
        self.space = space
        self.expected = expected
        self.roots = roots
        self.deadline = deadline
        self.beam = max(1, beam)
        self.rng = random.Random(seed)
        self.repeats = max(3, repeats)
        self.slack = slack
        self.reserve = reserve
        self.timeout = timeout
        self.progress = progress
        self.trials: list[Trial] = [] if trials is None else trials  # shared across stages
        self.context = dict(context or {})  # what earlier stages chose (recorded in trials)
        self.owns_process = process is None
        self.process = process or MeasuringProcess()
        self.compile_seconds_per_candidate = 0.0

    # ------------------------------------------------------------------ measuring
    def _timeout(self, best: float | None) -> float:
        """How long one candidate may take: the static program (measured first) gets up
        to STATIC_TIMEOUT; others `timeout` plus 30 runs of the fastest time seen."""
        seen = [t.seconds for t in self.trials if t.status == "ok" and t.seconds]
        generous = STATIC_TIMEOUT if not seen else self.timeout + 30 * min(seen)
        return min(generous, self._budget_left())

    def _budget_left(self) -> float:
        """Seconds a measurement may still wait, start-up of the measuring process
        included (at least half a second, so a short budget still tries once)."""
        if not self.deadline.bounded:
            return math.inf
        return max(0.5, self.deadline.remaining() - self.reserve)

    def measure(self, prepared: Prepared, best: float | None) -> Trial:
        """Run one candidate in the measuring process and check its outputs. The trial
        records the full configuration (`context`, earlier stages' choices, included)."""
        config = {**self.context, **prepared.config}
        if prepared.error is not None:
            inapplicable = prepared.error.startswith("inapplicable")
            status = "inapplicable" if inapplicable else "compile error"
            trial = Trial(config, status, None, prepared.error[:500])
        else:
            reply = self.process.request(
                {
                    "candidate": prepared.payload,
                    "setup": self.space.setup,
                    "roots": self.roots,
                    "repeats": self.repeats,
                    "best": best,
                    "slack": self.slack,
                    "min_sample": 5e-3,
                },
                self._timeout(best),
                shared=prepared.shared,
                until=time.perf_counter() + self._budget_left(),
            )
            status = reply["status"]
            seconds = reply.get("seconds")
            detail = reply.get("detail", "")
            if status in ("ok", "slower"):
                problem = check_outputs(reply["outputs"], self.expected)
                if problem is not None:
                    status, detail = problem.split(":", 1)[0], problem
            trial = Trial(config, status, seconds, detail)
        self.trials.append(trial)
        return trial

    def _evaluate(
        self, configs: list[Config], best: float | None, done: list[tuple[Trial, Config]]
    ) -> None:
        """Compile in parallel (in chunks, so the deadline is checked between them) and
        measure one at a time; each (trial, local config) is appended to `done` as it
        completes, so a round cut short by the budget still counts what it measured."""
        chunk = 4
        for start in range(0, len(configs), chunk):
            part = configs[start : start + chunk]
            estimate = self.compile_seconds_per_candidate * len(part)
            if self.deadline.expired(self.reserve + estimate):
                raise _OutOfTime
            began = time.perf_counter()
            prepared = self.space.prepare(part)
            spent = (time.perf_counter() - began) / max(len(part), 1)
            self.compile_seconds_per_candidate = max(self.compile_seconds_per_candidate, spent)
            for item in prepared:
                if self.deadline.expired(self.reserve):
                    raise _OutOfTime
                trial = self.measure(item, best)
                if trial.status == "ok" and (best is None or trial.seconds < best):
                    best = trial.seconds
                done.append((trial, item.config))
                if self.progress is not None:
                    self.progress(len(self.trials), best, self.deadline.remaining())

    # ------------------------------------------------------------------ searching
    def run(self) -> SearchResult:
        tried = [t for t in self.trials if t.config == self.context]
        if tried and not any(t.status == "ok" for t in tried):
            # an earlier stage measured this starting point and it failed: same outcome
            return self._fallback(tried[-1])
        if not self.deadline.expired(self.reserve):  # it imports while candidates compile
            self.process.start()
        try:
            return self._run()
        finally:
            if self.owns_process:
                self.process.close()

    def _static_seconds(self) -> float:
        """The best time of this stage's starting point (all sites static) in any trial,
        earlier stages' included."""
        static = [t.seconds for t in self.trials if t.config == self.context and t.status == "ok"]
        return min(static)

    def _fallback(self, static: Trial) -> SearchResult:
        """The result when the static program did not run correctly in the measuring
        process: the budget did not cover timing it, or the measuring process failed
        (the static program is what `fast` mode runs; the final check in the user's
        process still compares it with the reference)."""
        if static.status == "timeout" and self.deadline.expired(self.reserve):
            return SearchResult({}, "time budget")
        return SearchResult(
            {}, f"{MEASURING_FAILED} (static program {static.status}: {static.detail})"
        )

    def _run(self) -> SearchResult:
        done: list[tuple[Trial, Config]] = []
        with contextlib.suppress(_OutOfTime):
            self._evaluate([{}], None, done)
        if not done:  # the budget does not even cover compiling the static program
            return SearchResult({}, "time budget")
        ((baseline, _),) = done
        if baseline.status != "ok":
            result = self._fallback(baseline)
            if result.stopped_by != "time budget":
                warnings.warn(
                    f"search: the static program is used: {result.stopped_by}", stacklevel=2
                )
            return result
        beam: list[tuple[float, Config]] = [(self._static_seconds(), {})]
        seen = {config_key({})}
        stopped_by = "space exhausted"
        sites = sorted(self.space.sites, key=lambda s: (-s.weight, s.key))
        for site in sites:
            configs = []
            for _, config in beam:
                for option in site.options[1:]:
                    candidate = {**config, site.key: option}
                    if config_key(candidate) not in seen:
                        seen.add(config_key(candidate))
                        configs.append(candidate)
            self.rng.shuffle(configs)
            done = []
            try:
                self._evaluate(configs, beam[0][0], done)
            except _OutOfTime:
                stopped_by = "time budget"
            pool = beam + [(t.seconds, local) for t, local in done if t.status == "ok"]
            pool.sort(key=lambda item: (item[0], config_key(item[1])))
            beam = pool[: self.beam]
            if stopped_by == "time budget":
                break
        best = beam[0][1]
        return SearchResult(self._confirm(best) if best else {}, stopped_by)

    def _confirm(self, best: Config) -> Config:
        """Re-time the winner and the static configuration side by side, interleaved
        (when time is left). The winner is kept only if it beats the static one both in
        this round, where both met the same machine, and over every measurement."""
        done: list[tuple[Trial, Config]] = []
        with contextlib.suppress(_OutOfTime):
            if not self.deadline.expired(self.reserve):
                self._evaluate([best, {}] * CONFIRM_PAIRS, None, done)
        side_by_side = {
            key: [t.seconds for t, local in done if local == config and t.status == "ok"]
            for key, config in (("winner", best), ("static", {}))
        }
        if done and not (
            side_by_side["winner"]
            and side_by_side["static"]
            and min(side_by_side["winner"]) < min(side_by_side["static"])
        ):
            return {}
        full = {**self.context, **best}
        winner = [t.seconds for t in self.trials if t.config == full and t.status == "ok"]
        if not winner or min(winner) >= self._static_seconds():
            return {}
        return best


class _OutOfTime(Exception):
    pass

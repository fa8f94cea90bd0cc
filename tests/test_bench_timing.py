"""bench/timing.py's interleaved rounds with alternating order (bench/training.py uses
them): the contestants swap turns every other round, on a fake clock. No timing
assertions on real time."""

from __future__ import annotations

from bench import timing


def test_alternating_rounds_reverse_the_order_every_other_round(monkeypatch) -> None:
    clock, calls = [0.0], []

    def contestant(name: str, cost: float):  # noqa: ANN202
        def run() -> None:
            calls.append(name)
            clock[0] += cost

        return run

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    fns = {"a": contestant("a", 0.5), "b": contestant("b", 0.25)}
    times = timing.Rounds(4, batch_seconds=0.0, alternate=True).times(fns)
    # warm-up and calibration call each twice; then a b, b a, a b, b a
    assert calls == ["a", "a", "b", "b"] + ["a", "b", "b", "a"] * 2
    assert times == {"a": 0.5, "b": 0.25} and len(times["a"].samples) == 4


def test_alternating_self_timed_rounds(monkeypatch) -> None:
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    calls = []

    def contestant(name: str, seconds: float):  # noqa: ANN202
        def run() -> float:
            calls.append(name)
            return seconds

        return run

    fns = {"a": contestant("a", 1.0), "b": contestant("b", 2.0)}
    times = timing.Rounds(3, alternate=True).self_timed(fns)
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]
    assert times == {"a": 1.0, "b": 2.0}


def test_rounds_read_the_clock_they_are_given(monkeypatch) -> None:
    """A `clock` (CPU time in bench/training.py --clock cpu) replaces the wall clock."""
    cpu, calls = [0.0], []

    def run() -> None:
        calls.append("a")
        cpu[0] += 0.25

    monkeypatch.setattr(timing.time, "perf_counter", lambda: 0.0)  # the wall clock stands still
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    times = timing.Rounds(3, batch_seconds=0.0, clock=lambda: cpu[0]).times({"a": run})
    assert times["a"] == 0.25 and times["a"].samples == (0.25, 0.25, 0.25)

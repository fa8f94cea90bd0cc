"""One result row of a bench, in the schema the dashboard (bench/run_all.py) records.

A row compares luminal with one peer on one case (a case with two peers gives two rows).
`peer` is None for luminal-only figures (compile times, tokens/s without a runnable peer);
`peer_s` is None when the peer was not measured, and `note` says why. Times are seconds
per call of the case (per token, per step, per compile)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Row:
    bench: str
    case: str
    luminal_s: float
    peer: str | None = None
    peer_s: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """luminal / peer: below 1 luminal is faster."""
        if self.peer_s is None or self.peer_s <= 0:
            return None
        return self.luminal_s / self.peer_s

    def to_dict(self) -> dict:
        """The fields, the ratio, and the fastest sample of each side where the timer kept
        its samples (bench/timing.py `Seconds`), else None."""
        return {
            **{field.name: getattr(self, field.name) for field in fields(self)},
            "ratio": self.ratio,
            "luminal_min_s": _fastest(self.luminal_s),
            "peer_min_s": _fastest(self.peer_s),
        }


def _fastest(seconds: float | None) -> float | None:
    samples = getattr(seconds, "samples", None)
    return min(samples) if samples else None


def against(
    bench: str, case: str, times: dict[str, float], ours: str = "luminal", note: str = ""
) -> list[Row]:
    """One row per peer in `times` (every key but `ours`), in their order."""
    return [
        Row(bench, case, times[ours], peer, seconds, note)
        for peer, seconds in times.items()
        if peer != ours
    ]

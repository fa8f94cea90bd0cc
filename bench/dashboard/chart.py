"""PNG charts: one run (luminal against each peer; luminal-only times beside) and the
history of every ratio over runs. matplotlib draws off-screen (Agg), imported here only."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "PyTorch eager": "#ee4c2c",
    "PyTorch eager (transformers)": "#f4a261",
    "onnxruntime": "#2a9d8f",
    "numpy": "#4361ee",
    "llama.cpp": "#6c757d",
}
OTHER = "#8d99ae"


def run_chart(record: dict, path: Path) -> None:
    """Horizontal bars of luminal / peer per (case, peer) on a log axis with 1 marked,
    and a second panel of luminal-only times (compile times, unmeasured peers)."""
    compared = [r for r in record["rows"] if r["ratio"] is not None]
    alone = [r for r in record["rows"] if r["ratio"] is None and r["luminal_s"] > 0]
    panels = [(draw, rows) for draw, rows in ((_ratios, compared), (_alone, alone)) if rows]
    heights = [len(rows) for _, rows in panels] or [1]
    figure, axes = plt.subplots(
        len(heights), 1, figsize=(10, 1.5 + 0.28 * sum(heights)),
        gridspec_kw={"height_ratios": heights}, squeeze=False,
    )  # fmt: skip
    for (draw, rows), axis in zip(panels, axes[:, 0], strict=False):
        draw(axis, rows)
    axes[0, 0].set_title(
        f"luminal vs peers, {record['machine']['cpu']}, {record['threads']} threads, "
        f"{record['luminal']['commit']}, {record['date'][:10]}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _ratios(axis: plt.Axes, rows: list[dict]) -> None:
    """Bars from 1 to each ratio: left of 1 luminal is faster, right of it slower."""
    values = [r["ratio"] for r in rows]
    colours = [COLOURS.get(r["peer"], OTHER) for r in rows]
    axis.barh(range(len(rows)), [v - 1 for v in values], left=1, color=colours)
    axis.set_yticks(range(len(rows)), [f"{r['case']}  vs {r['peer']}" for r in rows], fontsize=7)
    axis.invert_yaxis()
    axis.set_xscale("log")
    low, high = min(min(values), 0.5) / 1.3, max(max(values), 2.0) * 1.3
    axis.set_xlim(low, high)
    ticks = [t for t in (0.1, 0.25, 0.5, 0.8, 1, 1.25, 2, 4, 10) if low <= t <= high]
    axis.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    axis.minorticks_off()
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xlabel("luminal time / peer time (left of 1: luminal faster)")
    for i, value in enumerate(values):
        axis.text(value, i, f" {value:.2f} ", va="center", ha="left" if value >= 1 else "right",
                  fontsize=6)  # fmt: skip


def _alone(axis: plt.Axes, rows: list[dict]) -> None:
    axis.barh(range(len(rows)), [r["luminal_s"] for r in rows], color=OTHER)
    axis.set_yticks(range(len(rows)), [r["case"] for r in rows], fontsize=7)
    axis.invert_yaxis()
    axis.set_xscale("log")
    axis.set_xlabel("luminal seconds (no peer measured)")


def history_chart(series: dict[str, list[tuple[str, float]]], path: Path, title: str) -> None:
    """One line per (case, peer) ratio over runs (x: run dates in order); a line going up
    is a regression."""
    figure, axis = plt.subplots(figsize=(11, 6))
    dates = sorted({date for points in series.values() for date, _ in points})
    index = {date: i for i, date in enumerate(dates)}
    for label, points in series.items():
        xs = [index[date] for date, _ in points]
        axis.plot(xs, [value for _, value in points], marker="o", linewidth=1, label=label)
    axis.set_xticks(range(len(dates)), [d[:16] for d in dates], rotation=30, fontsize=7)
    axis.set_yscale("log")
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_ylabel("luminal / peer (lower is better)")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=5, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

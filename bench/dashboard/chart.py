"""PNG charts: one run (luminal against each peer; luminal-only times beside) and the
history of every ratio over runs. matplotlib draws off-screen (Agg), imported here only."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

PLAIN = FuncFormatter(lambda value, _: f"{value:g}")

COLOURS = {
    "PyTorch eager": "#ee4c2c",
    "PyTorch eager (transformers)": "#f4a261",
    "onnxruntime": "#2a9d8f",
    "numpy": "#4361ee",
    "llama.cpp": "#6c757d",
    "luminal static": "#b8c0cc",
    "luminal fast": "#7d8597",
    "luminal 1 rank": "#495057",
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
        len(heights), 1, figsize=(12, 1.5 + 0.28 * sum(heights)),
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
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def _ratios(axis: plt.Axes, rows: list[dict]) -> None:
    """Bars from 1 to each ratio: left of 1 luminal is faster, right of it slower."""
    values = [r["ratio"] for r in rows]
    colours = [COLOURS.get(r["peer"], OTHER) for r in rows]
    axis.barh(range(len(rows)), [v - 1 for v in values], left=1, color=colours)
    labels = [f"{r['bench']} · {r['case']}  vs {r['peer']}" for r in rows]
    axis.set_yticks(range(len(rows)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xscale("log")
    low, high = min(min(values), 0.5) / 1.3, max(max(values), 2.0) * 1.3
    axis.set_xlim(low, high)
    ticks = [t for t in (0.01, 0.03, 0.1, 0.25, 0.5, 1, 2, 4, 10, 30) if low <= t <= high]
    axis.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    axis.minorticks_off()
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xlabel("luminal time / peer time (left of 1: luminal faster)")
    for i, value in enumerate(values):
        axis.text(value, i, f" {value:.2f} ", va="center", ha="left" if value >= 1 else "right",
                  fontsize=6)  # fmt: skip
    peers = dict.fromkeys(r["peer"] for r in rows)
    handles = [patches.Patch(color=COLOURS.get(p, OTHER), label=p) for p in peers]
    axis.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _alone(axis: plt.Axes, rows: list[dict]) -> None:
    axis.barh(range(len(rows)), [r["luminal_s"] for r in rows], color=OTHER)
    labels = [
        f"{r['bench']} · {r['case']}" + (f" ({r['peer']}: not measured)" if r["peer"] else "")
        for r in rows
    ]
    axis.set_yticks(range(len(rows)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xscale("log")
    axis.set_xlabel("luminal seconds (no peer measured)")


def history_chart(panels: dict[str, dict[str, list[tuple[str, float]]]], path: Path) -> None:
    """Small multiples, one panel per (bench, figure kind): one line per case over runs
    (x: run dates in order, y log). Every figure is lower-is-better, so a line going up
    is a regression."""
    dates = sorted(
        {d for series in panels.values() for points in series.values() for d, _ in points}
    )
    index = {date: i for i, date in enumerate(dates)}
    columns = 2
    rows = max(1, -(-len(panels) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.6 * rows), squeeze=False)
    for axis, (title, series) in zip(axes.flat, panels.items(), strict=False):
        for label, points in series.items():
            xs = [index[date] for date, _ in points]
            axis.plot(xs, [v for _, v in points], marker="o", linewidth=1, label=label)
        axis.set_xticks(range(len(dates)), [d[:16] for d in dates], rotation=20, fontsize=6)
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(PLAIN)
        low, high = axis.get_ylim()  # minor labels only where the axis spans < 10x
        axis.yaxis.set_minor_formatter(PLAIN if high / low < 10 else NullFormatter())
        axis.tick_params(axis="y", which="both", labelsize=6)
        if "ratio" in title:
            axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_title(title, fontsize=9)
        axis.legend(fontsize=5, loc="best")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)

"""History over every recorded run: history.md (a table per machine, the recent runs side
by side, the change since the previous run flagged) and a chart per machine. Quick smoke
runs are not history. Both figures are lower-is-better (a ratio luminal / peer, or
luminal's seconds where no peer was measured), so a regression is a number that grows."""

from __future__ import annotations

import json
from pathlib import Path

from .chart import history_chart
from .report import SCHEMA, ratio, seconds

COLUMNS = 8  # recent runs shown side by side
WORSE, BETTER = 1.10, 0.90  # change since the previous run that gets flagged


def load_runs(folder: Path) -> list[dict]:
    """Every full (not quick) run recorded in `folder`, oldest first."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if record.get("schema") == SCHEMA and not record["timing"]["quick"]:
            runs.append(record)
    return sorted(runs, key=lambda r: r["date"])


def figure(row: dict) -> float | None:
    """The lower-is-better number a row contributes to the history."""
    if row["peer_s"] is not None:
        return row["ratio"]
    return row["luminal_s"]


def key(row: dict) -> tuple[str, str, str]:
    return row["bench"], row["case"], row["peer"] or ""


def by_machine(runs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for run in runs:
        grouped.setdefault(run["machine"]["slug"], []).append(run)
    return grouped


def write_history(folder: Path) -> list[Path]:
    """Rewrite history.md and history-<machine>.png from the runs in `folder`."""
    written = []
    sections = ["# luminal benchmark history", "", _legend()]
    for slug, runs in by_machine(load_runs(folder)).items():
        sections.append(_section(slug, runs))
        chart = folder / f"history-{slug}.png"
        history_chart(_panels(runs), chart)
        written.append(chart)
    path = folder / "history.md"
    path.write_text("\n".join(sections) + "\n")
    return [path, *written]


def _legend() -> str:
    return (
        "Each cell is luminal / peer (below 1: luminal faster), or luminal's own time where no "
        "peer was measured; lower is better everywhere. `change` compares the latest run "
        f"with the one before: **worse** above {WORSE:.2f}×, better below {BETTER:.2f}×. "
        "Runs on a loaded machine say so in their notes.\n"
    )


def _section(slug: str, runs: list[dict]) -> str:
    recent = runs[-COLUMNS:]
    header = [f"{r['date'][:16]} `{r['luminal']['commit']}`" for r in recent]
    lines = [
        f"## {slug}",
        "",
        f"![history]({f'history-{slug}.png'})",
        "",
        "| bench | case | peer | " + " | ".join(header) + " | change |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in recent) + " | --- |",
    ]
    keys: dict[tuple[str, str, str], None] = {}
    tables = []
    for run in recent:
        table = {key(row): row for row in run["rows"]}
        keys.update(dict.fromkeys(table))
        tables.append(table)
    for k in keys:
        cells = [_format(table.get(k)) for table in tables]
        values = [figure(t[k]) for t in tables if k in t and figure(t[k]) is not None]
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2] or '—'} | " + " | ".join(cells) + f" | {_change(values)} |"
        )
    notes = [f"- {r['date'][:16]}: {r['notes']}" for r in recent if r.get("notes")]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _format(row: dict | None) -> str:
    if row is None:
        return ""
    return ratio(row["ratio"]) if row["peer_s"] is not None else seconds(row["luminal_s"])


def _change(values: list[float]) -> str:
    if len(values) < 2 or values[-2] <= 0:
        return ""
    change = values[-1] / values[-2]
    if change > WORSE:
        return f"**worse** {change:.2f}×"
    if change < BETTER:
        return f"better {change:.2f}×"
    return f"{change:.2f}×"


def _panels(runs: list[dict]) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """(date, figure) points per case, grouped into panels by bench and figure kind."""
    panels: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for run in runs:
        for row in run["rows"]:
            value = figure(row)
            if value is None:
                continue
            compared = row["peer_s"] is not None
            title = f"{row['bench']}: " + (
                "luminal / peer ratio" if compared else "luminal seconds"
            )
            label = f"{row['case']} vs {row['peer']}" if compared else row["case"]
            panels.setdefault(title, {}).setdefault(label, []).append((run["date"], value))
    return panels

"""A run's record (the JSON schema) and its Markdown table.

Record (`SCHEMA` 1): `date` (ISO, UTC), `machine` (dict, see machine.py), `luminal`
({commit, dirty}), `threads`, `timing` ({method, rounds, quick}), `peers` ({name: version
or why absent}), `notes`, `load_average` ({start, end}: os.getloadavg()), `benches`
([{name, status, seconds, error}]) and `rows`, each {bench, case, luminal_s, peer, peer_s,
ratio, luminal_min_s, peer_min_s, min_ratio, note, threads, machine, commit, date}: times
are medians over rounds, `*_min_s` the fastest round (None where the bench's timing keeps
no samples), ratios luminal / peer."""

from __future__ import annotations

import json
from pathlib import Path

from .machine import describe

SCHEMA = 1
ROW_KEYS = (
    "bench", "case", "luminal_s", "peer", "peer_s", "ratio", "luminal_min_s", "peer_min_s",
    "min_ratio", "note", "threads", "machine", "commit", "date",
)  # fmt: skip

# the bench scripts' peer names -> the dashboard's
PEER_ALIASES = {
    "torch": "PyTorch eager",
    "torch eager": "PyTorch eager",
    "transformers": "PyTorch eager (transformers)",
}


def stamp_rows(rows: list[dict], run: dict) -> list[dict]:
    """Rows in the schema: peer names unified, the run's threads, machine, commit, date."""
    context = {
        "threads": run["threads"],
        "machine": describe(run["machine"]),
        "commit": run["luminal"]["commit"],
        "date": run["date"],
    }
    stamped = []
    for row in rows:
        peer = PEER_ALIASES.get(row["peer"], row["peer"])
        fastest = row.get("luminal_min_s"), row.get("peer_min_s")
        min_ratio = fastest[0] / fastest[1] if None not in fastest and fastest[1] > 0 else None
        full = {**row, "peer": peer, "min_ratio": min_ratio, **context}
        stamped.append({key: full.get(key) for key in ROW_KEYS})
    return stamped


def write_json(record: dict, path: Path) -> None:
    path.write_text(json.dumps(record, indent=1) + "\n")


def seconds(value: float | None) -> str:
    """A time with a readable unit: 812 µs, 3.42 ms, 1.25 s; — when absent."""
    if value is None:
        return "—"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(record: dict, chart_name: str | None) -> str:
    """The run as Markdown: context, peers, one table row per result row, bench status."""
    run = record
    luminal = run["luminal"]
    dirty = " (luminal/ had uncommitted changes)" if luminal["dirty"] else ""
    timing = run["timing"]
    lines = [
        f"# luminal benchmarks, {run['date']}",
        "",
        f"- machine: {_machine_line(run['machine'])}",
        f"- luminal commit: `{luminal['commit']}`{dirty}",
        f"- threads: {run['threads']} for luminal and every peer",
        f"- timing: {timing['method']}{', quick smoke run' if timing['quick'] else ''}",
        "- ratio = luminal time / peer time: below 1 luminal is faster; times are medians, "
        "'ratio of minima' compares each side's fastest round (steadier on a loaded machine)",
    ]
    if run.get("notes"):
        lines.append(f"- notes: {run['notes']}")
    if run.get("load_average"):
        load = run["load_average"]
        lines.append(
            f"- load average (1/5/15 min) at start {_load(load.get('start'))}, "
            f"at end {_load(load.get('end'))} on {run['machine']['cores']} cores"
        )
    counts: dict[str, int] = {}
    for row in run["rows"]:
        if row["peer"] is not None and row["peer_s"] is not None:
            counts[row["peer"]] = counts.get(row["peer"], 0) + 1
    statuses = {**run["peers"], **{p: "luminal itself" for p in counts if p not in run["peers"]}}
    lines += ["", "## Peers", "", "| peer | version or status | rows measured |"]
    lines += ["| --- | --- | ---: |"]
    lines += [
        f"| {_cell(name)} | {_cell(status)} | {counts.get(name, 0)} |"
        for name, status in statuses.items()
    ]
    lines += ["", "## Results", ""]
    if chart_name:
        lines += [f"![luminal against its peers]({chart_name})", ""]
    lines += [
        "| bench | case | luminal | peer | peer time | ratio | ratio of minima | note |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for row in run["rows"]:
        cells = (
            row["bench"], row["case"], seconds(row["luminal_s"]), row["peer"] or "—",
            seconds(row["peer_s"]), ratio(row["ratio"]), ratio(row["min_ratio"]), row["note"],
        )  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", "## Benches", "", "| bench | status | seconds |", "| --- | --- | ---: |"]
    for bench in run["benches"]:
        status = bench["status"] + (f": {bench['error']}" if bench.get("error") else "")
        lines.append(f"| {bench['name']} | {_cell(status)} | {bench['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def _load(values: list[float] | None) -> str:
    return "?" if not values else "/".join(f"{v:.1f}" for v in values)


def _machine_line(info: dict) -> str:
    return (
        f"{info['cpu']}, {info['cores']} cores, {info['arch']}, {info['memory_gib']} GiB, "
        f"{info['system']}, Python {info['python']}"
    )

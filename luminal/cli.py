"""The `luminal` console script. `luminal search-report` prints what measured search
tried and chose for the models cached on this machine."""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from luminal.search.cache import SearchCache, SearchRecord


def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e3:.3f} ms"


def _when(created: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(created).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):  # a date no clock gives
        return "unknown date"


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (escape sequences, carriage
    returns, bidirectional overrides, ...) written as a Python escape instead."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _times(record: SearchRecord) -> str:
    baseline, best = record.baseline_seconds, record.best_seconds
    if not math.isfinite(baseline):
        return "  static program not measured"
    speedup = f" ({baseline / best:.2f}x)" if best > 0 and math.isfinite(best) else ""
    return f"  static {_ms(baseline)} -> chosen {_ms(best)}{speedup}"


def _chosen_note(record: SearchRecord) -> str:
    if record.chosen:
        return ""
    if not record.reusable:
        return " the static program (the search could not measure it)"
    return " the static program (nothing measured faster)"


def _space(record: SearchRecord) -> list[str]:
    """The search space: options per site (kernel or program region, the static choice
    included) and the configurations they span."""
    if not record.sites:
        return ["  search space: no site has alternatives"]
    total = math.prod(len(options) for options in record.sites.values())
    lines = [f"  search space: {len(record.sites)} sites, {total} configurations"]
    for site, options in sorted(record.sites.items()):
        lines.append(f"    {site}: {len(options)} options")
    return lines


def format_record(record: SearchRecord, trials: bool = True) -> str:
    lines = [
        f"search {record.key}  ({record.label})",
        f"  backend {record.backend}, mode {record.mode}, luminal {record.version}, "
        f"{_when(record.created)}",
        f"  cpu {record.cpu}",
        f"  searched {record.search_seconds:.1f} s, {len(record.trials)} candidates measured, "
        f"ended: {record.stopped_by}",
        _times(record),
        *_space(record),
        "  chosen:" + _chosen_note(record),
    ]
    for site, option in sorted(record.chosen.items()):
        lines.append(f"    {site} = {option}")
    if trials:
        lines.append("  tried:")
        for trial in record.trials:
            change = ", ".join(f"{k}={v}" for k, v in sorted(trial.config.items())) or "static"
            detail = f"  ({trial.detail})" if trial.detail else ""
            lines.append(f"    {trial.status:<13} {_ms(trial.seconds):>12}  {change}{detail}")
    return "\n".join(printable(line) for line in lines)


def search_report(directory: Path, prefix: str = "", trials: bool = True) -> str:
    entries = SearchCache(directory).records()
    shown = []
    for path, record in entries:
        if not path.stem.startswith(prefix):
            continue
        if record is None:
            name = printable(path.stem)
            shown.append(f"search {name}: unreadable entry (ignored; re-searched on use)")
        else:
            shown.append(format_record(record, trials))
    if not shown:
        where = printable(str(directory))
        return f"no cached searches in {where}" + (
            f" matching {printable(repr(prefix))}" if prefix else ""
        )
    return "\n\n".join(shown)


def main(argv: Sequence[str] | None = None) -> int:
    from luminal.backends.cpu.toolchain import cache_root

    parser = argparse.ArgumentParser(prog="luminal", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("search-report", help="what measured search tried and chose")
    report.add_argument("key", nargs="?", default="", help="a cache key (or its first letters)")
    report.add_argument(
        "--cache-dir", type=Path, default=None, help="search cache (default: the luminal cache)"
    )
    report.add_argument("--brief", action="store_true", help="only the choices, not each trial")
    args = parser.parse_args(argv)
    directory = args.cache_dir or cache_root() / "search"
    print(search_report(directory, args.key, trials=not args.brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `luminal` console script. `luminal search-report` prints what measured search
tried and chose for the models cached on this machine."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from luminal.search.cache import SearchCache, SearchRecord


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def format_record(record: SearchRecord, trials: bool = True) -> str:
    created = datetime.datetime.fromtimestamp(record.created).isoformat(timespec="seconds")
    speedup = record.baseline_seconds / record.best_seconds if record.best_seconds else 1.0
    lines = [
        f"search {record.key}  ({record.label})",
        f"  backend {record.backend}, mode {record.mode}, luminal {record.version}, {created}",
        f"  cpu {record.cpu}",
        f"  searched {record.search_seconds:.1f} s, {len(record.trials)} candidates measured",
        f"  static {_ms(record.baseline_seconds)} -> chosen {_ms(record.best_seconds)} "
        f"({speedup:.2f}x)",
        "  chosen:" if record.chosen else "  chosen: the static program (nothing measured faster)",
    ]
    for site, option in sorted(record.chosen.items()):
        lines.append(f"    {site} = {option}")
    if trials:
        lines.append("  tried:")
        for trial in record.trials:
            change = ", ".join(f"{k}={v}" for k, v in sorted(trial.config.items())) or "static"
            detail = f"  ({trial.detail})" if trial.detail else ""
            lines.append(f"    {trial.status:<13} {_ms(trial.seconds):>12}  {change}{detail}")
    return "\n".join(lines)


def search_report(directory: Path, prefix: str = "", trials: bool = True) -> str:
    entries = SearchCache(directory).records()
    shown = []
    for path, record in entries:
        if not path.stem.startswith(prefix):
            continue
        if record is None:
            shown.append(f"search {path.stem}: unreadable entry (ignored; re-searched on use)")
        else:
            shown.append(format_record(record, trials))
    if not shown:
        return f"no cached searches in {directory}" + (f" matching {prefix!r}" if prefix else "")
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

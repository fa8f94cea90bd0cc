"""On-disk cache of search results: one JSON file per (graph structure, shape bucket,
backend, CPU model, luminal version). A file that cannot be read back as a complete
entry is ignored (and replaced by the next search), never trusted."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENTRY_FORMAT = 1


def dim_bucket(size: int) -> int:
    """Symbolic dims share a cached search within a power-of-two bucket (1, 2, 4, 8, ...)."""
    bucket = 1
    while bucket < size:
        bucket *= 2
    return bucket


def cpu_model() -> str:
    """The processor's model name (a search result only holds on the machine it ran on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def luminal_version() -> str:
    from luminal import __version__

    return __version__


def search_key(fingerprint: str, dims: dict[str, int], backend: str, space_version: str) -> str:
    buckets = ",".join(f"{name}={dim_bucket(size)}" for name, size in sorted(dims.items()))
    text = "\n".join([fingerprint, buckets, backend, space_version, cpu_model(), luminal_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Trial:
    """One measured candidate: the sites it changes from the default, and the outcome
    (`ok`, `slower`, `wrong`, `nan`, `crashed`, `timeout`, `compile error`)."""

    config: dict[str, str]
    status: str
    seconds: float | None = None
    detail: str = ""


@dataclass
class SearchRecord:
    key: str
    label: str
    backend: str
    mode: str
    cpu: str
    version: str
    chosen: dict[str, str]
    best_seconds: float
    baseline_seconds: float
    search_seconds: float
    sites: dict[str, list[str]]
    trials: list[Trial] = field(default_factory=list)
    stopped_by: str = "space exhausted"
    created: float = field(default_factory=time.time)
    format: int = ENTRY_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SearchRecord:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != ENTRY_FORMAT:
            raise ValueError("not a search record of this format")
        trials = [Trial(**t) for t in data.pop("trials")]
        record = cls(**data, trials=trials)
        if not isinstance(record.chosen, dict) or not isinstance(record.sites, dict):
            raise ValueError("malformed chosen/sites")
        for site, option in record.chosen.items():
            if option not in record.sites.get(site, []):
                raise ValueError(f"chosen option {option!r} is not among site {site}'s")
        return record


class SearchCache:
    """JSON records under `directory`, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str) -> SearchRecord | None:
        """The record, or None when absent or unreadable (a corrupted entry is ignored)."""
        path = self.path(key)
        try:
            record = SearchRecord.from_json(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return record if record.key == key else None

    def store(self, record: SearchRecord) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(record.key)
        temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        temp.write_text(record.to_json())
        os.replace(temp, path)
        return path

    def records(self) -> list[tuple[Path, SearchRecord | None]]:
        """Every entry, newest first; None for files that do not parse."""
        if not self.directory.is_dir():
            return []
        paths = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        entries: list[tuple[Path, Any]] = []
        for path in paths:
            try:
                entries.append((path, SearchRecord.from_json(path.read_text())))
            except (OSError, ValueError, TypeError, KeyError):
                entries.append((path, None))
        return entries

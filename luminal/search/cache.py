"""On-disk cache of search results: one JSON file per (graph structure, shape bucket,
backend, CPU model, luminal version). A file that cannot be read back as a complete
entry of the right types (truncated, edited, nested without end, a symlink, a FIFO, a
directory, too large) is ignored and replaced by the next search, never trusted."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import stat
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENTRY_FORMAT = 1
MAX_ENTRY_BYTES = 32 << 20  # far above any real record (thousands of trials)
MEASURING_FAILED = "measuring failed"  # how `stopped_by` starts when the search fell back


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

    @property
    def reusable(self) -> bool:
        """Whether a later compile may apply this record: a search that fell back because
        the measuring process failed measured nothing, so the next compile searches."""
        return not self.stopped_by.startswith(MEASURING_FAILED)

    @classmethod
    def from_json(cls, text: str) -> SearchRecord:
        """The record `text` holds; ValueError unless every field has its type."""
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(data, dict) or data.get("format") != ENTRY_FORMAT:
            raise ValueError("not a search record of this format")
        _check_fields(data, RECORD_FIELDS, "search record")
        for trial in data["trials"]:
            _check_fields(trial, TRIAL_FIELDS, "trial")
        trials = [Trial(**t) for t in data.pop("trials")]
        record = cls(**data, trials=trials)
        for site, option in record.chosen.items():
            if option not in record.sites.get(site, []):
                raise ValueError(f"chosen option {option!r} is not among site {site}'s")
        return record


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_site_table(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(options, list) and all(isinstance(o, str) for o in options)
        for options in value.values()
    )


RECORD_FIELDS: dict[str, Callable[[Any], bool]] = {
    "key": _is_str,
    "label": _is_str,
    "backend": _is_str,
    "mode": _is_str,
    "cpu": _is_str,
    "version": _is_str,
    "chosen": _is_str_map,
    "best_seconds": _is_number,
    "baseline_seconds": _is_number,
    "search_seconds": _is_number,
    "sites": _is_site_table,
    "trials": lambda value: isinstance(value, list),
    "stopped_by": _is_str,
    "created": _is_number,
    "format": lambda value: value == ENTRY_FORMAT,
}
TRIAL_FIELDS: dict[str, Callable[[Any], bool]] = {
    "config": _is_str_map,
    "status": _is_str,
    "seconds": lambda value: value is None or _is_number(value),
    "detail": _is_str,
}


def _check_fields(data: Any, fields: dict[str, Callable[[Any], bool]], what: str) -> None:
    """ValueError unless `data` is a mapping with exactly `fields`, each of its type."""
    if not isinstance(data, dict) or set(data) != set(fields):
        raise ValueError(f"a {what} needs exactly the fields {sorted(fields)}")
    for name, valid in fields.items():
        if not valid(data[name]):
            raise ValueError(f"{what} field {name!r} has the wrong type")


def _read_entry(path: Path) -> str:
    """The text of a regular file of at most MAX_ENTRY_BYTES, opened without following a
    symlink and without blocking on a FIFO; OSError or ValueError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(MAX_ENTRY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_ENTRY_BYTES:
        raise ValueError(f"{path} is larger than {MAX_ENTRY_BYTES} bytes")
    return data.decode("utf-8")


class SearchCache:
    """JSON records under `directory`, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def read(self, path: Path) -> SearchRecord | None:
        """The record at `path`, or None for anything that is not a valid record."""
        try:
            return SearchRecord.from_json(_read_entry(path))
        except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError included
            return None

    def load(self, key: str) -> SearchRecord | None:
        """The record to reuse for `key`, or None: absent, unreadable, another key's, or
        a search that fell back without measuring."""
        record = self.read(self.path(key))
        if record is None or record.key != key or not record.reusable:
            return None
        return record

    def store(self, record: SearchRecord) -> Path | None:
        """Write `record` atomically (a fresh private temporary file renamed over the
        entry, replacing whatever was there, a symlink included). A cache that cannot be
        written costs the reuse of this result (one warning), never the compile."""
        path = self.path(record.key)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, as the root
            fd, temp = tempfile.mkstemp(prefix=f".{record.key}.", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    file.write(record.to_json())
                os.replace(temp, path)
            except BaseException:
                os.unlink(temp)
                raise
        except OSError as error:
            warnings.warn(f"search result not cached in {self.directory}: {error}", stacklevel=2)
            return None
        return path

    def records(self) -> list[tuple[Path, SearchRecord | None]]:
        """Every entry, newest first; None for files that are not valid records."""
        dated: list[tuple[float, Path]] = []
        try:
            for path in self.directory.glob("*.json"):
                with contextlib.suppress(OSError):  # removed meanwhile
                    dated.append((path.lstat().st_mtime, path))
        except OSError:  # no directory, or one that cannot be listed
            return []
        dated.sort(key=lambda item: (-item[0], item[1].name))
        return [(path, self.read(path)) for _, path in dated]

"""Files in the kernel cache: private atomic writes, durable publishing, and the manifests
that decide whether a cached object or library may be used.

Every artefact (`<key>.o`, `<key>.so`) is published by renaming a finished temporary over
its final name, and then described by `<name>.manifest`, written the same way: its key, the
SHA-256 of its bytes, the hashes of what it was built from (sources, header, objects), the
compiler identity and the luminal version. An artefact is used only when its manifest
parses, names the expected key and build, and the artefact's bytes hash to the recorded
value; anything else (missing, truncated, edited, another key's or a foreign file such as
`libm.so.6`) is rebuilt. A library's data is `fsync`ed before its rename and the directory
after, so a crash cannot leave a manifest describing bytes that never reached the disk (and
if it did, the hash would catch it). Objects and sources are not fsynced: a lost one fails
its check and is rebuilt.

Hashing happens once per artefact and process: a verified file is remembered with its
`stat` identity (device, inode, size, mtime, ctime); a later check costs one `stat`, and a
file replaced or rewritten since (new inode or ctime) is hashed again before it is loaded.
Between that check and `dlopen` the file could only be swapped by someone who can write the
cache directory, which `cache_location` guarantees is the user alone (0700, ours): the same
trust we give the manifest itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from luminal.backends.cpu.cache_location import PRIVATE_FILE

MANIFEST_FORMAT = 1
MANIFEST_SUFFIX = ".manifest"
MAX_MANIFEST_BYTES = 1 << 20
TEMP_MARKER = ".tmp-"
STALE_TEMP_SECONDS = 3600.0
READ_CHUNK = 1 << 20

_lock = threading.Lock()
_verified: dict[str, tuple[tuple[int, ...], Manifest]] = {}


# ------------------------------------------------------------------------------ writing
def temp_name(final: Path) -> str:
    """A name no other writer uses, marked so `clean_stale_temps` can find it."""
    unique = f"{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}"
    return f"{final.name}{TEMP_MARKER}{unique}"


def write_private(path: Path, data: bytes, durable: bool = False) -> None:
    """Write `data` to `path` atomically, mode 0600 whatever the umask."""
    temp = path.with_name(temp_name(path))
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), PRIVATE_FILE)
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        unlink(temp)
        raise


def ensure_content(path: Path, data: bytes) -> None:
    """Make `path` hold exactly `data` (rewritten when missing or edited), so what gcc reads
    is what we generated."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    write_private(path, data)


def publish(temp: Path, final: Path, durable: bool) -> None:
    """Rename a finished temporary (made by gcc) over `final`, private, its data on disk
    first when `durable`."""
    descriptor = os.open(temp, os.O_RDONLY)
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
        if durable:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temp, final)


def sync_directory(directory: Path) -> None:
    """Make the renames in `directory` durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def clean_stale_temps(directory: Path, max_age: float = STALE_TEMP_SECONDS) -> int:
    """Remove temporaries older than `max_age` seconds (left by killed compiles); returns how
    many. Younger ones may belong to a compile still running in another process."""
    now = time.time()
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if TEMP_MARKER not in entry.name:
            continue
        try:
            if now - entry.stat().st_mtime > max_age:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            pass
    return removed


# ------------------------------------------------------------------------------ manifests
@dataclass(frozen=True)
class Manifest:
    """What a cached artefact is and what it was built from."""

    key: str
    build: str  # digest of compiler identity, luminal version and cache format
    sha256: str
    size: int
    inputs: tuple[tuple[str, str], ...]  # (name, sha256) of sources, header, objects

    def to_json(self) -> bytes:
        record = {
            "format": MANIFEST_FORMAT,
            "key": self.key,
            "build": self.build,
            "sha256": self.sha256,
            "size": self.size,
            "inputs": [list(item) for item in self.inputs],
        }
        return json.dumps(record, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse strictly; ValueError/TypeError/KeyError for anything malformed."""
        record = json.loads(data)
        if not isinstance(record, dict) or record.get("format") != MANIFEST_FORMAT:
            raise ValueError("not a manifest of this format")
        strings = [record["key"], record["build"], record["sha256"]]
        inputs = record["inputs"]
        if not all(isinstance(s, str) for s in strings) or not isinstance(inputs, list):
            raise TypeError("manifest fields of the wrong type")
        if type(record["size"]) is not int:
            raise TypeError("manifest size is not an integer")
        pairs = tuple(tuple(item) for item in inputs)
        if not all(len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs):
            raise TypeError("manifest inputs are not (name, sha256) pairs")
        return cls(record["key"], record["build"], record["sha256"], record["size"], pairs)


def manifest_path(artefact: Path) -> Path:
    return artefact.with_name(artefact.name + MANIFEST_SUFFIX)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _hash_open_file(path: Path) -> tuple[str, int, tuple[int, ...]]:
    """SHA-256, size and stat identity of the bytes read through one descriptor."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            sha.update(chunk)
        info = os.fstat(handle.fileno())
    return sha.hexdigest(), info.st_size, _identity(info)


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def record(
    artefact: Path, key: str, build: str, inputs: tuple[tuple[str, str], ...], durable: bool
) -> Manifest:
    """Hash a freshly published artefact and write its manifest atomically (the directory
    synced after when `durable`); the artefact counts as verified for this process."""
    digest, size, identity = _hash_open_file(artefact)
    manifest = Manifest(key, build, digest, size, inputs)
    write_private(manifest_path(artefact), manifest.to_json())
    if durable:
        sync_directory(artefact.parent)
    with _lock:
        _verified[os.fspath(artefact)] = (identity, manifest)
    return manifest


def verify(artefact: Path, key: str, build: str) -> Manifest | None:
    """The artefact's manifest when the file may be used: the manifest parses, names `key`
    and `build`, and the file's bytes hash to the recorded SHA-256; else None. Hashes only
    when the file changed since it was last verified in this process."""
    name = os.fspath(artefact)
    try:
        identity = _identity(os.stat(artefact))
    except OSError:
        return None
    with _lock:
        known = _verified.get(name)
    if known is not None and known[0] == identity:
        manifest = known[1]
    else:
        manifest = _verify_from_disk(artefact)
        if manifest is None:
            return None
    return manifest if manifest.key == key and manifest.build == build else None


def _read_manifest(artefact: Path) -> Manifest | None:
    try:
        with open(manifest_path(artefact), "rb") as handle:
            return Manifest.from_json(handle.read(MAX_MANIFEST_BYTES + 1))
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None


def _verify_from_disk(artefact: Path) -> Manifest | None:
    manifest = _read_manifest(artefact)
    if manifest is None:
        return None
    try:
        digest, size, identity = _hash_open_file(artefact)
    except OSError:
        return None
    if digest != manifest.sha256 or size != manifest.size:
        return None
    with _lock:
        _verified[os.fspath(artefact)] = (identity, manifest)
    return manifest


def verified_copy(artefact: Path, key: str, build: str) -> Path | None:
    """A private copy of `artefact` (next to it, a temporary name) whose bytes hash to what
    its manifest records, to be dlopened and unlinked; None when they do not. Hashing the
    bytes while copying them makes what is checked exactly what is loaded, and the mapping
    then belongs to a file nobody else names, so a later in-place truncation of the cache
    file (`cp` over it) cannot SIGBUS this process."""
    manifest = _read_manifest(artefact)
    if manifest is None or manifest.key != key or manifest.build != build:
        return None
    copy = artefact.with_name(temp_name(artefact))
    sha = hashlib.sha256()
    try:
        descriptor = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with open(artefact, "rb") as source, os.fdopen(descriptor, "wb") as target:
            while chunk := source.read(READ_CHUNK):
                sha.update(chunk)
                target.write(chunk)
    except OSError:
        unlink(copy)
        return None
    if sha.hexdigest() != manifest.sha256:
        unlink(copy)
        return None
    return copy

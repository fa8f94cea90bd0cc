"""The lowered-program cache: a second process compiling the same graph with the same
options loads the program `CPUCompiler(mode="fast")` produced before, skipping
saturation, fusion, scheduling and code generation (the kernel cache then skips gcc).

An entry is keyed by a SHA-256 over the graph's structure before compiling (nodes, ops,
views, shapes, dtypes, outputs, forwarding, the constant matrices whose values lowering
folds in; never the input arrays, so weights may change between processes), the
compiler's options, the backend, the luminal version, a digest of luminal's own source
files (an edited checkout never reuses a stale program), the C compiler's identity and
the BLAS flags. The entry holds that structure again, byte for
byte, and is used only when it equals the graph's: a hit is provably the program this
graph would be lowered to (up to the e-graph's time limit, which may stop saturation at
another valid program), so it is not run against the reference again when it was
verified before it was stored.

Trust is the kernel cache's (`cache_location`, `cache_files`): entries live in the
private cache root, are written atomically, and start with the SHA-256 of their payload;
an entry that is missing, truncated, edited or unreadable is a miss, and the compile that
follows overwrites it. Graphs holding a Python `Function` op are never cached (the
callable belongs to its process). `LUMINAL_PROGRAM_CACHE=0` turns the cache off.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import pickle
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luminal import ops
from luminal.backends.cpu import cache_files, toolchain
from luminal.backends.cpu.cpu_caches import winograd_weight_limit
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.graph import Graph, NodeTable
from luminal.schedule.constant_matrix import constant_value
from luminal.shape.expr import Atom, Expr

FORMAT = "1"
DIRECTORY = "cpu-programs"
SUFFIX = ".program"
MAGIC = b"luminal-program\n"
ENVIRONMENT_VARIABLE = "LUMINAL_PROGRAM_CACHE"
# what CPUCompiler.compile changes on the graph (everything else it leaves as it was)
STATE = ("nodes", "_next_id", "forward", "retrieved", "kept", "schedule", "dim_checks")


class _Pickler(pickle.Pickler):
    """Pickles symbolic expressions by their content, not their cached hashes: string
    hashes differ per process, so default pickles of equal graphs differ, and an
    unpickled atom would keep another process's hash."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Atom:
            return Atom, (obj.op, obj.args, obj.upper)
        if type(obj) is Expr:
            return Expr, (obj.terms,)
        return NotImplemented


def dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def enabled() -> bool:
    return os.environ.get(ENVIRONMENT_VARIABLE, "1").strip() not in ("0", "false", "no", "off")


def structure(graph: Graph) -> bytes | None:
    """The graph as compiling sees it, as canonical bytes; None when it cannot be cached
    (a Python Function op, or something that does not pickle)."""
    if any(isinstance(node.op, ops.Function) for node in graph.nodes.values()):
        return None
    try:
        return dumps(_canonical(graph))
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None


def _canonical(graph: Graph) -> tuple:
    schedule = graph.schedule
    current = schedule is not None and schedule[0] == graph.nodes.version
    return (
        sorted(graph.nodes.items()),
        graph._next_id,
        sorted(graph.forward.items()),
        sorted(graph.retrieved),
        sorted(graph.kept),
        tuple(schedule[1]) if current else None,
        list(graph.dim_checks),
        # the constant matrices lowering folds (`schedule/constant_matrix.py`): those whose
        # data still matches the digest in their label
        sorted(n for n in graph.constant_inputs if constant_value(graph, n) is not None),
    )


@functools.cache
def source_identity() -> str:
    """A digest of luminal's source files (path, size, modification time): a checkout
    edited since an entry was written never reuses it."""
    import luminal

    root = Path(luminal.__file__).parent
    digest = hashlib.sha256()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".egg", ".h", ".c")):
                path = os.path.join(directory, name)
                info = os.stat(path)
                relative = os.path.relpath(path, root)
                digest.update(f"{relative}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def program_key(structure_bytes: bytes, options: tuple) -> str:
    """The entry's name: structure, options, backend, versions, toolchain, BLAS, the cache
    size the lowering's Winograd fusion depends on (the static lowering reads thread counts
    at run time, so they are not part of it)."""
    flags = toolchain.blas_flags()
    digest = hashlib.sha256()
    for part in (
        f"luminal-program {FORMAT} cpu",
        toolchain._luminal_version(),
        source_identity(),
        toolchain.build_id(),
        "\0".join((*flags.cflags, *flags.ldflags)),
        repr(options),
        f"winograd weights {winograd_weight_limit()}",
    ):
        digest.update(part.encode() + b"\0")
    digest.update(structure_bytes)
    return digest.hexdigest()


@dataclass
class Entry:
    """A stored program: the structure it was compiled from, the graph's state after
    compiling (`STATE`), the CompiledGraph (not built) and whether it was verified."""

    structure: bytes
    state: dict[str, Any]
    compiled: CompiledGraph
    verified: bool


def capture(structure_bytes: bytes, graph: Graph, compiled: CompiledGraph, verified: bool) -> Entry:
    """The entry for a graph just compiled; kernel IR is left out (the runtime needs only
    the C sources)."""
    state = {name: getattr(graph, name) for name in STATE}
    state["nodes"] = dict(graph.nodes)
    schedule = graph.schedule
    current = schedule is not None and schedule[0] == graph.nodes.version
    state["schedule"] = tuple(schedule[1]) if current else None
    stored = CompiledGraph.__new__(CompiledGraph)
    stored.__setstate__(compiled.__getstate__())
    stored.segments = [
        dataclasses.replace(
            segment, kernels=[dataclasses.replace(k, kernel=None) for k in segment.kernels]
        )
        for segment in compiled.segments
    ]
    return Entry(structure_bytes, state, stored, verified)


def install(graph: Graph, entry: Entry) -> CompiledGraph:
    """Give `graph` the compiled state of `entry` (its structure equals the entry's): a
    fresh node table with a version no earlier program of this graph holds."""
    state = entry.state
    table = NodeTable(state["nodes"])
    table.version = graph.nodes.version + 1
    graph.nodes = table
    graph._next_id = state["_next_id"]
    graph.forward = dict(state["forward"])
    graph.retrieved = set(state["retrieved"])
    graph.kept = set(state["kept"])
    order = state["schedule"]
    graph.schedule = None if order is None else (table.version, order)
    graph.dim_checks = list(state["dim_checks"])
    graph.buffers = {}
    compiled = entry.compiled
    compiled.version = table.version
    compiled.keep = set(graph.retrieved) | set(graph.kept)
    return compiled


class ProgramCache:
    """Entries under `directory`, one file each: MAGIC, the payload's SHA-256, payload (the
    pickled Entry, zlib-compressed). Nothing is evicted: clear the folder to reclaim it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def load(self, key: str, structure_bytes: bytes) -> Entry | None:
        """The entry for `key` when it is intact and was compiled from exactly this
        structure; None otherwise (a miss: the caller compiles and stores again)."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        start = len(MAGIC) + 32
        if not data.startswith(MAGIC) or len(data) < start:
            return None
        payload = data[start:]
        if hashlib.sha256(payload).digest() != data[len(MAGIC) : start]:
            return None
        try:
            entry = pickle.loads(zlib.decompress(payload))
        except Exception:  # an entry of an older luminal whose classes moved: a miss
            return None
        if not isinstance(entry, Entry) or entry.structure != structure_bytes:
            return None
        return entry

    def store(self, key: str, entry: Entry) -> None:
        """Write the entry atomically (a failure to write only costs the next compile)."""
        try:
            payload = zlib.compress(dumps(entry), 1)  # mostly C sources: ~7x smaller
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            data = MAGIC + hashlib.sha256(payload).digest() + payload
            cache_files.write_private(self.path(key), data)
        except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
            return

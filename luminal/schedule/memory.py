"""Static memory plan: intermediate buffers share one arena by liveness.

Each intermediate lives from the step that writes it to the last step that reads it;
a buffer's bytes are reused by later buffers once it is dead (best-fit over free
blocks). Retrieved and kept tensors get their own arrays (never aliased: the user reads
them after the run), and inputs are the user's arrays. Sizes are symbolic, so a plan is
made per set of dimension sizes and cached.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from luminal.errors import OutOfMemoryError, format_shape

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.shape.expr import Expr

ALIGNMENT = 64


class ScratchUser(Protocol):
    """What the plan needs of a kernel: the node it writes (`buffers[0]`) and the bytes
    it allocates while it runs, as expressions of the dims."""

    buffers: list[int]
    scratch: tuple[Expr, ...]


@dataclass
class MemoryPlan:
    offsets: dict[int, int]  # node id -> byte offset in the arena
    arena_bytes: int
    naive_bytes: int  # what one buffer per intermediate would take

    def report(self) -> dict[str, int]:
        return {"arena_bytes": self.arena_bytes, "without_reuse_bytes": self.naive_bytes}


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plan_memory(
    sizes: Mapping[int, int], first_use: Mapping[int, int], last_use: Mapping[int, int]
) -> MemoryPlan:
    """Assign arena offsets to buffers `sizes` (bytes) alive over [first_use, last_use]
    step indices, reusing freed space (best fit, merging neighbours)."""
    events: list[tuple[int, int, int]] = []  # (step, 0=free/1=alloc, node)
    for node_id in sizes:
        events.append((first_use[node_id], 1, node_id))
        events.append((last_use[node_id] + 1, 0, node_id))
    events.sort()
    free: list[list[int]] = []  # [offset, size] blocks, sorted by offset
    offsets: dict[int, int] = {}
    top = 0
    for _, kind, node_id in events:
        size = _align(max(sizes[node_id], 1))
        if kind == 0:
            _release(free, offsets[node_id], size)
            continue
        best = None
        for block in free:
            if block[1] >= size and (best is None or block[1] < best[1]):
                best = block
        if best is not None:
            offsets[node_id] = best[0]
            best[0] += size
            best[1] -= size
            if best[1] == 0:
                free.remove(best)
        else:
            if free and free[-1][0] + free[-1][1] == top:  # grow the last free block
                block = free.pop()
                offsets[node_id] = block[0]
                top = block[0] + size
            else:
                offsets[node_id] = top
                top += size
    naive = sum(_align(max(s, 1)) for s in sizes.values())
    return MemoryPlan(offsets, top, naive)


def _release(free: list[list[int]], offset: int, size: int) -> None:
    free.append([offset, size])
    free.sort()
    merged: list[list[int]] = []
    for block in free:
        if merged and merged[-1][0] + merged[-1][1] == block[0]:
            merged[-1][1] += block[1]
        else:
            merged.append(block)
    free[:] = merged


def liveness(steps: Sequence[tuple[int, Sequence[int]]]) -> tuple[dict[int, int], dict[int, int]]:
    """First and last step index of each buffer from (output, inputs) per step."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for index, (output, inputs) in enumerate(steps):
        first.setdefault(output, index)
        last[output] = max(last.get(output, index), index)
        for node_id in inputs:
            last[node_id] = max(last.get(node_id, index), index)
    return first, last


def physical_memory() -> int:
    """Bytes of RAM on this machine: no run may need more (swap is not counted: a run
    that pages that much would not finish)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not reported: refuse nothing
        return 1 << 62


@dataclass
class Footprint:
    """What one run needs, in bytes: the arena, each output array (by node), each arena
    tensor (by node) and the heap scratch each kernel mallocs while it runs (by node)."""

    arena_bytes: int
    outputs: Mapping[int, int]
    intermediates: Mapping[int, int]
    scratch: Mapping[int, int]

    @property
    def total(self) -> int:
        """Kernels run one at a time: only the largest scratch adds to the rest."""
        largest_scratch = max(self.scratch.values(), default=0)
        return self.arena_bytes + sum(self.outputs.values()) + largest_scratch


def footprint(
    plan: MemoryPlan,
    intermediates: Mapping[int, int],
    outputs: Mapping[int, int],
    kernels: Iterable[ScratchUser],
    dims: Mapping[str, int],
) -> Footprint:
    """The footprint of a run with `dims`; kernel scratch is evaluated from its dims."""
    scratch = {
        kernel.buffers[0]: sum(e.evaluate(dims) for e in kernel.scratch)
        for kernel in kernels
        if kernel.scratch
    }
    return Footprint(plan.arena_bytes, outputs, intermediates, scratch)


def check_fits(needs: Footprint, graph: Graph, dims: Mapping[str, int]) -> None:
    """Raise OutOfMemoryError, before anything is allocated or run, when the run needs more
    than the machine's memory, naming the largest tensor and the bytes: an enormous
    symbolic dim is a clear error instead of an OOM kill or a failed malloc mid-run."""
    limit = physical_memory()
    if needs.total <= limit:
        return
    candidates = [
        *((n, b, "output") for n, b in needs.outputs.items()),
        *((n, b, "intermediate") for n, b in needs.intermediates.items()),
        *((n, b, "scratch of the kernel computing") for n, b in needs.scratch.items()),
    ]
    node_id, nbytes, kind = max(candidates, key=lambda c: c[1])
    node = graph.nodes[node_id]
    shape = format_shape([d.evaluate(dims) for d in node.shape])
    raise OutOfMemoryError(
        f"the run needs {needs.total} bytes ({format_bytes(needs.total)}) but this machine "
        f"has {limit} ({format_bytes(limit)}); the largest is the {kind} node {node_id} "
        f"({node.op.name}, shape {shape}, {node.dtype.name}): {nbytes} bytes "
        f"({format_bytes(nbytes)}); check the dims ({dict(dims)})"
    )


def format_bytes(n: int) -> str:
    """A byte count as people read it: 1536 -> '1.5 KiB'."""
    value, unit = float(n), "B"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"

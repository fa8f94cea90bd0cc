"""Static memory plan: intermediate buffers share one arena by liveness.

Each intermediate lives from the step that writes it to the last step that reads it;
a buffer's bytes are reused by later buffers once it is dead (best-fit over free
blocks). Retrieved and kept tensors get their own arrays (never aliased: the user reads
them after the run), and inputs are the user's arrays. Sizes are symbolic, so a plan is
made per set of dimension sizes and cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ALIGNMENT = 64


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

"""Kernels whose inputs stay put are run once, not on every execute().

Many kernels of an inference graph read only parameters: a convolution's BatchNorm
folding (scale = gamma / sqrt(var + eps), the scaled weights and the shift), weight
transposes, masks built from constants. Their results are the same on every run until
one of those parameters is given new data, so the runtime computes them once and keeps
them (kernels that read no input at all, constants and iotas, likewise).

Which inputs count as parameters is learnt from the runs themselves (the runtime's
`_note_inputs`): an input whose data changes in two runs in a row (a new array, the same
array `.set()` again, an optimizer's or a carry's hand-over, a KV cache, each inference's
image) is *volatile*, until it stays unchanged for two runs in a row; the others are
*stable*. Reuse starts once some input is volatile (until then nothing tells parameters
from data: a graph executed again and again on the same data is simply run again). A
kernel is reused when every input it depends on, through any chain of kernels, is stable;
a Python `Function` counts as volatile. When a stable input changes, that run computes
every kernel, and reuse goes on from the next.

Reused kernels' outputs that a recomputed kernel reads live in their own arrays (not in
the arena, whose space later kernels reuse); the rest stay in the arena, since reused
kernels run all together or not at all. Kernels computing a retrieved or kept tensor,
or a bucket Function's input (reduced in place), always run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

VOLATILE = -1  # stands for a Python Function's output: never reused


@dataclass(frozen=True)
class Reuse:
    """The nodes whose kernels a plan skips while their inputs are unchanged, and which
    of them need their own arrays (a kernel that runs every time reads them)."""

    nodes: frozenset[int]
    persistent: frozenset[int]


NO_REUSE = Reuse(frozenset(), frozenset())


def input_dependencies(
    steps: Sequence[tuple[int, Sequence[int]]], inputs: Iterable[int], functions: set[int]
) -> dict[int, frozenset[int]]:
    """For each step's node (`steps`: (node, nodes it reads) in run order), the graph
    inputs it depends on through any chain of kernels; a node in `functions` (a Python
    Function) depends on `VOLATILE`."""
    depends: dict[int, frozenset[int]] = {n: frozenset((n,)) for n in inputs}
    none: frozenset[int] = frozenset()
    for node, reads in steps:
        if node in functions:
            depends[node] = frozenset((VOLATILE,))
        else:
            depends[node] = none.union(*(depends.get(n, none) for n in reads))
    return depends


def plan_reuse(
    steps: Sequence[tuple[int, Sequence[int]]],
    depends: dict[int, frozenset[int]],
    volatile: set[int],
    always_run: set[int],
) -> Reuse:
    """The kernels to reuse when the inputs in `volatile` change from run to run; none
    before any input has been seen to change. `always_run`: nodes computed on every run
    (Functions, outputs handed to the user, bucket inputs)."""
    if not volatile:
        return NO_REUSE
    changing = volatile | {VOLATILE}
    reused = {
        node for node, _ in steps if node not in always_run and not (depends[node] & changing)
    }
    persistent = {n for node, reads in steps if node not in reused for n in reads if n in reused}
    return Reuse(frozenset(reused), frozenset(persistent))

"""Candidate enumeration for measured search: distinct extractable programs.

From one saturated e-graph: the best program by static cost, the k-1 cheapest programs
that differ from it in one e-class choice, and random samples (seeded) that choose any
extractable e-node per class without cycles. Each decodes to primitives the reference
runtime can run.
"""

from __future__ import annotations

import random

from luminal.compiler.egraph.compiler import Saturation
from luminal.compiler.egraph.extract import (
    ProgramDecoder,
    best_choice,
    decode_program,
    override_choice,
    random_choice,
)
from luminal.compiler.egraph.program import Program


def enumerate_programs(
    saturation: Saturation, k: int = 4, samples: int = 4, seed: int = 0, name: str = "rules"
) -> list[Program]:
    """Up to `k` best-by-cost programs plus up to `samples` random ones, all distinct."""
    graph = saturation.serialized
    boundaries = saturation.program.boundaries
    classes = saturation.output_classes

    def decode(choose) -> Program:  # noqa: ANN001 - a Choice
        return decode_program(
            graph, saturation.tables, boundaries, classes, choose, name, saturation.program
        )

    found: dict[tuple, Program] = {}
    best = decode(best_choice(graph))
    found[best.key()] = best
    # classes the best program visits, and their cheaper-first alternatives
    visitor = ProgramDecoder(graph, saturation.tables, boundaries, best_choice(graph), name)
    for cls in classes:
        visitor.term(cls)
    swaps = []
    for cls in visitor.memo:
        for alternative in graph.alternatives(cls):
            if alternative != graph.best_node[cls]:
                delta = graph.node_cost[alternative] - graph.best_cost[cls]
                swaps.append((delta, cls, alternative))
    swaps.sort()
    for _, cls, alternative in swaps:
        if len(found) >= k:
            break
        program = decode(override_choice(graph, {cls: alternative}))
        found.setdefault(program.key(), program)
    ranked = list(found.values())[:k]
    rng = random.Random(seed)
    seen = {p.key() for p in ranked}
    for _ in range(samples * 4):
        if len(ranked) >= k + samples:
            break
        program = decode(random_choice(graph, rng))
        if program.key() not in seen:
            seen.add(program.key())
            ranked.append(program)
    return ranked

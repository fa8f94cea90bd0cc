"""The e-graph's alternative programs as a search dimension: each distinct region is a
site whose options are the programs `enumerate_programs` extracts from its saturated
e-graph (the static-cost best first, then the next cheapest and seeded samples)."""

from __future__ import annotations

from collections.abc import Sequence

from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.egraph.candidates import enumerate_programs
from luminal.compiler.egraph.program import Program
from luminal.compiler.passes import GenericCompiler
from luminal.graph import Graph
from luminal.search.strategy import Config, Site

PROGRAM_PREFIX = "program"  # option names: program0 (the static-cost best), program1, ...
REGION_PREFIX = "region"  # site keys: region0, region1, ... (distinct regions in order)


def split_config(config: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(program choices, everything else) of a configuration or a site table."""
    program = {k: v for k, v in config.items() if k.startswith(REGION_PREFIX)}
    return program, {k: v for k, v in config.items() if k not in program}


class ProgramAlternatives:
    """Saturates every distinct region of `graph` once (on a structure copy: input arrays
    are shared, never copied) and keeps up to `k + samples` programs per region; `apply`
    writes a chosen set into a graph."""

    def __init__(
        self,
        graph: Graph,
        rulesets: Sequence[str],
        k: int = 3,
        samples: int = 2,
        seed: int = 0,
    ) -> None:
        self.rulesets = tuple(rulesets)
        self.base = graph.structure_copy()  # shares the input arrays: no weight is copied
        self.alternatives: list[list[Program]] = []

        def record(compiler: EGraphCompiler, index: int, program: Program) -> Program:
            saturation = compiler.saturate(program)
            found = enumerate_programs(saturation, k, samples, seed, compiler.name)
            self.alternatives.append(found)
            return found[0]

        EGraphCompiler(self.rulesets, choose=record).compile(graph.structure_copy())
        self.sites = [
            Site(f"{REGION_PREFIX}{i}", [f"{PROGRAM_PREFIX}{j}" for j in range(len(programs))], 1.0)
            for i, programs in enumerate(self.alternatives)
            if len(programs) > 1
        ]

    def site_options(self) -> dict[str, list[str]]:
        return {site.key: list(site.options) for site in self.sites}

    def valid(self, config: Config) -> bool:
        options = self.site_options()
        return all(option in options.get(site, ()) for site, option in config.items())

    def apply(self, graph: Graph, config: Config) -> None:
        """Write the chosen program of every region into `graph` (which must be the graph
        these alternatives were enumerated from, or a copy of it)."""

        def chosen(compiler: EGraphCompiler, index: int, program: Program) -> Program:
            option = config.get(f"{REGION_PREFIX}{index}", f"{PROGRAM_PREFIX}0")
            return self.alternatives[index][int(option.removeprefix(PROGRAM_PREFIX))]

        graph.compile(EGraphCompiler(self.rulesets, choose=chosen))
        graph.compile(GenericCompiler())

    def graph_for(self, config: Config) -> Graph:
        graph = self.base.structure_copy()
        self.apply(graph, config)
        return graph

"""EGraphCompiler: saturate each distinct region with the chosen rulesets, extract the
cheapest program by static cost, and write it back in place of the region.

Structurally identical regions (the layers of a transformer between graph breaks) are
saturated and extracted once; the extracted program is written back for each of them.
Saturation stops at a node limit or a time limit and extracts the best found so far;
the time limit counts rule rounds only (not building the e-graph) and never stops the
first `MIN_ITERATIONS` rounds, which lower products to contractions: a region cut before
them ran its matmuls as scalar loops (MiniLM on a loaded machine: 10.9 s instead of
0.24 s, since building the e-graph alone took the whole 2 s). A
region whose encoding alone passes the node limit could not be rewritten at all, so it
is left as it is instead of being encoded (~1 ms per op in egglog's Python API: a
25,000-op sum spent most of its compile there, for nothing).
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from egglog import EGraph, Ruleset, union, unstable_combine_rulesets

from luminal.compiler.egraph.encode import Tables, encode_program
from luminal.compiler.egraph.extract import (
    SerializedEGraph,
    best_choice,
    decode_program,
)
from luminal.compiler.egraph.program import Program, program_from_region, write_program
from luminal.compiler.egraph.regions import split_regions
from luminal.compiler.passes import CommonSubexpressionElimination, DeadCodeElimination
from luminal.compiler.rules import RULESETS
from luminal.compiler.terms import Term
from luminal.errors import CompileError
from luminal.graph import Graph

# rule rounds run whatever the time: a plain Mul then SumReduce becomes a Contract (BLAS)
# in two; an imported MiniLM needs three (after two, 7 of its 36 products were still
# loops: 2.4 s per run at 8x128 instead of 0.16 s)
MIN_ITERATIONS = 3


@dataclass
class Saturation:
    """An e-graph built from one program and saturated (as far as the limits allow)."""

    tables: Tables
    program: Program
    output_classes: list[str]
    serialized: SerializedEGraph
    iterations: int
    enodes: int
    stopped_by: str  # "saturated", "node limit", "time limit", "iteration limit"
    seconds: float


@dataclass
class CompileReport:
    regions: int = 0
    distinct_regions: int = 0
    enodes: list[int] = field(default_factory=list)
    stopped_by: list[str] = field(default_factory=list)
    seconds: float = 0.0


class EGraphCompiler:
    """`cx.compile(EGraphCompiler())`: rewrite the graph through egglog. `choose`, when
    given, picks the program written back for each distinct region (measured search
    passes one that returns alternatives from `enumerate_programs`)."""

    def __init__(
        self,
        rulesets: Sequence[str] = ("algebra", "structure"),
        node_limit: int = 20_000,
        time_limit: float = 2.0,
        iteration_limit: int = 24,
        choose: Callable[[EGraphCompiler, int, Program], Program] | None = None,
    ) -> None:
        unknown = [name for name in rulesets if name not in RULESETS]
        if unknown:
            raise CompileError(
                f"EGraphCompiler: unknown ruleset(s) {unknown}; known: {sorted(RULESETS)}"
            )
        self.ruleset_names = tuple(rulesets)
        self.node_limit = node_limit
        self.time_limit = time_limit
        self.iteration_limit = iteration_limit
        self.choose = choose  # (compiler, region number, program) -> the program written back
        self.report = CompileReport()

    @property
    def name(self) -> str:
        return "+".join(self.ruleset_names) or "no rules"

    def _ruleset(self) -> Ruleset | None:
        chosen = [RULESETS[name] for name in self.ruleset_names]
        if not chosen:
            return None
        return chosen[0] if len(chosen) == 1 else unstable_combine_rulesets(*chosen)

    def saturate(self, program: Program) -> Saturation:
        """Build the e-graph of `program` and run the rules within the limits."""
        start = time.perf_counter()
        egraph = EGraph()
        tables = Tables()
        terms = encode_program(program, tables, _namer(egraph))
        egraph.register(*(union(Term.root(index)).with_(term) for index, term in enumerate(terms)))
        ruleset = self._ruleset()
        rules_start = time.perf_counter()
        iterations, stopped_by = 0, "saturated"
        enodes = _count(egraph)
        while ruleset is not None:
            if iterations >= self.iteration_limit:
                stopped_by = "iteration limit"
                break
            if iterations >= MIN_ITERATIONS and time.perf_counter() - rules_start > self.time_limit:
                stopped_by = "time limit"
                break
            if enodes > self.node_limit:
                stopped_by = "node limit"
                break
            report = egraph.run(1, ruleset=ruleset)
            iterations += 1
            enodes = _count(egraph)
            if not report.updated:
                break
        serialized = SerializedEGraph.from_egraph(egraph)
        native = [getattr(egraph, "_state", None)]  # what holds the native e-graph
        del egraph
        _free_on_this_thread(native)
        classes = []
        for index in range(len(program.outputs)):
            cls = serialized.roots.get(index)
            if cls is None:
                raise CompileError(f"e-graph ({self.name}): output {index} lost its class")
            classes.append(cls)
        return Saturation(
            tables,
            program,
            classes,
            serialized,
            iterations,
            enodes,
            stopped_by,
            time.perf_counter() - start,
        )

    def optimize(self, program: Program) -> Program:
        """The cheapest equivalent program by static cost."""
        saturation = self.saturate(program)
        self.report.enodes.append(saturation.enodes)
        self.report.stopped_by.append(saturation.stopped_by)
        serialized = saturation.serialized
        return decode_program(
            serialized,
            saturation.tables,
            program.boundaries,
            saturation.output_classes,
            best_choice(serialized),
            self.name,
            expected=program,
        )

    def compile(self, graph: Graph) -> CompileReport:
        start = time.perf_counter()
        self.report = CompileReport()
        roots = graph.output_roots()
        regions = split_regions(graph, roots)
        done: dict[tuple, Program] = {}
        readers = graph.readers()
        for region in regions:
            if not region.outputs:
                continue
            program, boundary_ids = program_from_region(graph, region.nodes, region.outputs)
            size = encoded_size(program)
            if size > self.node_limit:
                self.report.enodes.append(size)
                self.report.stopped_by.append("too large")
                continue
            key = program.key()
            if key not in done:
                if self.choose is None:
                    done[key] = self.optimize(program)
                else:
                    done[key] = self.choose(self, len(done), program)
            new_outputs = write_program(graph, done[key], boundary_ids)
            readers = graph.readers()
            for old, new in zip(region.outputs, new_outputs, strict=True):
                if not graph.replace(old, new, readers=readers):
                    raise CompileError(f"e-graph ({self.name}): could not replace node {old}")
        # regions wrote their own copies of shared constants: merge them, drop the old nodes
        CommonSubexpressionElimination().compile(graph)
        DeadCodeElimination().compile(graph)
        self.report.regions = len(regions)
        self.report.distinct_regions = len(done)
        self.report.seconds = time.perf_counter() - start
        return self.report


def _free_on_this_thread(native: list[object]) -> None:
    """Free an e-graph on the thread that made it, as egglog requires ("unsendable":
    freed on a gcc worker thread by an automatic collection, it raises there and leaks).
    `native` holds the only other reference to its state (egglog 13's `EGraph._state`,
    owner of the native object), which every `run` left in a reference cycle (a recursive
    closure): collect the young cycles (~1-5 ms), then drop the state, freed now by its
    reference count. The full collection (~50 ms after the MLP's e-graph: the whole heap,
    imports included) only when that left it alive (a cycle promoted to the oldest
    generation), or when the state could not be found. Until `native` is cleared no
    other thread's collection can free the state, however the threads interleave."""
    state = native[0]
    owner = None if state is None else weakref.ref(state)
    del state
    gc.collect(1)
    native.clear()
    if owner is None or owner() is not None:
        gc.collect()


def _namer(egraph: EGraph) -> Callable[[Term], Term]:
    """Names a shared term by `union(Term.named(i), term)`, not `egraph.let`: a let also
    binds every literal the term repeats to a global (`$__expr_N`), and egglog 13 can
    read one such global in place of another (a `sum_reduce(3, ..)` entered as
    `sum_reduce(43, ..)`, depending on the order the bindings' set iteration gave)."""
    count = 0

    def name(term: Term) -> Term:
        nonlocal count
        named = Term.named(count)
        count += 1
        egraph.register(union(named).with_(term))
        return named

    return name


def encoded_size(program: Program) -> int:
    """E-nodes the program's encoding starts with, at least: a term per instruction and
    an edge for each operand read."""
    operands = {ref for inst in program.instructions for ref, _ in inst.inputs}
    return len(program.instructions) + len(operands)


def _count(egraph: EGraph) -> int:
    return sum(size for _, size in egraph.all_function_sizes())

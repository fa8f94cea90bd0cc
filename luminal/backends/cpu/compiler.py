"""`lm.CPUCompiler(mode=...)`: generic passes, e-graph lowering (contractions to BLAS),
fusion, C code generation, one library per graph, and a check against the reference
runtime before the compiled graph is trusted.

`mode="fast"` takes every kernel from the static lowering. `mode="optimal"` and
`mode=lm.TimeBudget(seconds)` search the backend's alternatives by measuring them
(`tuning.py`, `luminal/search/`) and cache the choice on disk.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from luminal.backends.cpu import program_cache, toolchain
from luminal.backends.cpu.runtime import CompiledGraph, debug_level
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.search.budget import Deadline, TimeBudget

if TYPE_CHECKING:
    from luminal.compiler.egraph.compiler import CompileReport
    from luminal.search.cache import SearchRecord

# The e-graph (egglog), lowering, search and verification are imported where they are
# used: a compile served by the program cache needs none of them (importing egglog alone
# takes longer than the whole cached compile).

__all__ = ["CPUCompiler", "static_program"]

MODES = ("fast", "optimal")
RULESETS = ("algebra", "structure", "cpu")


class CPUCompiler:
    """Compile a graph to C kernels for this CPU. `verify` runs the compiled graph and
    the reference runtime on the same inputs (the current ones, or seeded random data
    for inputs without any) and raises CompileError if they differ; a searching mode
    always verifies. `cache` (True for the luminal cache, a folder, or False): reuse and
    store on disk the lowered program of mode "fast" (`program_cache.py`; a hit sets
    `program_cache_hit`) and the results of a search. Search settings: `beam` (states
    kept per site), `seed`,
    `progress` (a tqdm bar; default: when stderr is a terminal), `candidate_timeout`
    (seconds before a candidate that does not return is killed and discarded)."""

    def __init__(
        self,
        mode: Any = "fast",
        verify: bool = True,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        beam: int = 2,
        seed: int = 0,
        cache: bool | str | os.PathLike[str] = True,
        progress: bool | None = None,
        candidate_timeout: float = 10.0,
    ) -> None:
        if not (mode in MODES or isinstance(mode, TimeBudget)):
            raise CompileError(
                f"CPUCompiler: unknown mode {mode!r}; expected one of {MODES} or "
                "lm.TimeBudget(seconds)"
            )
        self.mode = mode
        self.verify = verify
        self.rtol = rtol
        self.atol = atol
        self.beam = beam
        self.seed = seed
        self.cache = cache
        self.progress = progress
        self.candidate_timeout = candidate_timeout
        self.search_record: SearchRecord | None = None
        self.cache_hit = False
        self.program_cache_hit = False

    @property
    def searching(self) -> bool:
        return self.mode != "fast"

    def compile(self, graph: Graph) -> CompiledGraph:
        self.program_cache_hit = False
        cached = self._cached_program(graph)
        if cached is not None:
            return cached
        from luminal.backends.cpu.verify import reference_copy, verify_against_reference
        from luminal.compiler.passes import GenericCompiler
        from luminal.search.fingerprint import graph_fingerprint

        toolchain.start_support_units()  # gcc on gemm.c while the e-graph works
        budget = self.mode.seconds if isinstance(self.mode, TimeBudget) else math.inf
        deadline = Deadline(budget)
        fingerprint = graph_fingerprint(graph) if self.searching else ""
        structure = self._program_structure(graph)
        before = (set(graph.input_data), list(graph.carries))
        reference = reference_copy(graph) if (self.verify or self.searching) else None
        graph.compiled = None
        graph.compile(GenericCompiler())
        rewrites: list[CompileReport] = []
        if self.searching:
            compiled = self._search(graph, reference, fingerprint, deadline)
        else:
            compiled = static_program(graph, rewrites)
        compiled.build()
        toolchain.wait_early()  # units lowering started that the library did not link
        if reference is not None:  # installed only once checked: Graph.compile restores
            with numpy_blas_on_one_thread():
                verify_against_reference(graph, compiled, reference, self.rtol, self.atol)
        graph.compiled = compiled
        if (
            structure is not None
            and before == (set(graph.input_data), list(graph.carries))
            and not any("time limit" in report.stopped_by for report in rewrites)
        ):  # a program from an e-graph cut short by its time limit (a loaded machine) is
            # correct but may be slow: stored, it would be every later process's program
            entry = program_cache.capture(structure, graph, compiled, self.verify)
            self._program_store().store(self._program_key(structure), entry)
        return compiled

    # ------------------------------------------------------------ program cache
    def _program_structure(self, graph: Graph) -> bytes | None:
        """The graph's structure when this compile may use the program cache: mode
        "fast", caching on, and a graph the cache can hold."""
        if self.searching or not self.cache or not program_cache.enabled():
            return None
        return program_cache.structure(graph)

    def _program_key(self, structure: bytes) -> str:
        return program_cache.program_key(structure, (self.mode, self.rtol, self.atol))

    def _program_store(self) -> program_cache.ProgramCache:
        if isinstance(self.cache, str | os.PathLike):
            return program_cache.ProgramCache(Path(self.cache) / program_cache.DIRECTORY)
        return program_cache.ProgramCache(toolchain.cache_root() / program_cache.DIRECTORY)

    def _cached_program(self, graph: Graph) -> CompiledGraph | None:
        """The program stored for this graph's structure and these options, built and
        installed on the graph; None on a miss. A program stored without verification
        is verified now when `verify` asks for it."""
        structure = self._program_structure(graph)
        if structure is None:
            return None
        store = self._program_store()
        key = self._program_key(structure)
        entry = store.load(key, structure)
        if entry is None:
            return None
        if self.verify and not entry.verified:
            return None  # compiled (and verified) again, then stored as verified
        compiled = entry.compiled
        compiled.debug = debug_level()
        try:
            compiled.build()
        except CompileError:
            return None  # e.g. a library its kernels no longer link into: compile again
        program_cache.install(graph, entry)
        graph.compiled = compiled
        self.program_cache_hit = True
        return compiled

    # ------------------------------------------------------------------ search
    def _search(
        self, graph: Graph, reference: Graph, fingerprint: str, deadline: Deadline
    ) -> CompiledGraph:
        """Two stages on one clock: the e-graph's alternative programs (static kernels),
        then the kernel sites of the chosen program. A cached record skips both."""
        from luminal.backends.cpu.tuning import SPACE_VERSION, CpuSearchSpace, ProgramSpace
        from luminal.backends.cpu.verify import check_inputs
        from luminal.compiler.egraph import EGraphCompiler
        from luminal.compiler.passes import GenericCompiler
        from luminal.search.cache import SearchCache, search_key
        from luminal.search.driver import SearchStages, unsendable
        from luminal.search.programs import ProgramAlternatives, split_config

        saved_inputs = dict(graph.input_data)
        dims = check_inputs(graph, reference)
        stages: SearchStages | None = None
        try:
            reason = unsendable(graph)
            if reason is not None:
                warnings.warn(
                    f"CPUCompiler: measured search skipped, the static program is used: {reason}",
                    stacklevel=4,
                )
                return static_program(graph)
            threads = toolchain.get_num_threads().openmp
            key = search_key(fingerprint, dims, f"cpu/threads={threads}", SPACE_VERSION)
            store = SearchCache(self._cache_directory())
            record = store.load(key) if self.cache else None
            if (
                record is not None
                and record.stopped_by != "space exhausted"
                and self.mode == "optimal"
            ):
                record = None  # a search cut short by a budget does not stand for "optimal"
            stages = SearchStages(
                self, reference, deadline, self._reference_results(reference), backend="cpu"
            )
            program = split_config(record.chosen)[0] if record is not None else {}
            if record is not None and not program:
                # a cached static program: no alternatives to enumerate
                graph.compile(EGraphCompiler(rulesets=RULESETS))
                graph.compile(GenericCompiler())
                program_sites = split_config(record.sites)[0]
            else:
                alternatives = ProgramAlternatives(graph, RULESETS, seed=self.seed)
                if record is None or not alternatives.valid(program):
                    record, program = None, {}
                    if alternatives.sites:
                        program = stages.run(ProgramSpace(alternatives, threads))
                alternatives.apply(graph, program)
                program_sites = alternatives.site_options()
            space = CpuSearchSpace(graph, dims, threads)
            sites = {**program_sites, **space.site_options()}
            if record is not None and record.sites == sites:
                self.cache_hit = True
            else:
                kernels = stages.run(space, context=program)
                record = stages.record(key, {**program, **kernels}, sites, len(space.sites))
                if self.cache:
                    store.store(record)
            self.search_record = record
            return space.compiled(split_config(record.chosen)[1])
        finally:
            if stages is not None:  # the measuring process the stages shared
                stages.close()
            graph.input_data.clear()
            graph.input_data.update(saved_inputs)

    def _reference_results(self, reference: Graph) -> Callable[[], tuple[dict, list]]:
        from luminal.backends.cpu.verify import output_views, reference_outputs

        def results() -> tuple[dict, list]:
            expected = reference_outputs(reference, self.rtol, self.atol)
            return expected, output_views(reference, expected)

        return results

    def _cache_directory(self) -> Path:
        if isinstance(self.cache, str | os.PathLike):
            return Path(self.cache)
        return toolchain.cache_root() / "search"


@contextlib.contextmanager
def numpy_blas_on_one_thread() -> Iterator[None]:
    """numpy's own BLAS on one thread while the reference runtime checks a program: its
    threads spin for each other, and on a loaded machine a 64x784x512 product took
    100-150 ms on 2 threads against 0.5 ms on one (the compiled program's BLAS is
    another library and keeps its threads)."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    # select() ORs its criteria: user_api="blas" beside the paths would also pin the
    # compiled program's MKL, and MKL's restore leaves a thread-local count behind
    paths = [
        info["filepath"]
        for info in controller.info()
        if info["user_api"] == "blas" and "numpy" in info["filepath"]
    ]
    with controller.select(filepath=paths).limit(limits=1):
        yield


def static_program(graph: Graph, reports: list[CompileReport] | None = None) -> CompiledGraph:
    """What mode="fast" runs, not yet built: the e-graph's cheapest program (contractions
    lowered for BLAS), cleaned up, with the static kernel of every materialised node.
    The e-graph's report (how each region's saturation ended) is appended to `reports`."""
    from luminal.backends.cpu.lowering import lower
    from luminal.compiler.egraph import EGraphCompiler
    from luminal.compiler.passes import GenericCompiler

    report = graph.compile(EGraphCompiler(rulesets=RULESETS))
    if reports is not None:
        reports.append(report)
    graph.compile(GenericCompiler())
    return lower(graph)

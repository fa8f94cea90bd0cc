"""What every GPU compiler does the same way: the CPU backend's pipeline down to the
schedule (generic passes, e-graph lowering of contractions, fusion), the shared GPU
lowering (`luminal.kernel.gpu`), a `GpuCompiledGraph` on the backend's device, and a
check against the reference runtime before the compiled graph is installed.

A backend's compiler subclasses `GpuCompiler` and supplies `open_device()` (its
`GpuDevice`, or CompileError naming what is missing) and, if it has kernels of its own,
`program(graph)` and `lower_choices(graph, chosen)`. In the searching modes
(`mode="optimal"`, `lm.TimeBudget(seconds)`) every kernel site's options are verified
and timed on the device (`gpu_tuning`, `gpu_search`), keyed in the cache by
`backend_id(device)`.
"""

from __future__ import annotations

import math
from typing import Any

from luminal.backends import gpu_search, gpu_tuning
from luminal.backends.cpu.verify import check_inputs, output_views, reference_outputs
from luminal.backends.gpu_runtime import GpuCompiledGraph, GpuDevice
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.max_pool import unfuse_max_pools
from luminal.compiler.passes import GenericCompiler
from luminal.custom import narrow_to
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.search.budget import Deadline, TimeBudget
from luminal.search.cache import SearchRecord
from luminal.search.fingerprint import graph_fingerprint
from luminal.search.outputs import read_outputs
from luminal.search.strategy import check_outputs

MODES = ("fast", "optimal")
RULESETS = ("algebra", "structure", "cpu")  # contractions to `Contract` (backend-neutral)


class GpuCompiler:
    """Compile a graph for a GPU device. `verify` runs the compiled graph and the
    reference runtime on the same inputs and raises CompileError when they differ."""

    name = "GpuCompiler"
    language: str | None = None  # custom kernels' source language ("opencl", "cuda", ...)
    cache = True  # keep search results on disk

    def __init__(
        self, mode: Any = "fast", verify: bool = True, rtol: float = 1e-3, atol: float = 1e-4
    ) -> None:
        if not (mode in MODES or isinstance(mode, TimeBudget)):
            raise CompileError(
                f"{self.name}: unknown mode {mode!r}; expected one of {MODES} or "
                "lm.TimeBudget(seconds)"
            )
        self.mode = mode
        self.verify = verify
        self.search_record: SearchRecord | None = None  # what the last search tried
        self.cache_hit = False  # whether its choices came from the disk cache
        self.rtol = rtol
        self.atol = atol

    def open_device(self) -> GpuDevice:
        """The device to run on; CompileError naming what is missing without one."""
        raise NotImplementedError

    def program(self, graph: Graph) -> GpuProgram:
        """The launches of a graph after the e-graph (a backend may add its own kernels)."""
        return lower_gpu(graph)

    def lower(self, graph: Graph) -> GpuProgram:
        """Generic passes, the e-graph, then the GPU launches (changes `graph`). A graph
        compiled for the CPU first gets its fused pools back as nodes (their kernel is C)."""
        unfuse_max_pools(graph)
        graph.compile(GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=RULESETS))
        graph.compile(GenericCompiler())
        if self.language is not None:
            narrow_to(graph, self.language)
        return self.program(graph)

    def backend_id(self, device: GpuDevice) -> str:
        """The device and driver, as search cache keys name them."""
        raise NotImplementedError

    def lower_choices(self, graph: Graph, chosen: dict[int, gpu_search.Option]) -> GpuProgram:
        """The launches of a lowered graph with each node's chosen search option."""
        return gpu_search.lower_choices(graph, gpu_search.DEFAULT, chosen)

    def compile(self, graph: Graph) -> GpuCompiledGraph:
        device = self.open_device()  # before the graph changes: CompileError without one
        if self.mode != "fast":
            return self._compile_searching(graph, device)
        reference = graph.structure_copy() if self.verify else None
        graph.compiled = None
        compiled = GpuCompiledGraph(graph, self.lower(graph), device, self.name)
        compiled.build()
        if reference is not None:  # installed only once checked: Graph.compile restores
            self._verify(graph, compiled, reference)
        graph.compiled = compiled
        return compiled

    def _compile_searching(self, graph: Graph, device: GpuDevice) -> GpuCompiledGraph:
        """Measured search over every kernel site's options (`gpu_tuning`), then the
        chosen program, always checked against the reference runtime."""
        budget = self.mode.seconds if isinstance(self.mode, TimeBudget) else math.inf
        deadline = Deadline(budget)
        fingerprint = graph_fingerprint(graph)
        reference = graph.structure_copy()
        graph.compiled = None
        compiled = GpuCompiledGraph(graph, self.lower(graph), device, self.name)
        tuning = gpu_tuning.Tuning(
            self.backend_id(device),
            self.open_device,
            self.lower_choices,
            self.rtol,
            self.atol,
            self.cache,
            str(self.mode),
        )
        outcome = gpu_tuning.search(graph, reference, compiled, fingerprint, deadline, tuning)
        self.search_record, self.cache_hit = outcome.record, outcome.cache_hit
        if outcome.chosen:
            program = self.lower_choices(graph, outcome.chosen)
            compiled = GpuCompiledGraph(graph, program, device, self.name)
        compiled.build()  # the search measured on a program of its own
        self._verify(graph, compiled, reference)  # a searched program is always checked
        graph.compiled = compiled
        return compiled

    def _verify(self, graph: Graph, compiled: GpuCompiledGraph, reference: Graph) -> None:
        """Run `compiled` (not yet installed) and the reference on the same inputs (seeded
        where unset); the user's inputs are restored afterwards."""
        saved = dict(graph.input_data)
        try:
            check_inputs(graph, reference)
            expected = reference_outputs(reference, self.rtol, self.atol)
            compiled.execute(graph)
            results = read_outputs(graph, output_views(reference, expected))
            problem = check_outputs(results, expected)
            if problem is not None:
                raise CompileError(f"{self.name}: compiled graph is {problem}")
        finally:
            graph.input_data = dict(saved)
            graph.buffers = {}

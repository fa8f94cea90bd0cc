"""`lm.MetalCompiler()`: the shared GPU lowering (`luminal.kernel.gpu`) as Metal Shading
Language, compiled by the Metal framework and run on an Apple GPU.

`render(graph)` works anywhere (it is how CI checks Metal sources); `build(graph)` and
`graph.compile(MetalCompiler())` need macOS with a Metal GPU and pyobjc-framework-Metal,
and elsewhere raise CompileError naming what is missing.
"""

from __future__ import annotations

import warnings
from typing import Any

from luminal.backends.cpu.verify import check_inputs, output_views, reference_outputs
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.metal.render import MetalRenderer
from luminal.backends.metal.runtime import MetalDevice
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.passes import GenericCompiler
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.search.budget import TimeBudget
from luminal.search.outputs import read_outputs
from luminal.search.strategy import check_outputs

MODES = ("fast", "optimal")
RULESETS = ("algebra", "structure", "cpu")  # contractions to `Contract` (backend-neutral)


class MetalCompiler:
    """Compile a graph to Metal kernels for the system's GPU. `verify` runs the compiled
    graph and the reference runtime on the same inputs and raises CompileError when they
    differ."""

    name = "MetalCompiler"

    def __init__(
        self,
        mode: Any = "fast",
        verify: bool = True,
        rtol: float = 1e-3,
        atol: float = 1e-4,
    ) -> None:
        if not (mode in MODES or isinstance(mode, TimeBudget)):
            raise CompileError(
                f"MetalCompiler: unknown mode {mode!r}; expected one of {MODES} or "
                "lm.TimeBudget(seconds)"
            )
        self.mode = mode
        self.verify = verify
        self.rtol = rtol
        self.atol = atol

    def lower(self, graph: Graph) -> GpuProgram:
        """Generic passes, the e-graph, then the GPU launches (changes `graph`)."""
        graph.compile(GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=RULESETS))
        graph.compile(GenericCompiler())
        return lower_gpu(graph)

    def render(self, graph: Graph) -> str:
        """The Metal library source the graph compiles to; the graph is not changed."""
        return MetalRenderer().program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> MetalDevice:
        """The system GPU with the graph's library compiled and its pipelines made (Apple
        hardware only); the graph is not changed."""
        device = MetalDevice()  # CompileError off Apple hardware
        device.build(self.lower(graph.structure_copy()).launches)
        return device

    def compile(self, graph: Graph) -> GpuCompiledGraph:
        device = MetalDevice()  # CompileError off Apple hardware
        if self.mode != "fast":
            warnings.warn(
                "MetalCompiler: measured search over GPU schedules is not implemented yet; "
                "the static GPU lowering is used",
                stacklevel=3,
            )
        reference = graph.structure_copy() if self.verify else None
        graph.compiled = None
        compiled = GpuCompiledGraph(graph, self.lower(graph), device, self.name)
        compiled.build()
        if reference is not None:  # installed only once checked: Graph.compile restores
            self._verify(graph, compiled, reference)
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

"""`lm.MetalCompiler()`: the shared GPU lowering (`luminal.kernel.gpu`) as Metal Shading
Language, compiled by the Metal framework and run on an Apple GPU.

`render(graph)` works anywhere (it is how CI checks Metal sources), as does
`render_candidates(graph)` (every option of the measured search in one library);
`mode="optimal"` or `lm.TimeBudget(seconds)` verifies and times them on the GPU
(`luminal.backends.gpu_tuning`). `build(graph)` and `graph.compile(MetalCompiler())` need
macOS with a Metal GPU and pyobjc-framework-Metal, and elsewhere raise CompileError
naming what is missing.
"""

from __future__ import annotations

from luminal.backends import gpu_search
from luminal.backends.gpu_compiler import GpuCompiler
from luminal.backends.metal.render import MetalRenderer
from luminal.backends.metal.runtime import MetalDevice
from luminal.graph import Graph


class MetalCompiler(GpuCompiler):
    """Compile a graph to Metal kernels for the system's GPU (`mode`, `verify`, `rtol`,
    `atol` as for every GPU compiler, `luminal.backends.gpu_compiler.GpuCompiler`)."""

    name = "MetalCompiler"
    language = "metal"

    def open_device(self) -> MetalDevice:
        return MetalDevice()  # CompileError off Apple hardware

    def backend_id(self, device: MetalDevice) -> str:
        return f"metal/{device.name}"

    def render_candidates(self, graph: Graph) -> tuple[list[gpu_search.Site], str]:
        """What a measured search would build, anywhere: the kernel sites with their
        options, and the one library holding the default launches and every option's;
        the graph is not changed."""
        copy = graph.structure_copy()
        program = self.lower(copy)
        launches = gpu_search.candidates(copy, program, self.lower_choices)
        return gpu_search.sites(copy, program), MetalRenderer().program(launches)[1]

    def render(self, graph: Graph) -> str:
        """The Metal library source the graph compiles to; the graph is not changed."""
        return MetalRenderer().program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> MetalDevice:
        """The system GPU with the graph's library compiled and its pipelines made (Apple
        hardware only); the graph is not changed."""
        device = self.open_device()
        device.build(self.lower(graph.structure_copy()).launches)
        return device

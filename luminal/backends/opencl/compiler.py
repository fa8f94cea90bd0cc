"""`lm.OpenCLCompiler(device=None)`: the CPU backend's pipeline down to the schedule
(generic passes, e-graph lowering of contractions, fusion), then the shared GPU lowering
(`luminal.kernel.gpu`), OpenCL C for every launch in one program, device buffers, and a
check against the reference runtime before the compiled graph is trusted."""

from __future__ import annotations

import warnings
from typing import Any

from luminal.backends.cpu.verify import check_inputs, output_views, reference_outputs
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.passes import GenericCompiler
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.kernel.gpu_matmul import DEFAULT_TILE, TILES
from luminal.search.budget import TimeBudget
from luminal.search.outputs import read_outputs
from luminal.search.strategy import check_outputs

MODES = ("fast", "optimal")
# contractions become `Contract` ops (the `cpu` ruleset's name is historical: the rewrite
# is backend-neutral); GPU lowering turns them into loop kernels
RULESETS = ("algebra", "structure", "cpu")


class OpenCLCompiler:
    """Compile a graph to OpenCL kernels for one device: `device` an index into
    `lm.backends.opencl.toolchain.all_devices()` or a substring of its name (None: the
    first GPU, else any device that builds programs; `$LUMINAL_OPENCL_DEVICE` overrides).
    `verify` runs the compiled graph and the reference runtime on the same inputs and
    raises CompileError when they differ; `cache` keeps built programs on disk. `tile` is
    the tile size of matrix products staged in local memory (4, 8, 16 or 32; 0: one
    work-item per output element reading its whole row and column).
    `render(graph)` and `build(graph)` give the program's source and built program
    without changing the graph."""

    name = "OpenCLCompiler"

    def __init__(
        self,
        device: int | str | None = None,
        mode: Any = "fast",
        verify: bool = True,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        cache: bool = True,
        tile: int = DEFAULT_TILE,
    ) -> None:
        if not (mode in MODES or isinstance(mode, TimeBudget)):
            raise CompileError(
                f"OpenCLCompiler: unknown mode {mode!r}; expected one of {MODES} or "
                "lm.TimeBudget(seconds)"
            )
        if tile and tile not in TILES:
            raise CompileError(f"OpenCLCompiler: tile {tile!r} is not one of {TILES} or 0")
        self.tile = tile
        self.device = device
        self.mode = mode
        self.verify = verify
        self.rtol = rtol
        self.atol = atol
        self.cache = cache

    # ---------------------------------------------------------------- compiling
    def compile(self, graph: Graph) -> GpuCompiledGraph:
        device = OpenCLDevice(self.device, cache=self.cache)  # CompileError without one
        if self.mode != "fast":
            warnings.warn(
                "OpenCLCompiler: measured search over GPU schedules is not implemented yet; "
                "the static GPU lowering is used",
                stacklevel=3,
            )
        reference = graph.structure_copy() if self.verify else None
        graph.compiled = None
        program = self.lower(graph)
        compiled = GpuCompiledGraph(graph, program, device, self.name)
        compiled.build()
        if reference is not None:  # installed only once checked: Graph.compile restores
            self._verify(graph, compiled, reference)
        graph.compiled = compiled
        return compiled

    def lower(self, graph: Graph) -> GpuProgram:
        """Generic passes, the e-graph, then the GPU launches (changes `graph`)."""
        graph.compile(GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=RULESETS))
        graph.compile(GenericCompiler())
        return lower_gpu(graph, tile=self.tile)

    def render(self, graph: Graph) -> str:
        """The OpenCL C program the graph compiles to (no device needed); the graph is
        not changed."""
        copy = graph.structure_copy()
        return OpenCLRenderer().program(self.lower(copy).launches)[1]

    def build(self, graph: Graph) -> Any:
        """The built `pyopencl.Program` of the graph on the chosen device (from the disk
        cache when there); the graph is not changed."""
        device = OpenCLDevice(self.device, cache=self.cache)
        device.build(self.lower(graph.structure_copy()).launches)
        return device.program

    # ---------------------------------------------------------------- checking
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


def available() -> bool:
    """pyopencl is installed and an OpenCL device can build programs."""
    return toolchain.is_available()

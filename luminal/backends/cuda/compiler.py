"""`lm.CUDACompiler(device=0, arch=("sm_80", "sm_90"))`: the shared GPU lowering
(`luminal.kernel.gpu`, with tensor-core kernels for half-precision matrix products) as
CUDA C, built by NVRTC and checked by ptxas for each architecture, run through the CUDA
driver on a GPU.

Without a GPU, `render(graph)` (the CUDA C module) and `build(graph)` (PTX and a cubin
per architecture) still work; `graph.compile(CUDACompiler())` raises CompileError naming
what is missing (cuda-python, the NVIDIA driver, the device).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

from luminal.backends.cpu.verify import check_inputs, output_views, reference_outputs
from luminal.backends.cuda import nvrtc, toolchain, wmma
from luminal.backends.cuda.render import CUDARenderer
from luminal.backends.cuda.runtime import CudaDevice
from luminal.backends.cuda.toolchain import DEFAULT_ARCHES, CudaModule
from luminal.backends.gpu_runtime import GpuCompiledGraph
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


class CUDACompiler:
    """Compile a graph to CUDA kernels for GPU `device`, with binaries for every
    architecture in `arch` (plus the device's own). `tensor_cores`: float16/bfloat16
    matrix products run as WMMA kernels (sm_70 and newer). `verify` runs the compiled
    graph and the reference runtime on the same inputs and raises CompileError when they
    differ."""

    name = "CUDACompiler"

    def __init__(
        self,
        device: int = 0,
        arch: Sequence[str] = DEFAULT_ARCHES,
        mode: Any = "fast",
        verify: bool = True,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        tensor_cores: bool = True,
    ) -> None:
        if not (mode in MODES or isinstance(mode, TimeBudget)):
            raise CompileError(
                f"CUDACompiler: unknown mode {mode!r}; expected one of {MODES} or "
                "lm.TimeBudget(seconds)"
            )
        self.arch = tuple(nvrtc.check_arch(a) for a in ([arch] if isinstance(arch, str) else arch))
        self.device = device
        self.mode = mode
        self.verify = verify
        self.rtol = rtol
        self.atol = atol
        self.tensor_cores = tensor_cores

    # ---------------------------------------------------------------- no GPU needed
    def lower(self, graph: Graph) -> GpuProgram:
        """Generic passes, the e-graph, then the GPU launches (changes `graph`)."""
        graph.compile(GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=RULESETS))
        graph.compile(GenericCompiler())
        return gpu_program(graph, self.arch, self.tensor_cores)

    def render(self, graph: Graph) -> str:
        """The CUDA C module the graph compiles to; the graph is not changed."""
        return CUDARenderer().program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> CudaModule:
        """PTX and a ptxas-checked cubin of the graph's module for every architecture of
        `arch` (from the disk cache when there); the graph is not changed."""
        names, source = CUDARenderer().program(self.lower(graph.structure_copy()).launches)
        return toolchain.build(source, sorted(set(names)), self.arch)

    # ---------------------------------------------------------------- on the GPU
    def compile(self, graph: Graph) -> GpuCompiledGraph:
        device = CudaDevice(self.device, self.arch)  # CompileError without a GPU
        if self.mode != "fast":
            warnings.warn(
                "CUDACompiler: measured search over GPU schedules is not implemented yet; "
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


def gpu_program(
    graph: Graph, arch: Sequence[str] = DEFAULT_ARCHES, tensor_cores: bool = True
) -> GpuProgram:
    """The launches of a graph after the e-graph: the shared GPU lowering, with WMMA
    kernels for half-precision matrix products every architecture of `arch` has."""
    if not tensor_cores:
        return lower_gpu(graph)
    oldest = min(nvrtc.arch_number(a) for a in arch)
    return lower_gpu(graph, special=functools.partial(wmma.special_kernel, oldest=oldest))

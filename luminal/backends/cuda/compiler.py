"""`lm.CUDACompiler(device=0, arch=("sm_80", "sm_90"))`: the shared GPU lowering
(`luminal.kernel.gpu`, with tensor-core kernels for half-precision matrix products) as
CUDA C, built by NVRTC and checked by ptxas for each architecture, run through the CUDA
driver on a GPU.

`mode="optimal"` or `lm.TimeBudget(seconds)` runs the shared measured search
(`luminal.backends.gpu_tuning`) through the CUDA runtime: every option of every kernel
site verified and timed on the GPU. Without a GPU, `render(graph)` (the CUDA C module),
`build(graph)` (PTX and a cubin per architecture) and `build_candidates(graph)` (every
search option in one ptxas-checked module) still work; `graph.compile(CUDACompiler())`
raises CompileError naming what is missing (cuda-python, the NVIDIA driver, the device).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from luminal.backends import gpu_search
from luminal.backends.cuda import nvrtc, toolchain, wmma
from luminal.backends.cuda.render import CUDARenderer
from luminal.backends.cuda.runtime import CudaDevice
from luminal.backends.cuda.toolchain import DEFAULT_ARCHES, CudaModule
from luminal.backends.gpu_compiler import GpuCompiler
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, Special, lower_gpu


class CUDACompiler(GpuCompiler):
    """Compile a graph to CUDA kernels for GPU `device`, with binaries for every
    architecture in `arch`. `tensor_cores`: float16/bfloat16 matrix products run as WMMA
    kernels where every architecture has them. `mode`, `verify`, `rtol`, `atol` as for
    every GPU compiler (`luminal.backends.gpu_compiler.GpuCompiler`)."""

    name = "CUDACompiler"
    language = "cuda"

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
        super().__init__(mode, verify, rtol, atol)
        self.arch = tuple(nvrtc.check_arch(a) for a in ([arch] if isinstance(arch, str) else arch))
        self.device = device
        self.tensor_cores = tensor_cores

    def open_device(self) -> CudaDevice:
        return CudaDevice(self.device, self.arch)

    def program(self, graph: Graph) -> GpuProgram:
        return gpu_program(graph, self.arch, self.tensor_cores)

    def lower_choices(self, graph: Graph, chosen: dict[int, gpu_search.Option]) -> GpuProgram:
        return gpu_search.lower_choices(graph, gpu_search.DEFAULT, chosen, self._special())

    def backend_id(self, device: CudaDevice) -> str:
        major, minor = device.capability
        return f"cuda/{device.name}/sm_{major}{minor}/{toolchain.build_id()[:12]}"

    def _special(self) -> Special | None:
        """The tensor-core kernels, where every architecture of `arch` has them."""
        if not self.tensor_cores:
            return None
        oldest = min(nvrtc.arch_number(a) for a in self.arch)
        return functools.partial(wmma.special_kernel, oldest=oldest)

    def build_candidates(self, graph: Graph) -> tuple[list[gpu_search.Site], CudaModule]:
        """What a measured search would build, without a GPU: the kernel sites with their
        options, and the one module holding the default launches and every option's,
        built and ptxas-checked for every architecture; the graph is not changed."""
        copy = graph.structure_copy()
        program = self.lower(copy)
        launches = gpu_search.candidates(copy, program, self.lower_choices)
        names, source = CUDARenderer().program(launches)
        return gpu_search.sites(copy, program), toolchain.build(
            source, sorted(set(names)), self.arch
        )

    def render(self, graph: Graph) -> str:
        """The CUDA C module the graph compiles to; the graph is not changed."""
        return CUDARenderer().program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> CudaModule:
        """PTX and a ptxas-checked cubin of the graph's module for every architecture of
        `arch` (from the disk cache when there); the graph is not changed."""
        names, source = CUDARenderer().program(self.lower(graph.structure_copy()).launches)
        return toolchain.build(source, sorted(set(names)), self.arch)


def gpu_program(
    graph: Graph, arch: Sequence[str] = DEFAULT_ARCHES, tensor_cores: bool = True
) -> GpuProgram:
    """The launches of a graph after the e-graph: the shared GPU lowering, with WMMA
    kernels for half-precision matrix products every architecture of `arch` has."""
    return lower_gpu(graph, special=CUDACompiler(arch=arch, tensor_cores=tensor_cores)._special())

"""`lm.OpenCLCompiler(device=None)`: the shared GPU compiler pipeline
(`luminal.backends.gpu_compiler.GpuCompiler`: the CPU backend's passes down to the
schedule, the shared GPU lowering, a check against the reference runtime) as OpenCL C in
one program, on any OpenCL device; measured search over the GPU knobs (tiles of matrix
products, work-group sizes, vector widths and unrolling of other kernels; the shared
search of every GPU compiler, `luminal.backends.gpu_tuning` over `gpu_search`) in the
searching modes, every option verified against the reference runtime."""

from __future__ import annotations

from typing import Any

from luminal.backends import gpu_search
from luminal.backends.gpu_compiler import RULESETS, GpuCompiler
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.kernel.gpu_matmul import BLOCKS, DEFAULT_TILE, TILES

__all__ = ["RULESETS", "OpenCLCompiler", "available"]


class OpenCLCompiler(GpuCompiler):
    """Compile a graph to OpenCL kernels for one device: `device` an index into
    `lm.backends.opencl.toolchain.all_devices()` or a substring of its name (None: the
    first GPU, else any device that builds programs; `$LUMINAL_OPENCL_DEVICE` overrides).
    `verify` runs the compiled graph and the reference runtime on the same inputs and
    raises CompileError when they differ; `cache` keeps built programs and search results
    on disk. `tile` is the tile size of matrix products staged in local memory (4, 8, 16
    or 32; 0: one work-item per output element reading its whole row and column), `block`
    the outputs per work-item along each side (register blocking: 1, 2 or 4);
    `mode="optimal"` or `lm.TimeBudget(seconds)` verifies and measures every option of
    every kernel site (the tiles of products, the work-group size, vector width and
    unrolling of other kernels) and keeps the fastest verified one. `half`: float16
    kernels without reductions compute in `half` (None: where the device reports
    `cl_khr_fp16`; False: never, reading half as float; True: required, CompileError
    on a device without it).
    `render(graph)` and `build(graph)` give the program's source and built program
    without changing the graph."""

    name = "OpenCLCompiler"
    language = "opencl"

    def __init__(
        self,
        device: int | str | None = None,
        mode: Any = "fast",
        verify: bool = True,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        cache: bool = True,
        tile: int = DEFAULT_TILE,
        block: int = 1,
        half: bool | None = None,
    ) -> None:
        super().__init__(mode, verify, rtol, atol)
        if tile and tile not in TILES:
            raise CompileError(f"OpenCLCompiler: tile {tile!r} is not one of {TILES} or 0")
        if block not in BLOCKS:
            raise CompileError(f"OpenCLCompiler: block {block!r} is not one of {BLOCKS}")
        self.block = block
        self.half = half
        self.device = device
        self.cache = cache
        self.tile = tile

    def open_device(self) -> OpenCLDevice:
        return OpenCLDevice(self.device, cache=self.cache, half=self.half)

    def program(self, graph: Graph) -> GpuProgram:
        return lower_gpu(graph, tile=(self.tile, self.block))

    def render(self, graph: Graph) -> str:
        """The OpenCL C program the graph compiles to (no device needed, so float16
        computes in half only with `half=True`); the graph is not changed."""
        renderer = OpenCLRenderer(half_arithmetic=bool(self.half))
        return renderer.program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> Any:
        """The built `pyopencl.Program` of the graph on the chosen device (from the disk
        cache when there); the graph is not changed."""
        device = self.open_device()
        device.build(self.lower(graph.structure_copy()).launches)
        return device.program

    def lower_choices(self, graph: Graph, chosen: dict[int, gpu_search.Option]) -> GpuProgram:
        return gpu_search.lower_choices(graph, (self.tile, self.block), chosen)

    def backend_id(self, device: OpenCLDevice) -> str:
        info = device.device.info
        return f"opencl/{info.label}/{info.driver}{'/fp16' if device.half else ''}"


def available() -> bool:
    """pyopencl is installed and an OpenCL device can build programs."""
    return toolchain.is_available()

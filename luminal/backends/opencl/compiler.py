"""`lm.OpenCLCompiler(device=None)`: the shared GPU compiler pipeline
(`luminal.backends.gpu_compiler.GpuCompiler`: the CPU backend's passes down to the
schedule, the shared GPU lowering, a check against the reference runtime) as OpenCL C in
one program, on any OpenCL device; measured search over the tile sizes of matrix products
(`luminal.backends.gpu_search`) in the searching modes."""

from __future__ import annotations

import math
from typing import Any

from luminal.backends import gpu_search
from luminal.backends.cpu.verify import check_inputs
from luminal.backends.gpu_compiler import RULESETS, GpuCompiler
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.kernel.gpu_matmul import (
    BLOCKS,
    DEFAULT_TILE,
    TILES,
    Schedule,
    parse_schedule,
    schedule_name,
)
from luminal.search.budget import Deadline, TimeBudget
from luminal.search.cache import (
    SearchCache,
    SearchRecord,
    Trial,
    cpu_model,
    luminal_version,
    search_key,
)
from luminal.search.fingerprint import graph_fingerprint

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
    `mode="optimal"` or `lm.TimeBudget(seconds)` measures every schedule per product.
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
        block: int = 1,
    ) -> None:
        super().__init__(mode, verify, rtol, atol)
        if tile and tile not in TILES:
            raise CompileError(f"OpenCLCompiler: tile {tile!r} is not one of {TILES} or 0")
        if block not in BLOCKS:
            raise CompileError(f"OpenCLCompiler: block {block!r} is not one of {BLOCKS}")
        self.block = block
        self.device = device
        self.cache = cache
        self.tile = tile
        self.search_record: SearchRecord | None = None
        self.cache_hit = False

    @property
    def searching(self) -> bool:
        return self.mode != "fast"

    def open_device(self) -> OpenCLDevice:
        return OpenCLDevice(self.device, cache=self.cache)

    def program(self, graph: Graph) -> GpuProgram:
        return lower_gpu(graph, tile=(self.tile, self.block))

    def render(self, graph: Graph) -> str:
        """The OpenCL C program the graph compiles to (no device needed); the graph is
        not changed."""
        return OpenCLRenderer().program(self.lower(graph.structure_copy()).launches)[1]

    def build(self, graph: Graph) -> Any:
        """The built `pyopencl.Program` of the graph on the chosen device (from the disk
        cache when there); the graph is not changed."""
        device = self.open_device()
        device.build(self.lower(graph.structure_copy()).launches)
        return device.program

    def compile(self, graph: Graph) -> GpuCompiledGraph:
        if not self.searching:
            return super().compile(graph)
        device = self.open_device()  # CompileError without one, before the graph changes
        budget = self.mode.seconds if isinstance(self.mode, TimeBudget) else math.inf
        deadline = Deadline(budget)
        fingerprint = graph_fingerprint(graph)
        reference = graph.structure_copy()
        graph.compiled = None
        compiled = GpuCompiledGraph(graph, self.lower(graph), device, self.name)
        compiled.build()
        tiles = self._search(graph, reference, compiled, fingerprint, deadline)
        if tiles is not None:
            program = lower_gpu(graph, tile=(self.tile, self.block), tiles=tiles)
            compiled = GpuCompiledGraph(graph, program, device, self.name)
            compiled.build()
        self._verify(graph, compiled, reference)  # a searched program is always checked
        graph.compiled = compiled
        return compiled

    def _search(
        self,
        graph: Graph,
        reference: Graph,
        compiled: GpuCompiledGraph,
        fingerprint: str,
        deadline: Deadline,
    ) -> dict[int, Schedule] | None:
        """The schedule of every matrix product: cached, or measured on the device (None:
        no matrix products, keep the default program)."""
        products = gpu_search.sites(graph, compiled.program)
        if not products:
            return None
        saved = dict(graph.input_data)
        dims = check_inputs(graph, reference)
        device = compiled.device
        key = search_key(fingerprint, dims, self._backend_id(device), gpu_search.SPACE_VERSION)
        store = SearchCache(toolchain.cache_root() / "search")
        record = store.load(key) if self.cache else None
        names = {gpu_search.site_name(i): n for i, n in enumerate(products)}
        space = {name: [schedule_name(t) for t in gpu_search.OPTIONS] for name in names}
        if record is not None and record.sites == space:
            self.cache_hit = True
            self.search_record = record
            return {names[site]: parse_schedule(option) for site, option in record.chosen.items()}
        try:
            started = deadline.elapsed()
            found = gpu_search.search_tiles(graph, compiled, self.open_device, deadline)
        finally:
            graph.input_data = dict(saved)
            graph.buffers = {}
        by_node = {n: name for name, n in names.items()}
        default = {n: t.get(gpu_search.DEFAULT, math.inf) for n, t in found.seconds.items()}
        best = {n: t[found.chosen[n]] for n, t in found.seconds.items()}
        record = SearchRecord(
            key=key,
            label=f"{len(products)} matrix products",
            backend=self._backend_id(device),
            mode=str(self.mode),
            cpu=cpu_model(),
            version=luminal_version(),
            chosen={by_node[n]: schedule_name(t) for n, t in found.chosen.items()},
            best_seconds=float(sum(best.values())),
            baseline_seconds=float(sum(default.values())),
            search_seconds=deadline.elapsed() - started,
            sites=space,
            trials=[
                Trial({by_node[n]: schedule_name(tile)}, "ok", seconds)
                for n, timings in found.seconds.items()
                for tile, seconds in timings.items()
            ],
            stopped_by=found.stopped_by,
        )
        if self.cache and found.stopped_by == "space exhausted":
            store.store(record)
        self.search_record = record
        return found.chosen

    def _backend_id(self, device: OpenCLDevice) -> str:
        info = device.device.info
        return f"opencl/{info.label}/{info.driver}"


def available() -> bool:
    """pyopencl is installed and an OpenCL device can build programs."""
    return toolchain.is_available()

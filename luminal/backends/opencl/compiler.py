"""`lm.OpenCLCompiler(device=None)`: the shared GPU compiler pipeline
(`luminal.backends.gpu_compiler.GpuCompiler`: the CPU backend's passes down to the
schedule, the shared GPU lowering, a check against the reference runtime) as OpenCL C in
one program, on any OpenCL device; measured search over the GPU knobs (tiles of matrix
products, work-group sizes and unrolling of other kernels; `luminal.backends.gpu_search`)
in the searching modes, every option verified against the reference runtime."""

from __future__ import annotations

import math
from typing import Any

from luminal.backends import gpu_search
from luminal.backends.cpu.verify import check_inputs, reference_outputs
from luminal.backends.gpu_compiler import RULESETS, GpuCompiler
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl import toolchain
from luminal.backends.opencl.render import OpenCLRenderer
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.kernel.gpu import GpuProgram, lower_gpu
from luminal.kernel.gpu_matmul import BLOCKS, DEFAULT_TILE, TILES
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
        self.search_record: SearchRecord | None = None
        self.cache_hit = False

    @property
    def searching(self) -> bool:
        return self.mode != "fast"

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
        chosen = self._search(graph, reference, compiled, fingerprint, deadline)
        if chosen:
            program = gpu_search.lower_choices(graph, (self.tile, self.block), chosen)
            compiled = GpuCompiledGraph(graph, program, device, self.name)
        compiled.build()  # the search measured on a program of its own
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
    ) -> dict[int, gpu_search.Option]:
        """The option of every site (tiles of matrix products, knobs of other kernels):
        cached, or verified and measured on the device (empty: no sites, keep the
        default program)."""
        found = gpu_search.sites(graph, compiled.program)
        if not found:
            return {}
        saved = dict(graph.input_data)
        dims = check_inputs(graph, reference)
        device = compiled.device
        key = search_key(fingerprint, dims, self._backend_id(device), gpu_search.SPACE_VERSION)
        store = SearchCache(toolchain.cache_root() / "search")
        record = store.load(key) if self.cache else None
        space = {s.name: [name for name, _ in s.options] for s in found}
        if record is not None and record.sites == space:
            self.cache_hit = True
            self.search_record = record
            return _options(found, record.chosen)
        try:
            started = deadline.elapsed()
            expected = reference_outputs(reference, self.rtol, self.atol)

            def check(trial: GpuCompiledGraph) -> str | None:
                return gpu_search.differs(graph, trial, reference, expected)

            result = gpu_search.search_sites(graph, compiled, self.open_device, check, deadline)
        finally:
            graph.input_data = dict(saved)
            graph.buffers = {}
        record = self._record(key, found, result, deadline.elapsed() - started, device)
        if self.cache and result.stopped_by == "space exhausted":
            store.store(record)
        self.search_record = record
        return _options(found, result.chosen)

    def _record(
        self,
        key: str,
        found: list[gpu_search.Site],
        result: gpu_search.SiteSearch,
        seconds: float,
        device: OpenCLDevice,
    ) -> SearchRecord:
        defaults = {s.name: s.options[0][0] for s in found}
        timed = result.seconds
        trials = [
            Trial({site: option}, "ok", t) for site, ts in timed.items() for option, t in ts.items()
        ]
        trials += [
            Trial({site: option}, why.split(":")[0], None, why)
            for site, reasons in result.dropped.items()
            for option, why in reasons.items()
        ]
        return SearchRecord(
            key=key,
            label=f"{len(found)} kernel sites",
            backend=self._backend_id(device),
            mode=str(self.mode),
            cpu=cpu_model(),
            version=luminal_version(),
            chosen=result.chosen,
            best_seconds=float(sum(ts[result.chosen[s]] for s, ts in timed.items() if ts)),
            baseline_seconds=float(sum(ts.get(defaults[s], math.inf) for s, ts in timed.items())),
            search_seconds=seconds,
            sites={s.name: [name for name, _ in s.options] for s in found},
            trials=trials,
            stopped_by=result.stopped_by,
        )

    def _backend_id(self, device: OpenCLDevice) -> str:
        info = device.device.info
        return f"opencl/{info.label}/{info.driver}{'/fp16' if device.half else ''}"


def available() -> bool:
    """pyopencl is installed and an OpenCL device can build programs."""
    return toolchain.is_available()


def _options(found: list[gpu_search.Site], chosen: dict[str, str]) -> dict[int, gpu_search.Option]:
    """Node id -> chosen option of every site."""
    by_name = {s.name: s for s in found}
    return {by_name[name].node: by_name[name].option(option) for name, option in chosen.items()}

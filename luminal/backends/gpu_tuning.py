"""The measured search of a GPU compiler, whatever the device: the knob options of every
kernel site (`luminal.backends.gpu_search`) from the disk cache, or verified and timed
on the device; the record of what was tried. `GpuCompiler.compile` runs it in the
searching modes for every backend (OpenCL, CUDA, Metal), each supplying its device, its
`backend_id` (the cache key's device part) and its lowering of chosen options.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from luminal.backends import gpu_search
from luminal.backends.cpu.cache_location import cache_root
from luminal.backends.cpu.verify import check_inputs, reference_outputs
from luminal.backends.gpu_runtime import GpuCompiledGraph, GpuDevice
from luminal.graph import Graph
from luminal.search.budget import Deadline
from luminal.search.cache import (
    SearchCache,
    SearchRecord,
    Trial,
    cpu_model,
    luminal_version,
    search_key,
)


@dataclass(frozen=True)
class Tuning:
    """What the search is run with: the device's cache id, how to open a device for the
    program of every option, how to lower chosen options, tolerances, the cache switch
    and the mode's name (for the record)."""

    backend_id: str
    make_device: Callable[[], GpuDevice]
    lower: gpu_search.Lowering
    rtol: float
    atol: float
    cache: bool
    mode: str


@dataclass
class Outcome:
    """The chosen option per node, the record, whether it came from the cache."""

    chosen: dict[int, gpu_search.Option]
    record: SearchRecord | None = None
    cache_hit: bool = False


def search(
    graph: Graph,
    reference: Graph,
    compiled: GpuCompiledGraph,
    fingerprint: str,
    deadline: Deadline,
    tuning: Tuning,
) -> Outcome:
    """The option of every site (tiles of matrix products, knobs of other kernels):
    cached, or verified and measured on the device (no sites: nothing chosen, keep the
    default program). The graph's inputs are restored afterwards."""
    found = gpu_search.sites(graph, compiled.program)
    if not found:
        return Outcome({})
    saved = dict(graph.input_data)
    dims = check_inputs(graph, reference)
    key = search_key(fingerprint, dims, tuning.backend_id, gpu_search.SPACE_VERSION)
    store = SearchCache(cache_root() / "search")
    record = store.load(key) if tuning.cache else None
    space = {s.name: [name for name, _ in s.options] for s in found}
    if record is not None and record.sites == space:
        return Outcome(_options(found, record.chosen), record, cache_hit=True)
    try:
        started = deadline.elapsed()
        expected = reference_outputs(reference, tuning.rtol, tuning.atol)

        def check(trial: GpuCompiledGraph) -> str | None:
            return gpu_search.differs(graph, trial, reference, expected)

        result = gpu_search.search_sites(
            graph, compiled, tuning.make_device, check, deadline, tuning.lower
        )
    finally:
        graph.input_data = dict(saved)
        graph.buffers = {}
    record = _record(key, found, result, deadline.elapsed() - started, tuning)
    if tuning.cache and result.stopped_by == "space exhausted":
        store.store(record)
    return Outcome(_options(found, result.chosen), record)


def _record(
    key: str,
    found: list[gpu_search.Site],
    result: gpu_search.SiteSearch,
    seconds: float,
    tuning: Tuning,
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
        backend=tuning.backend_id,
        mode=tuning.mode,
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


def _options(found: list[gpu_search.Site], chosen: dict[str, str]) -> dict[int, gpu_search.Option]:
    """Node id -> chosen option of every site."""
    by_name = {s.name: s for s in found}
    return {by_name[name].node: by_name[name].option(option) for name, option in chosen.items()}

"""The CPU backend's search space for measured search (`mode="optimal"` or a budget).

A *site* is a materialised node whose kernel has alternatives; an *option* rewrites that
node's kernel in a `Lowering` (and may absorb a neighbour: a matmul that computes its
bias/activation consumer in the same kernel). Loop knobs are transformations of the
kernel's IR (`luminal.kernel.transforms`), re-rendered; no option edits generated text.
Options come from `OPTION_PROVIDERS`, a list a test (or a user) may extend; whatever an
option produces is compiled, measured and checked against the reference runtime before
it can be chosen.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from luminal import ops
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.codegen import RENDERER, KernelSource, kernel_source
from luminal.backends.cpu.lowering import Lowering, assemble, lower_kernels
from luminal.backends.cpu.runtime import CompiledGraph
from luminal.errors import CompileError, LuminalError
from luminal.graph import Graph
from luminal.kernel import ir
from luminal.kernel.transforms import IllegalTransform, Opt, apply_opts, opts_name, walk
from luminal.search.driver import shared_inputs, without_inputs
from luminal.search.programs import ProgramAlternatives
from luminal.search.strategy import Config, Prepared, Site

SPACE_VERSION = "4"  # bump when options change meaning, so cached choices are re-searched
STATIC = "static"
INAPPLICABLE = "inapplicable"
MIN_SITE_SHARE = 0.02  # sites below this share of the estimated work are not searched
MAX_SITES = 8
BYTES_PER_SECOND = 10e9  # rough rates for ordering sites by their share of the run time
FLOPS_PER_SECOND = 100e9


@dataclass(frozen=True)
class KernelOption:
    """One alternative for a site: `apply(lowering, node_id)` edits the lowering."""

    name: str
    apply: Callable[[Lowering, int], None]


OptionProvider = Callable[[Lowering, int, dict[str, int]], list[KernelOption]]


# --------------------------------------------------------------------------- loop knobs
# today's knobs of a generated loop nest (which loops run on threads, the vector width)
# and, where cheap and legal, unrolling an innermost loop: each option is a list of IR
# transformations (`luminal.kernel.transforms`) applied to the kernel and re-rendered
LOOP_KNOBS: tuple[tuple[Opt, ...], ...] = (
    (Opt("serial"),),
    (Opt("parallel"),),
    (Opt("vector_width", None, 512),),
    (Opt("vector_width", None, 512), Opt("serial")),
    (Opt("vector_width", None, 512), Opt("parallel")),
)
UNROLL_FACTORS = (4, 8)
MIN_UNROLLED_EXTENT = 16  # shorter loops gcc unrolls by itself


def transformed(kernel: KernelSource, opts: Sequence[Opt]) -> KernelSource:
    """`kernel` with `opts` applied to its IR, rendered again (a new source, so a new
    symbol: variants link side by side)."""
    if kernel.kernel is None:
        raise CompileError(f"kernel {kernel.name} has no IR to transform ({opts_name(opts)})")
    return kernel_source(apply_opts(kernel.kernel, opts), RENDERER)


def transform_option(opts: Sequence[Opt]) -> KernelOption:
    """A site option applying `opts` to the site's kernel."""

    def apply(lowering: Lowering, node_id: int) -> None:
        lowering.kernels[node_id] = transformed(lowering.kernels[node_id], opts)

    return KernelOption(opts_name(opts), apply)


def has_parallel_loop(kernel: KernelSource | None) -> bool:
    """Whether the kernel is IR with a loop on threads (the loop knobs apply)."""
    if kernel is None or kernel.kernel is None:
        return False
    return any(isinstance(x, ir.Loop) and x.kind == "parallel" for x in walk(kernel.kernel.body))


def _unroll_knobs(kernel: ir.Kernel) -> list[tuple[Opt, ...]]:
    """Unrolling the first innermost serial or reduce loop with a long known extent, by
    each factor that divides it and is legal."""
    innermost = [
        x
        for x in walk(kernel.body)
        if isinstance(x, ir.Loop)
        and x.kind in ("serial", "reduce")
        and not any(isinstance(y, ir.Loop) for y in walk(x.body))
        and (x.extent.as_int() or 0) >= MIN_UNROLLED_EXTENT
    ]
    if not innermost:
        return []
    loop = innermost[0]
    same = [x for x in walk(kernel.body) if isinstance(x, ir.Loop) and x.var == loop.var]
    axis = loop.var if len(same) == 1 else f"{loop.var}@{same.index(loop)}"
    knobs = []
    for factor in UNROLL_FACTORS:
        opts = (Opt("unroll", axis, factor),)
        try:
            apply_opts(kernel, opts)
        except IllegalTransform:
            continue
        knobs.append(opts)
    return knobs


def loop_options(lowering: Lowering, node_id: int, dims: dict[str, int]) -> list[KernelOption]:
    """Generated loop nests: which loops run on threads (none, always, above a size),
    256- or 512-bit vectors, and an unrolled innermost loop."""
    kernel = lowering.kernels.get(node_id)
    if not has_parallel_loop(kernel):
        return []
    knobs = [*LOOP_KNOBS, *_unroll_knobs(kernel.kernel)]
    return [transform_option(opts) for opts in knobs]


def _matmul_options(lowering: Lowering, node_id: int, dims: dict[str, int]) -> list[KernelOption]:
    from luminal.backends.cpu.matmul_options import matmul_options

    return matmul_options(lowering, node_id, dims)


OPTION_PROVIDERS: list[OptionProvider] = [_matmul_options, loop_options]


def options_for(lowering: Lowering, node_id: int, dims: dict[str, int]) -> list[KernelOption]:
    options: dict[str, KernelOption] = {}
    for provider in OPTION_PROVIDERS:
        for option in provider(lowering, node_id, dims):
            options.setdefault(option.name, option)
    return list(options.values())


def estimated_seconds(lowering: Lowering, node_id: int, dims: dict[str, int]) -> float:
    """A rough time for the node's kernel: contractions by flops, the rest by bytes."""
    node = lowering.graph.nodes[node_id]

    def size(shape: Sequence) -> int:
        total = 1
        for d in shape:
            try:
                total *= int(d.evaluate(dims))
            except (KeyError, ValueError, TypeError):
                total *= 1
        return total

    if isinstance(node.op, ops.Contract):
        return 2 * size(node.inputs[0].view.shape) / FLOPS_PER_SECOND
    read = sum(size(e.view.shape) for e in node.inputs)
    return 4 * (size(node.shape) + read) / BYTES_PER_SECOND


def _label(kernel: KernelSource) -> str:
    return kernel.name.removeprefix("lm_").rsplit("_", 1)[0]


class CpuSearchSpace:
    """Sites of one graph (already through the generic and e-graph passes) and how to
    build the candidate for a configuration."""

    def __init__(self, graph: Graph, dims: dict[str, int], threads: int) -> None:
        self.graph = graph
        self.dims = dims
        self.setup = [("luminal.backends.cpu.toolchain", "set_num_threads", (threads,))]
        self.shared: tuple[str, bytes] | None = None
        base = lower_kernels(graph)
        self.node_of: dict[str, int] = {}
        self.sites: list[Site] = []
        weights = {n: estimated_seconds(base, n, dims) for n in base.kernels}
        total = sum(weights.values()) or 1.0
        for position, node_id in enumerate(base.order):
            kernel = base.kernels.get(node_id)
            if kernel is None or weights[node_id] < MIN_SITE_SHARE * total:
                continue
            options = options_for(base, node_id, dims)
            if not options:
                continue
            key = f"{position}:{_label(kernel)}"
            self.node_of[key] = node_id
            self.sites.append(Site(key, [STATIC, *(o.name for o in options)], weights[node_id]))
        # the heaviest sites only: a graph with dozens of small loops would otherwise spend
        # its search on kernels that cannot matter
        if len(self.sites) > MAX_SITES:
            kept = sorted(self.sites, key=lambda s: -s.weight)[:MAX_SITES]
            self.sites = [s for s in self.sites if s in kept]
            self.node_of = {s.key: self.node_of[s.key] for s in self.sites}

    def site_options(self) -> dict[str, list[str]]:
        return {site.key: list(site.options) for site in self.sites}

    def lowering(self, config: Config) -> Lowering:
        lowering = lower_kernels(self.graph)
        static = dict(lowering.kernels)
        for site in self.sites:
            choice = config.get(site.key, STATIC)
            if choice == STATIC:
                continue
            node_id = self.node_of[site.key]
            options = {o.name: o for o in options_for(lowering, node_id, self.dims)}
            if choice not in options:
                # an earlier site's option absorbed this kernel (a fused epilogue)
                raise CompileError(
                    f"{INAPPLICABLE}: site {site.key} has no option {choice!r} in this program"
                )
            options[choice].apply(lowering, node_id)
        heads = static.keys() | lowering.kernels.keys()
        lowering.searched = {h for h in heads if lowering.kernels.get(h) is not static.get(h)}
        return lowering

    def compiled(self, config: Config) -> CompiledGraph:
        return assemble(self.lowering(config))

    def prepare(self, configs: Sequence[Config]) -> list[Prepared]:
        if self.shared is None:
            self.shared = shared_inputs(self.graph)
        build = lambda config: (self.graph, self.compiled(config))  # noqa: E731
        return prepare_candidates(configs, build, self.shared)


class ProgramSpace:
    """The e-graph's alternative programs (one site per distinct region), each lowered
    with the static kernels."""

    def __init__(self, alternatives: ProgramAlternatives, threads: int) -> None:
        self.alternatives = alternatives
        self.sites = alternatives.sites
        self.setup = [("luminal.backends.cpu.toolchain", "set_num_threads", (threads,))]
        self.shared = shared_inputs(alternatives.base)  # every alternative reads these

    def prepare(self, configs: Sequence[Config]) -> list[Prepared]:
        def build(config: Config) -> tuple[Graph, CompiledGraph]:
            graph = self.alternatives.graph_for(config)
            return graph, assemble(lower_kernels(graph))

        return prepare_candidates(configs, build, self.shared)


Builder = Callable[[Config], tuple[Graph, CompiledGraph]]


def prepare_candidates(
    configs: Sequence[Config], build: Builder, shared: tuple[str, bytes]
) -> list[Prepared]:
    """Lower each configuration, then compile every candidate's kernels in parallel
    (one gcc per core; kernels already in the on-disk cache cost nothing) and link.
    Candidates carry their graph without the input arrays, which travel as `shared`."""
    built: list[tuple[Config, tuple[Graph, CompiledGraph] | None, str | None]] = []
    for config in configs:
        try:
            built.append((config, build(config), None))
        except LuminalError as error:
            built.append((config, None, str(error)))

    def link(item: tuple[Config, tuple[Graph, CompiledGraph] | None, str | None]) -> Prepared:
        config, candidate, error = item
        if candidate is None:
            return Prepared(config, error=error)
        try:
            toolchain.build_shared(candidate[1].units(), link_blas=True)
        except LuminalError as failure:
            return Prepared(config, error=str(failure))
        graph, compiled = candidate
        payload = pickle.dumps((without_inputs(graph), compiled))
        return Prepared(config, payload=payload, shared=shared)

    with ThreadPoolExecutor(max_workers=max(1, toolchain._cpu_count())) as pool:
        return list(pool.map(link, built))

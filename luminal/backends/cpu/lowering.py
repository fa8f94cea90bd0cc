"""Static lowering: the kernel of every materialised node (mode="fast"), lowered to IR
and rendered to C, kept in a `Lowering` that measured search may edit, then assembled
into a CompiledGraph."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from luminal import ops
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.blas import blas_contract_kernel
from luminal.backends.cpu.codegen import PRELUDE, RENDERER, KernelSource, kernel_source
from luminal.backends.cpu.cpu_caches import winograd_weight_limit
from luminal.backends.cpu.runtime import CompiledGraph, Segment
from luminal.backends.cpu.sgemm_epilogue import fuse_epilogues
from luminal.backends.cpu.winograd import winograd_kernel
from luminal.compiler.attention import fuse_attention
from luminal.compiler.max_pool import fuse_max_pools
from luminal.compiler.winograd import fuse_winograd
from luminal.custom import CustomKernel
from luminal.graph import Graph
from luminal.kernel import ir
from luminal.kernel.attention import attention_kernel
from luminal.kernel.constant_contract import constant_contract_kernel
from luminal.kernel.indexing import dims_of
from luminal.kernel.lower import (
    NotRowLocal,
    custom_kernel,
    elementwise_kernel,
    gather_kernel,
    reduce_kernel,
    row_kernel,
    scatter_kernel,
)
from luminal.render.c import CRenderer
from luminal.schedule.contraction import is_blas_contract
from luminal.schedule.fusion import plan_fusion


@dataclass
class Lowering:
    """Kernels chosen for a graph before they are linked: one per node that writes a
    buffer, in execution order (`order` also holds Python Function nodes, which end a
    segment). Measured search (`tuning.py`) swaps kernels here before `assemble`."""

    graph: Graph
    inputs: list[int]
    order: list[int]
    kernels: dict[int, KernelSource]
    materialised: set[int]
    dims: list[str]
    # kernels a search option replaced (heads): assembled as chosen, no epilogue fused
    searched: set[int] = field(default_factory=set)

    @property
    def kernel_nodes(self) -> dict[int, list[int]]:
        """Each kernel's head (the node it writes) -> the graph nodes it computes."""
        return {head: kernel.nodes for head, kernel in self.kernels.items()}


def lower_kernels(
    graph: Graph, renderer: CRenderer = RENDERER, blas: bool = True, compile_early: bool = False
) -> Lowering:
    """The static (mode="fast") kernel for every materialised node, rendered by
    `renderer`; `blas=False` lowers every contraction to loops (a backend without sgemm).
    Attention is fused first (`compiler/attention.py`), so its scores never get a buffer,
    and Winograd convolutions (`compiler/winograd.py`), so their tiles stay in cache;
    padded max pools then read their input unpadded (`compiler/max_pool.py`).
    `compile_early`: gcc starts on each kernel as it is rendered (`toolchain.compile_early`),
    except a kernel that reads a BLAS product: `assemble` may fuse it into the product's
    call (`sgemm_epilogue.py`), so it is left to the build."""
    fuse_attention(graph)
    if blas:  # lm_winograd multiplies in the BLAS build's register tile (gemm_tile.c)
        fuse_winograd(graph, winograd_weight_limit())
    fuse_max_pools(graph)
    plan = plan_fusion(graph)
    materialised = set(plan.materialised) | set(plan.inputs)
    dims = dims_of(graph)
    kernels: dict[int, KernelSource] = {}
    for head, absorbed in plan.row_groups.items():
        try:
            kernel = row_kernel(graph, graph.nodes[head], absorbed, materialised, dims)
        except NotRowLocal:
            continue
        kernels[head] = kernel_source(kernel, renderer)
        if compile_early:
            _compile_early(graph, kernels[head], blas)
        materialised -= set(absorbed)
    order = [n for n in plan.materialised if n in materialised]
    for node_id in order:
        node = graph.nodes[node_id]
        if node_id in kernels or isinstance(node.op, ops.Function):
            continue
        constant = constant_contract_kernel(graph, node, materialised, dims)
        if constant is not None:
            kernels[node_id] = kernel_source(constant, renderer)
            continue
        if blas and isinstance(node.op, ops.Contract) and is_blas_contract(node):
            sgemm = blas_contract_kernel(graph, node, materialised, dims)
            if sgemm is not None:
                kernels[node_id] = sgemm
                continue
        kernels[node_id] = kernel_source(_kernel(graph, node, materialised, dims), renderer)
        if compile_early:
            _compile_early(graph, kernels[node_id], blas)
    return Lowering(graph, list(plan.inputs), order, kernels, materialised, dims)


def _compile_early(graph: Graph, kernel: KernelSource, blas: bool) -> None:
    """Start gcc on `kernel` now unless it reads a BLAS product (a possible epilogue:
    compiled early, MiniLM's 24 bias adds and GELUs were thrown away)."""
    if blas and any(_blas_product(graph.nodes[b]) for b in kernel.buffers[1:]):
        return
    toolchain.compile_early(kernel.name, PRELUDE + kernel.source)


def _blas_product(node: object) -> bool:
    return isinstance(node.op, ops.Contract) and is_blas_contract(node)


def _kernel(graph: Graph, node: object, materialised: set[int], dims: list[str]) -> ir.Kernel:
    """The IR of a materialised node's kernel (not a row group, not a BLAS call)."""
    op = node.op
    if isinstance(op, ops.Contract | ops.SumReduce | ops.MaxReduce):
        return reduce_kernel(graph, node, materialised, dims, columns=True)
    if isinstance(op, ops.FusedAttention):
        return attention_kernel(graph, node, materialised, dims)
    if isinstance(op, ops.WinogradConv):
        return winograd_kernel(graph, node, materialised, dims)
    if isinstance(op, ops.Gather):
        return gather_kernel(graph, node, materialised, dims)
    if isinstance(op, CustomKernel):
        return custom_kernel(graph, node, dims)
    if isinstance(op, ops.Scatter):
        return scatter_kernel(graph, node, materialised, dims)
    return elementwise_kernel(graph, node, materialised, dims)


def assemble(lowering: Lowering) -> CompiledGraph:
    """Segments of kernels split at Python functions; the CompiledGraph (not yet built).
    The BLAS products left in `lowering` first absorb their bias / residual / ReLU reader
    (`sgemm_epilogue.py`), in a copy: measured search keeps choosing per product, and a
    kernel it replaced stays as it chose it."""
    kernels, materialised = dict(lowering.kernels), set(lowering.materialised)
    fuse_epilogues(lowering.graph, lowering.order, kernels, materialised, lowering.searched)
    lowering = replace(lowering, kernels=kernels, materialised=materialised)
    graph = lowering.graph
    segments: list[Segment] = [Segment()]
    steps: list[tuple[int, list[int]]] = []
    order = [n for n in lowering.order if n in lowering.materialised]
    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Function):
            segments.append(Segment(function_node=node_id))
            segments.append(Segment())
            steps.append((node_id, [e.source for e in node.inputs]))
            continue
        kernel = lowering.kernels[node_id]
        segments[-1].kernels.append(kernel)
        steps.append((node_id, list(kernel.buffers[1:])))
    segments = [s for s in segments if s.kernels or s.function_node is not None]
    for index, segment in enumerate(segments):
        if segment.function_node is None:
            segment.runner = f"lm_run_segment_{index}"
    buffer_nodes = list(lowering.inputs) + order
    return CompiledGraph(graph, segments, buffer_nodes, list(lowering.inputs), lowering.dims, steps)


def lower(graph: Graph) -> CompiledGraph:
    """Kernels for every materialised node, grouped into segments at Python functions."""
    return assemble(lower_kernels(graph, compile_early=True))

"""`lm.CPUCompiler(mode="fast")`: generic passes, e-graph lowering (contractions to
BLAS), fusion, C code generation, one library per graph, and a check against the
reference runtime before the compiled graph is trusted."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from luminal import ops
from luminal.backends.cpu import ops as cpu_ops
from luminal.backends.cpu.blas import blas_contract_kernel
from luminal.backends.cpu.codegen import NotRowLocal
from luminal.backends.cpu.kernels import (
    custom_kernel_source,
    elementwise_kernel,
    gather_kernel,
    reduce_kernel,
    row_kernel,
    scatter_kernel,
)
from luminal.backends.cpu.runtime import CompiledGraph, Segment
from luminal.backends.cpu.schedule import row_groups, schedule
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.passes import GenericCompiler
from luminal.custom import CustomKernel
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.reference.views import read_view
from luminal.shape.tracker import ShapeTracker

MODES = ("fast",)


class CPUCompiler:
    """Compile a graph to C kernels for this CPU. `verify` runs the compiled graph and
    the reference runtime on the same inputs (the current ones, or seeded random data
    for inputs without any) and raises CompileError if they differ."""

    def __init__(
        self, mode: Any = "fast", verify: bool = True, rtol: float = 1e-3, atol: float = 1e-4
    ) -> None:
        if mode not in MODES:
            raise CompileError(
                f"CPUCompiler: mode {mode!r} is not available yet; expected one of {MODES}"
            )
        self.mode = mode
        self.verify = verify
        self.rtol = rtol
        self.atol = atol

    def compile(self, graph: Graph) -> CompiledGraph:
        reference = copy.deepcopy(graph) if self.verify else None
        graph.compiled = None
        graph.compile(GenericCompiler())
        graph.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
        graph.compile(GenericCompiler())
        compiled = lower(graph)
        compiled.build()
        graph.compiled = compiled
        if reference is not None:
            verify_against_reference(graph, reference, self.rtol, self.atol)
        return compiled


def _dims_of(graph: Graph) -> list[str]:
    names: set[str] = set()
    for node in graph.nodes.values():
        for d in node.shape:
            names |= d.variables()
        for edge in node.inputs:
            view = edge.view
            for e in (*view.shape, *view.strides, view.offset):
                names |= e.variables()
            if view.mask is not None:
                for lo, hi in view.mask:
                    names |= lo.variables() | hi.variables()
        if isinstance(node.op, ops.Constant) and hasattr(node.op.value, "variables"):
            names |= node.op.value.variables()
        if isinstance(node.op, ops.Iota):
            names |= node.op.expr.variables() - {"z"}
    return sorted(names)


def lower(graph: Graph) -> CompiledGraph:
    """Kernels for every materialised node, grouped into segments at Python functions."""
    plan = schedule(graph)
    materialised = set(plan.materialised) | set(plan.inputs)
    dims = _dims_of(graph)
    row_kernels = {}
    for head, absorbed in row_groups(graph, plan).items():
        try:
            row_kernels[head] = row_kernel(graph, graph.nodes[head], absorbed, materialised, dims)
        except NotRowLocal:
            continue
        materialised -= set(absorbed)
    plan.materialised = [n for n in plan.materialised if n in materialised]
    segments: list[Segment] = [Segment()]
    steps: list[tuple[int, list[int]]] = []
    for node_id in plan.materialised:
        node = graph.nodes[node_id]
        op = node.op
        if node_id in row_kernels:
            kernel = row_kernels[node_id]
            segments[-1].kernels.append(kernel)
            steps.append((node_id, list(kernel.buffers[1:])))
            continue
        if isinstance(op, ops.Function):
            segments.append(Segment(function_node=node_id))
            segments.append(Segment())
            steps.append((node_id, [e.source for e in node.inputs]))
            continue
        if isinstance(op, cpu_ops.Contract):
            kernel = blas_contract_kernel(graph, node, materialised, dims) or reduce_kernel(
                graph, node, materialised, dims
            )
        elif isinstance(op, ops.SumReduce | ops.MaxReduce):
            kernel = reduce_kernel(graph, node, materialised, dims)
        elif isinstance(op, ops.Gather):
            kernel = gather_kernel(graph, node, materialised, dims)
        elif isinstance(op, CustomKernel):
            kernel = custom_kernel_source(graph, node, dims)
        elif isinstance(op, ops.Scatter):
            kernel = scatter_kernel(graph, node, materialised, dims)
        else:
            kernel = elementwise_kernel(graph, node, materialised, dims)
        segments[-1].kernels.append(kernel)
        steps.append((node_id, [n for n in kernel.buffers[1:]]))
    segments = [s for s in segments if s.kernels or s.function_node is not None]
    for index, segment in enumerate(segments):
        if segment.function_node is None:
            segment.runner = f"lm_run_segment_{index}"
    buffer_nodes = list(plan.inputs) + list(plan.materialised)
    return CompiledGraph(graph, segments, buffer_nodes, list(plan.inputs), dims, steps)


def verify_against_reference(graph: Graph, reference: Graph, rtol: float, atol: float) -> None:
    """Run both on the same inputs; restore the user's state afterwards."""
    from luminal.reference.executor import execute as reference_execute

    saved = dict(graph.input_data)
    rng = np.random.default_rng(0)
    for node_id, node in reference.nodes.items():
        if isinstance(node.op, ops.Input) and node_id not in reference.input_data:
            shape = tuple(
                d.evaluate({**{n: 3 for n in _dims_of(reference)}, **reference.dims})
                for d in node.shape
            )
            if node.dtype.is_float:
                data = rng.uniform(-1, 1, shape).astype(node.dtype.numpy)
            else:
                data = np.zeros(shape, dtype=node.dtype.numpy)
            reference.input_data[node_id] = data
            graph.input_data[node_id] = data
    for name in _dims_of(reference):
        reference.dims.setdefault(name, 3)
        graph.dims.setdefault(name, reference.dims[name])
    try:
        reference_execute(reference)
        graph.compiled.execute(graph)
        for node_id in reference.output_roots():
            if node_id not in reference.buffers:
                continue
            expected = reference.buffers[node_id].astype(np.float64)
            view = ShapeTracker.contiguous(reference.nodes[node_id].shape)
            resolved = graph.resolve(node_id, view)
            if resolved is None or resolved[0] not in graph.buffers:
                continue
            buffer = graph.buffers[resolved[0]]
            actual = read_view(buffer, resolved[1], graph.dims).astype(np.float64)
            if expected.shape != actual.shape or not np.allclose(
                actual, expected, rtol=rtol, atol=atol, equal_nan=True
            ):
                graph.compiled = None
                raise CompileError(
                    f"CPUCompiler: compiled output of node {node_id} differs from the reference "
                    f"runtime (max abs diff {np.nanmax(np.abs(actual - expected)):.3g})"
                )
    finally:
        graph.input_data.clear()
        graph.input_data.update(saved)
        graph.buffers = {}

"""Runs a graph node by node with the numpy kernels, freeing intermediates early.

Everything that depends only on the graph's structure, its outputs and the resolved
dimension sizes (the order, the concrete views, when each buffer dies, which products
are contractions) is planned once and cached, so repeated execute() calls do little
beyond the numpy work.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal import ops
from luminal.errors import (
    ExecutionError,
    LuminalError,
    OutOfMemoryError,
    ShapeError,
    format_shape,
)
from luminal.reference.contraction import contract
from luminal.reference.kernels import KERNELS, Kernel, KernelContext, compute_dtype
from luminal.reference.views import read_concrete
from luminal.shape.tracker import ConcreteView


@dataclass
class Operand:
    source: int
    view: ConcreteView
    dtype: np.dtype


@dataclass
class Step:
    """One node to run: its kernel, operands, and the buffers that die after it."""

    node: Any
    kernel: Kernel | None
    ctx: KernelContext
    operands: list[Operand]
    contraction_axis: int | None
    frees: list[int]


@dataclass
class Plan:
    key: tuple
    inputs: list[int]
    steps: list[Step]
    keep: set[int]


def resolve_dims(graph: Any, inputs: list[int]) -> dict[str, int]:
    """The dimension map, checked against every input's data (messages are built only
    when something is wrong: this runs on every execute)."""
    dims = dict(graph.dims)
    for node_id in inputs:
        node = graph.nodes[node_id]
        data = graph.input_data.get(node_id)
        if data is None:
            raise ExecutionError(
                f"execute: input '{node.op.label}' of shape {format_shape(node.shape)} has "
                "no data; call .set(array) on it first"
            )
        try:
            expected = tuple(d.evaluate(dims) for d in node.shape)
        except ShapeError as error:
            raise ShapeError(
                f"execute: input '{node.op.label}' of shape {format_shape(node.shape)}: {error}"
            ) from None
        if expected != data.shape:
            raise ShapeError(
                f"execute: input '{node.op.label}' has shape {format_shape(node.shape)} = "
                f"{expected} with dims {dims}, but its data has shape {data.shape}"
            )
    if graph.dim_checks:
        check_nonzero(graph.dim_checks, dims)
    return dims


def check_nonzero(checks: list, dims: dict[str, int]) -> None:
    """ShapeError for a recorded size (`Graph.require_nonzero`) that is 0 with these dims;
    a size whose dims are not bound belongs to nodes this run does not need."""
    for _, size, what in checks:
        try:
            value = size.evaluate(dims)
        except ShapeError:
            continue
        if value == 0:
            bound = {name: dims[name] for name in sorted(size.variables()) if name in dims}
            raise ShapeError(f"execute: {what}, but {size} = 0 with {bound}")


def fused_contractions(graph: Any, order: list[int], keep: set[int]) -> set[int]:
    """Mul nodes read only by one SumReduce through an identity view: evaluated inside
    that reduction as a contraction, never materialised."""
    readers: dict[int, list[tuple[int, Any]]] = {}
    for node_id in order:
        for edge in graph.nodes[node_id].inputs:
            readers.setdefault(edge.source, []).append((node_id, edge.view))
    fused = set()
    for node_id in order:
        node = graph.nodes[node_id]
        if not isinstance(node.op, ops.Mul) or node_id in keep:
            continue
        users = readers.get(node_id, [])
        if len(users) == 1:
            user_id, view = users[0]
            if isinstance(graph.nodes[user_id].op, ops.SumReduce) and view.is_identity():
                fused.add(node_id)
    return fused


def make_plan(graph: Any, key: tuple, order: list[int], inputs: list[int], dims: dict) -> Plan:
    keep = set(graph.retrieved) | set(graph.kept)
    fused = fused_contractions(graph, order, keep)
    steps: list[Step] = []
    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Input) or node_id in fused:
            continue
        ctx = KernelContext(node, dims, [graph.nodes[e.source].dtype for e in node.inputs])
        try:
            ctx.shape  # noqa: B018 - resolve symbolic dims now, to name the op on failure
        except ShapeError as error:
            raise ShapeError(
                f"{node.op.name} (node {node_id}) of shape {format_shape(node.shape)}: {error}"
            ) from None
        edges = node.inputs
        axis = None
        if isinstance(node.op, ops.SumReduce) and edges[0].source in fused:
            edges = graph.nodes[edges[0].source].inputs
            axis = node.op.axis
        operands = [
            Operand(
                e.source,
                e.view.evaluate(dims),
                compute_dtype(graph.nodes[e.source].dtype),
            )
            for e in edges
        ]
        steps.append(Step(node, KERNELS[type(node.op)], ctx, operands, axis, []))
    # free each buffer after its last reader
    last_reader: dict[int, int] = {}
    for index, step in enumerate(steps):
        for operand in step.operands:
            last_reader[operand.source] = index
    for source, index in last_reader.items():
        if source not in keep:
            steps[index].frees.append(source)
    return Plan(key, inputs, steps, keep)


def get_plan(graph: Any) -> tuple[Plan, dict[str, int]]:
    structure = (
        graph.nodes.version,
        frozenset(graph.retrieved),
        frozenset(graph.kept),
        graph.schedule,
    )
    cached: Plan | None = getattr(graph, "_reference_plan", None)
    if cached is not None and cached.key[0] == structure:
        dims = resolve_dims(graph, cached.inputs)
        if cached.key[1] == tuple(sorted(dims.items())):
            return cached, dims
    order = graph.execution_order(graph.output_roots())
    inputs = [i for i in order if isinstance(graph.nodes[i].op, ops.Input)]
    dims = resolve_dims(graph, inputs)
    plan = make_plan(graph, (structure, tuple(sorted(dims.items()))), order, inputs, dims)
    graph._reference_plan = plan
    return plan, dims


def execute(graph: Any, debug: bool = False) -> None:
    """Evaluate every node the outputs need; keep only retrieved/kept values."""
    plan, dims = get_plan(graph)
    values: dict[int, np.ndarray] = {i: graph.input_data[i] for i in plan.inputs}
    for step in plan.steps:
        start = time.perf_counter()
        node = step.node
        try:
            arrays = [
                read_concrete(values[o.source], o.view).astype(o.dtype, copy=False)
                for o in step.operands
            ]
            if step.contraction_axis is not None:
                result = contract(arrays[0], arrays[1], step.contraction_axis)
            else:
                result = step.kernel(node.op, arrays, step.ctx)
            result = np.asarray(result, dtype=node.dtype.numpy, order="C")
        except MemoryError as error:
            if isinstance(error, LuminalError):
                raise
            raise _out_of_memory(step, dims, error) from error
        if result.shape != step.ctx.shape:
            raise ExecutionError(
                f"{node.op.name} (node {node.id}) produced shape {result.shape}, "
                f"expected {step.ctx.shape}"
            )
        values[node.id] = result
        for source in step.frees:
            values.pop(source, None)
        if debug:
            _report(graph, step, result, time.perf_counter() - start)
    graph.buffers = {node_id: values[node_id] for node_id in plan.keep if node_id in values}


def _out_of_memory(step: Step, dims: dict[str, int], error: MemoryError) -> OutOfMemoryError:
    """numpy's bare MemoryError, with the node, its shape, dtype and output bytes and the
    dims, as the compiled runtime reports it (an enormous dim is the usual cause)."""
    node = step.node
    nbytes = math.prod(step.ctx.shape) * node.dtype.itemsize
    return OutOfMemoryError(
        f"{node.op.name} (node {node.id}, shape {format_shape(step.ctx.shape)}, "
        f"{node.dtype.name}): its output needs {nbytes} bytes and numpy could not allocate "
        f"memory ({error}); check the dims ({dims})"
    )


def _report(graph: Any, step: Step, result: np.ndarray, seconds: float) -> None:
    node = step.node
    inputs = ", ".join(
        f"{graph.nodes[o.source].op.name}#{o.source}{o.view.shape}" for o in step.operands
    )
    print(
        f"[{node.id:>4}] {node.op.name:<12} ({inputs}) -> {result.shape} "
        f"{node.dtype.value} {seconds * 1e3:8.3f} ms"
    )

"""Runs a graph node by node with the numpy kernels, freeing intermediates early."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from luminal import ops
from luminal.errors import ExecutionError, ShapeError, format_shape
from luminal.reference.contraction import contract
from luminal.reference.kernels import KERNELS, KernelContext, compute_dtype
from luminal.reference.views import read_view


def output_roots(graph: Any) -> list[int]:
    """Nodes whose values the user asked for, plus side-effect ops (print, diff)."""
    roots = set(graph.retrieved) | set(graph.kept)
    roots |= {
        node.id
        for node in graph.nodes.values()
        if isinstance(node.op, ops.Function) and node.op.side_effect
    }
    return sorted(r for r in roots if r in graph.nodes)


def resolve_dims(graph: Any, order: list[int]) -> dict[str, int]:
    """The dimension map, checked against every input's data."""
    dims = dict(graph.dims)
    for node_id in order:
        node = graph.nodes[node_id]
        if not isinstance(node.op, ops.Input):
            continue
        data = graph.input_data.get(node_id)
        shape_text = format_shape(node.shape)
        if data is None:
            raise ExecutionError(
                f"execute: input '{node.op.label}' of shape {shape_text} has no data; "
                "call .set(array) on it first"
            )
        try:
            expected = tuple(d.evaluate(dims) for d in node.shape)
        except ShapeError as error:
            raise ShapeError(f"execute: input '{node.op.label}' of shape {shape_text}: {error}") from None
        if expected != data.shape:
            raise ShapeError(
                f"execute: input '{node.op.label}' has shape {shape_text} = {expected} with "
                f"dims {dims}, but its data has shape {data.shape}"
            )
    return dims


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


def execute(graph: Any, debug: bool = False) -> None:
    """Evaluate every node the outputs need; keep only retrieved/kept values."""
    roots = output_roots(graph)
    order = graph.topological_order(roots)
    dims = resolve_dims(graph, order)
    keep = set(graph.retrieved) | set(graph.kept)
    fused = fused_contractions(graph, order, keep)
    remaining: dict[int, int] = {}
    for node_id in order:
        for edge in graph.nodes[node_id].inputs:
            remaining[edge.source] = remaining.get(edge.source, 0) + 1
    values: dict[int, np.ndarray] = {}

    def operand(edge: Any) -> np.ndarray:
        source = graph.nodes[edge.source]
        array = read_view(values[edge.source], edge.view, dims)
        return array.astype(compute_dtype(source.dtype), copy=False)

    def release(node: Any) -> None:
        for edge in node.inputs:
            remaining[edge.source] -= 1
            if remaining[edge.source] == 0 and edge.source not in keep:
                values.pop(edge.source, None)

    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Input):
            values[node_id] = graph.input_data[node_id]
            continue
        if node_id in fused:
            continue
        start = time.perf_counter()
        ctx = KernelContext(node, dims)
        try:
            ctx.shape  # noqa: B018 - resolve symbolic dims before running, to name the op
        except ShapeError as error:
            raise ShapeError(
                f"{node.op.name} (node {node_id}) of shape {format_shape(node.shape)}: {error}"
            ) from None
        source = node.inputs[0].source if node.inputs else None
        if isinstance(node.op, ops.SumReduce) and source in fused:
            mul = graph.nodes[source]
            a, b = (operand(edge) for edge in mul.inputs)
            result = contract(a, b, node.op.axis)
            release(mul)
        else:
            result = KERNELS[type(node.op)](node.op, [operand(e) for e in node.inputs], ctx)
        result = np.asarray(result, dtype=node.dtype.numpy, order="C")
        expected = ctx.shape
        if result.shape != expected:
            raise ExecutionError(
                f"{node.op.name} (node {node_id}) produced shape {result.shape}, "
                f"expected {expected}"
            )
        values[node_id] = result
        release(node)
        if debug:
            _report(graph, node, result, time.perf_counter() - start, dims)
    graph.buffers = {node_id: values[node_id] for node_id in keep if node_id in values}


def _report(graph: Any, node: Any, result: np.ndarray, seconds: float, dims: dict) -> None:
    inputs = ", ".join(
        f"{graph.nodes[e.source].op.name}#{e.source}{tuple(d.evaluate(dims) for d in e.view.shape)}"
        for e in node.inputs
    )
    print(
        f"[{node.id:>4}] {node.op.name:<12} ({inputs}) -> {result.shape} "
        f"{node.dtype.value} {seconds * 1e3:8.3f} ms"
    )

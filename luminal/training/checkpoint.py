"""Gradient checkpointing: `lm.training.checkpoint(fn, *inputs)`, as torch.utils.checkpoint.

`checkpoint` runs `fn` once (the forward) and records the nodes it built as a segment of
the graph. When `Autograd` differentiates, the rules of the segment's nodes read a second
copy of the segment, built for the backward pass from the segment's inputs, instead of
the forward's intermediate buffers; those then die as soon as the forward is past them,
and only the segment inputs stay alive until the backward reaches them. The copy reads
each explicit input through a `GraphBreak`, so no compiler pass merges it back into the
forward (CSE and the e-graph merge only nodes with equal inputs; nothing rewrites a
GraphBreak away). See docs/training.md ("Gradient checkpointing").
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from luminal import ops
from luminal.errors import GraphError, LuminalError
from luminal.graph import Edge
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal.tensor import GraphTensor


@dataclass
class Segment:
    """Nodes built by one `checkpoint` call. `nodes` (topological order) are the ones the
    outputs need; `inputs` are the explicit inputs' node ids; `outputs` the results'."""

    nodes: list[int]
    inputs: frozenset[int]
    outputs: frozenset[int]
    interior: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        # what the backward recomputes: everything but the outputs, which the forward
        # keeps alive anyway (the next segment or the loss reads them)
        self.interior = frozenset(self.nodes) - self.outputs


_SEGMENTS: weakref.WeakKeyDictionary[Graph, list[Segment]] = weakref.WeakKeyDictionary()


def checkpoint(fn: Callable[..., Any], *inputs: Any, **kwargs: Any) -> Any:
    """`fn(*inputs, **kwargs)`, marked so that its backward recomputes its intermediates
    instead of keeping them from the forward (torch.utils.checkpoint.checkpoint).

    `fn` returns a GraphTensor or a tuple/list of them. Tensors it reads without taking
    them as inputs (module parameters, captured activations) are kept from the forward,
    and so is anything in `fn` computed from those alone.
    Checkpoint before differentiating: `Autograd` reads the segments when it runs."""
    kwargs.pop("use_reentrant", None)  # torch's flag: one implementation here
    tensors = [t for t in (*inputs, *kwargs.values()) if _is_tensor(t)]
    if not tensors:
        raise LuminalError("checkpoint: needs at least one GraphTensor input")
    graph = tensors[0].graph
    if any(t.graph is not graph for t in tensors):
        raise GraphError("checkpoint: inputs belong to different graphs")
    mark = graph._next_id
    result = fn(*inputs, **kwargs)
    outputs = [result] if _is_tensor(result) else result
    if not isinstance(outputs, tuple | list) or not outputs or not all(map(_is_tensor, outputs)):
        raise LuminalError(
            f"checkpoint: {getattr(fn, '__name__', fn)!r} must return a GraphTensor or a "
            f"tuple/list of them, got {type(result).__name__}"
        )
    output_ids = [t.node_id for t in outputs]
    nodes = _built_since(graph, mark, output_ids)
    if nodes:
        segment = Segment(nodes, frozenset(t.node_id for t in tensors), frozenset(output_ids))
        _SEGMENTS.setdefault(graph, []).append(segment)
    return result


def checkpoint_sequential(
    functions: Sequence[Callable[[GraphTensor], GraphTensor]], segments: int, x: GraphTensor
) -> GraphTensor:
    """torch.utils.checkpoint.checkpoint_sequential: run `functions` (modules or callables
    of one tensor) in order, split as torch splits them: `segments - 1` checkpointed chunks
    of `len(functions) // segments`, then the rest, not checkpointed (its backward comes
    first, so keeping it costs nothing)."""
    functions = list(functions)
    if not 1 <= segments <= max(len(functions), 1):
        raise LuminalError(
            f"checkpoint_sequential: segments must be in [1, {len(functions)}] for "
            f"{len(functions)} functions, got {segments}"
        )
    size = len(functions) // segments
    if size == 0:  # no functions
        return x

    def run(chunk: list[Callable[[GraphTensor], GraphTensor]]) -> Callable[..., GraphTensor]:
        def forward(value: GraphTensor) -> GraphTensor:
            for function in chunk:
                value = function(value)
            return value

        return forward

    for start in range(0, size * (segments - 1), size):
        x = checkpoint(run(functions[start : start + size]), x)
    return run(functions[size * (segments - 1) :])(x)


def segments_of(graph: Graph) -> list[Segment]:
    """The checkpointed segments recorded for `graph` (in the order they were built)."""
    return list(_SEGMENTS.get(graph, ()))


def _is_tensor(value: Any) -> bool:
    from luminal.tensor import GraphTensor

    return isinstance(value, GraphTensor)


def _built_since(graph: Graph, mark: int, roots: Sequence[int]) -> list[int]:
    """Nodes with id >= `mark` (built by fn) that `roots` need, producers first; the walk
    stops at older nodes. Inputs and side-effect functions are never recomputed."""
    order: list[int] = []
    seen: set[int] = set()
    for root in roots:
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            node_id, expanded = stack.pop()
            if expanded:
                order.append(node_id)
                continue
            if node_id in seen or node_id < mark:
                continue
            seen.add(node_id)
            node = graph.nodes[node_id]
            if isinstance(node.op, ops.Input) or (
                isinstance(node.op, ops.Function) and node.op.side_effect
            ):
                continue
            stack.append((node_id, True))
            stack.extend((edge.source, False) for edge in reversed(node.inputs))
    return order


class Recomputation:
    """The second copies of a graph's segments, built on first use during one Autograd
    pass. `reader(node_id)` gives the function a VJP rule of that node reads its inputs
    and output through: interior nodes of its own segment map to their copies."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.owner: dict[int, Segment] = {}
        for segment in segments_of(graph):  # an enclosing segment, built later, wins
            if all(node_id in graph.nodes for node_id in segment.nodes):
                self.owner.update(dict.fromkeys(segment.nodes, segment))
        self.copies: dict[int, dict[int, int]] = {}  # id(segment) -> node -> copy

    def reader(self, node_id: int) -> Callable[[int], int] | None:
        segment = self.owner.get(node_id)
        if segment is None:
            return None

        def read(source: int) -> int:
            if source not in segment.interior:
                return source
            return self._copies(segment)[source]

        return read

    def _copies(self, segment: Segment) -> dict[int, int]:
        copies = self.copies.get(id(segment))
        if copies is None:
            copies = self.copies[id(segment)] = self._build(segment)
        return copies

    def _build(self, segment: Segment) -> dict[int, int]:
        """Copy the segment's nodes reading the same sources, except that the explicit
        inputs are read through a GraphBreak each. Nodes that do not depend on them
        (weight transposes, masks from captured tensors) copy to equal nodes, which CSE
        merges with the forward's: those are kept, not recomputed."""
        graph = self.graph
        copies: dict[int, int] = {}
        markers: dict[int, int] = {}

        def marker(source: int) -> int:
            if source not in markers:
                node = graph.nodes[source]
                edge = Edge(source, 0, ShapeTracker.contiguous(node.shape))
                markers[source] = graph.insert(ops.GraphBreak(), [edge], node.shape, node.dtype)
            return markers[source]

        for node_id in segment.nodes:
            node = graph.nodes[node_id]
            edges = []
            for edge in node.inputs:
                source = copies.get(edge.source)
                if source is None:
                    source = marker(edge.source) if edge.source in segment.inputs else edge.source
                edges.append(Edge(source, edge.output, edge.view))
            copies[node_id] = graph.insert(node.op, edges, node.shape, node.dtype)
        return copies


__all__ = ["Recomputation", "Segment", "checkpoint", "checkpoint_sequential", "segments_of"]

"""Replacing a matched pattern of lowered nodes by one fused node: the bookkeeping the
attention and Winograd passes share (`compiler/attention.py`, `compiler/winograd.py`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from luminal import ops
from luminal.graph import Edge, Graph, Node
from luminal.shape.tracker import contiguous_strides


def live_nodes(graph: Graph) -> Iterator[Node]:
    """The nodes the outputs need, producers first, skipping those a replacement made
    while walking has removed (a pass may fuse a pattern ending at any node it visits)."""
    for node_id in graph.topological_order(graph.output_roots()):
        node = graph.nodes.get(node_id)
        if node is not None:
            yield node


def private(graph: Graph, readers: dict[int, set[int]], replaced: Sequence[int]) -> bool:
    """Every replaced node but the last (the pattern's output) is read only inside the
    pattern, and none is an output of the graph: removing them loses nothing."""
    inside = set(replaced)
    outputs = set(graph.output_roots())
    for node_id in replaced[:-1]:
        if node_id in outputs or not readers.get(node_id, set()) <= inside:
            return False
    return True


def replace_pattern(
    graph: Graph,
    op: ops.Op,
    edges: Sequence[Edge],
    replaced: Sequence[int],
    readers: dict[int, set[int]],
) -> int:
    """Insert a node `op` reading `edges` in place of the pattern `replaced` (its output
    last, whose shape and dtype the node takes), remove the rest, and keep `readers`
    (`graph.readers()`) current; returns the new node."""
    output = graph.nodes[replaced[-1]]
    new = graph.insert(op, edges, output.shape, output.dtype)
    graph.replace(output.id, new, readers=readers)
    for edge in edges:
        readers.setdefault(edge.source, set()).add(new)
    for node_id in reversed(replaced[:-1]):  # readers first
        for edge in graph.nodes[node_id].inputs:
            readers.get(edge.source, set()).discard(node_id)
        graph.remove(node_id)
        readers.pop(node_id, None)
    return new


def relu_edge(node: Node) -> Edge | None:
    """The edge of x when `node` computes relu(x) as `hl/binary.maximum` builds it (a max
    over the pair (x, 0): x's contiguous buffer with one zero padded on a new last axis),
    else None."""
    if not isinstance(node.op, ops.MaxReduce) or len(node.inputs) != 1:
        return None
    (edge,) = node.inputs
    view, shape = edge.view, tuple(node.shape)
    if node.op.axis != len(shape) or len(view.shape) != len(shape) + 1 or view.mask is None:
        return None
    if view.shape[-1].as_int() != 2 or view.strides[-1].as_int() != 0 or view.offset != 0:
        return None
    if tuple(view.strides[:-1]) != tuple(contiguous_strides(shape)):
        return None
    *outer, (lo, hi) = view.mask
    if (lo.as_int(), hi.as_int()) != (0, 1):
        return None
    if any(a.as_int() != 0 or b != d for (a, b), d in zip(outer, shape, strict=True)):
        return None
    return edge

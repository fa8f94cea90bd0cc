"""Splitting a graph into regions at GraphBreak nodes.

A node's region is the number of GraphBreaks on the longest path above it, so each
transformer layer ending in `graph_break()` is one region. Inputs are never part of a
region (they are boundaries); constants and iotas are copied into every region that
reads them, so rules see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.graph import Graph

INLINED_SOURCES = (ops.Constant, ops.Iota)


@dataclass
class Region:
    nodes: list[int]
    outputs: list[int]


def split_regions(graph: Graph, roots: Sequence[int]) -> list[Region]:
    """Regions in dependency order; each lists its nodes topologically and its outputs
    (nodes read outside the region, or roots)."""
    order = graph.topological_order(roots)
    level: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    root_set = set(roots)
    for node_id in order:
        node = graph.nodes[node_id]
        if isinstance(node.op, ops.Input):
            continue
        if isinstance(node.op, INLINED_SOURCES) and node_id not in root_set:
            continue
        depth = 0
        for edge in node.inputs:
            if edge.source in level:
                source = graph.nodes[edge.source]
                depth = max(depth, level[edge.source] + isinstance(source.op, ops.GraphBreak))
        level[node_id] = depth
        members.setdefault(depth, []).append(node_id)
    regions = []
    for depth in sorted(members):
        nodes = members[depth]
        inside = set(nodes)
        outputs = [n for n in nodes if n in root_set]
        read_outside = {
            edge.source
            for node_id in order
            if level.get(node_id, -1) != depth
            for edge in graph.nodes[node_id].inputs
            if edge.source in inside
        }
        outputs += [n for n in nodes if n in read_outside and n not in root_set]
        regions.append(Region(nodes, outputs))
    return regions

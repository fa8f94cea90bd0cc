"""Reading a graph's outputs after a run, by the node ids the user's graph gave them
(compilation replaces nodes; `Graph.resolve` follows the replacements)."""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.graph import Graph
from luminal.reference.views import read_view


def read_outputs(graph: Graph, roots: list[tuple[int, Any]]) -> dict[int, np.ndarray]:
    """{original node id: array} for every root the run produced."""
    found: dict[int, np.ndarray] = {}
    for node_id, view in roots:
        resolved = graph.resolve(node_id, view)
        if resolved is None:
            continue
        source, source_view = resolved
        buffer = graph.buffers.get(source)
        if buffer is None:
            buffer = graph.input_data.get(source)
        if buffer is None:
            continue
        found[node_id] = np.array(read_view(buffer, source_view, graph.dims))
    return found

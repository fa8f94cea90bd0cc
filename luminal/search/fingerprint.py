"""A structural hash of a graph: the same model built twice (any node ids, any weights)
hashes the same; any change to an op, a dtype, a shape or a view changes it."""

from __future__ import annotations

import dataclasses
import hashlib

from luminal import ops
from luminal.graph import Graph


def _op_text(op: ops.Op) -> str:
    if isinstance(op, ops.Function):
        # the label names what it computes; the callable's address would differ per process
        return f"Function({op.label!r}, side_effect={op.side_effect})"
    if dataclasses.is_dataclass(op):
        fields = ", ".join(f"{f.name}={getattr(op, f.name)!r}" for f in dataclasses.fields(op))
        return f"{type(op).__name__}({fields})"
    return type(op).__name__


def _view_text(view) -> str:  # noqa: ANN001 - a ShapeTracker
    parts = [
        ",".join(str(d) for d in view.shape),
        ",".join(str(s) for s in view.strides),
        str(view.offset),
        "" if view.mask is None else ";".join(f"{lo}:{hi}" for lo, hi in view.mask),
    ]
    return "|".join(parts)


def graph_fingerprint(graph: Graph) -> str:
    """sha256 over the nodes the outputs need, in execution order, with node ids replaced
    by positions; retrieved/kept outputs are part of the structure."""
    roots = graph.output_roots()
    order = graph.execution_order(roots)
    position = {node_id: index for index, node_id in enumerate(order)}
    digest = hashlib.sha256()
    for node_id in order:
        node = graph.nodes[node_id]
        edges = ";".join(
            f"{position[e.source]}.{getattr(e, 'output', 0)}@{_view_text(e.view)}"
            for e in node.inputs
        )
        shape = ",".join(str(d) for d in node.shape)
        digest.update(f"{_op_text(node.op)}:{node.dtype.name}:[{shape}]<-{edges}\n".encode())
    outputs = sorted(position[r] for r in roots if r in position)
    digest.update(f"outputs {outputs}".encode())
    return digest.hexdigest()

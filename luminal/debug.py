"""Looking at a graph: Graphviz text of its nodes and views, rendered when `dot` exists.

`Graph.to_dot()` and `Graph.display()` call these. Rendering is optional: without the
Graphviz `dot` program the .dot file is still written, with a hint on how to view it.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from typing import Any

from luminal import ops
from luminal.dtype import DType

RETRIEVED_STYLE = 'style="filled,bold", fillcolor="#ffd27f", penwidth=2'
KEPT_STYLE = 'style=filled, fillcolor="#cfe8ff"'
INPUT_STYLE = 'shape=box, style=filled, fillcolor="#e8e8e8"'


def graph_to_dot(graph: Any) -> str:
    """Graphviz text: one node per graph node (op, key attributes, output shape and
    dtype), one edge per input labelled with the view's shape when it is not the
    identity. Retrieved nodes are filled orange and bold, kept ones blue."""
    lines = [
        "digraph luminal {",
        "  rankdir=TB;",
        '  node [shape=ellipse, fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for node_id in sorted(graph.nodes):
        node = graph.nodes[node_id]
        lines.append(f'  n{node_id} [label="{_escape(node_label(node))}"{_style(graph, node)}];')
    for node_id in sorted(graph.nodes):
        for edge in graph.nodes[node_id].inputs:
            attributes = ""
            if not edge.view.is_identity():
                attributes = f' [label="{_escape(view_label(edge.view))}"]'
            lines.append(f"  n{edge.source} -> n{node_id}{attributes};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def display_graph(graph: Any, path: str = "luminal_graph") -> str:
    """Write `path`.dot; render `path`.svg with Graphviz when `dot` is installed and
    return the path of what can be opened (the .svg, else the .dot)."""
    dot_path, svg_path = f"{path}.dot", f"{path}.svg"
    with open(dot_path, "w", encoding="utf-8") as handle:
        handle.write(graph_to_dot(graph))
    dot = shutil.which("dot")
    if dot is not None:
        done = subprocess.run(
            [dot, "-Tsvg", dot_path, "-o", svg_path], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return svg_path
        reason = f"dot failed: {done.stderr.strip() or done.returncode}"
    else:
        reason = "Graphviz 'dot' was not found"
    print(
        f"luminal: graph written to {dot_path} ({reason}); view it with "
        f"`dot -Tsvg {dot_path} -o {svg_path}` or paste it into an online Graphviz viewer"
    )
    return dot_path


def node_label(node: Any) -> str:
    """'#id Op(attributes)' over 'shape dtype'."""
    attributes = op_attributes(node.op)
    head = f"#{node.id} {node.op.name}"
    if attributes:
        head += f"({attributes})"
    return f"{head}\n{shape_text(node.shape)} {node.dtype.value}"


def op_attributes(op: Any) -> str:
    """The op's dataclass fields (axis, value, label, dtype, ...), callables left out."""
    if not dataclasses.is_dataclass(op):
        return ""
    parts = []
    for field in dataclasses.fields(op):
        value = getattr(op, field.name)
        if callable(value) or value is False:
            continue
        parts.append(f"{field.name}={_format_value(value)}")
    return ", ".join(parts)


def view_label(view: Any) -> str:
    """The shape read through the view, and whether it pads or broadcasts."""
    notes = []
    if view.is_padded():
        notes.append("padded")
    if any(view.is_broadcast(axis) for axis in range(view.ndim)):
        notes.append("broadcast")
    suffix = f" {', '.join(notes)}" if notes else ""
    return f"{shape_text(view.shape)}{suffix}"


def shape_text(shape: Any) -> str:
    dims = [str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _format_value(value: Any) -> str:
    if isinstance(value, DType):
        return value.value
    if isinstance(value, str):
        return repr(value)
    return str(value)  # numbers and symbolic expressions


def _style(graph: Any, node: Any) -> str:
    if node.id in graph.retrieved:
        return ", " + RETRIEVED_STYLE
    if node.id in graph.kept:
        return ", " + KEPT_STYLE
    if isinstance(node.op, ops.Input):
        return ", " + INPUT_STYLE
    return ""


def _escape(text: str) -> str:
    """Quote-safe Graphviz label text; newlines become centred line breaks."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

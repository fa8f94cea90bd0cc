"""Graph inspection: Graphviz text, display with and without `dot`, execute_debug."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np

import luminal as lm


def small_graph() -> tuple[lm.Graph, lm.GraphTensor]:
    cx = lm.Graph()
    x = cx.tensor(("batch", 3), name="x")
    w = cx.tensor((3,), name="w")
    y = (x.T.sum(0) + 1.0).retrieve()
    (x * w).max(1).keep()
    return cx, y


def test_to_dot_has_every_node_and_edge():
    cx, _ = small_graph()
    dot = cx.to_dot()
    assert dot.startswith("digraph luminal {") and dot.rstrip().endswith("}")
    for node_id, node in cx.nodes.items():
        assert re.search(rf'^  n{node_id} \[label="#{node_id} {node.op.name}', dot, re.M)
        for edge in node.inputs:
            assert re.search(rf"^  n{edge.source} -> n{node_id}\b", dot, re.M)
    n_edges = sum(len(node.inputs) for node in cx.nodes.values())
    assert dot.count(" -> ") == n_edges


def test_to_dot_labels_attributes_shapes_views_and_outputs():
    cx, y = small_graph()
    dot = cx.to_dot()
    assert "Input(label='x')\\n(batch, 3) float32" in dot
    assert "SumReduce(axis=0)\\n(batch,) float32" in dot
    assert "Constant(value=1.0)" in dot
    assert 'label="(3, batch)"' in dot  # the transposed view on the reduction's edge
    assert "broadcast" in dot  # the constant read as (batch,)
    retrieved = re.search(rf"^  n{y.node_id} \[.*$", dot, re.M).group(0)
    assert "#ffd27f" in retrieved and "bold" in retrieved
    add = cx.nodes[y.node_id]
    reduce_edge = next(e for e in add.inputs if cx.nodes[e.source].op.name == "SumReduce")
    assert f"n{reduce_edge.source} -> n{add.id};" in dot  # identity views carry no label


def test_to_dot_escapes_quotes_in_labels():
    cx = lm.Graph()
    cx.tensor((2,), name='say "hi"').print('a "quoted" message')
    dot = cx.to_dot()
    assert 'say \\"hi\\"' in dot
    assert 'a \\"quoted\\" message' in dot
    assert "fn=" not in dot  # callables are left out


def test_display_without_dot_writes_the_dot_file_and_says_how_to_view_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    cx, _ = small_graph()
    path = cx.display(str(tmp_path / "graph"))
    assert path == str(tmp_path / "graph.dot")
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == cx.to_dot()
    message = capsys.readouterr().out
    assert message.count("\n") == 1
    assert f"dot -Tsvg {path} -o {tmp_path / 'graph.svg'}" in message


def _fake_dot(tmp_path, body: str) -> str:
    script = tmp_path / "fake_dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_display_renders_svg_when_dot_exists(tmp_path, monkeypatch):
    writer = 'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && echo "<svg/>" > "$2"; shift; done\n'
    fake = _fake_dot(tmp_path, writer)
    monkeypatch.setattr(shutil, "which", lambda name: fake if name == "dot" else None)
    cx, _ = small_graph()
    path = cx.display(str(tmp_path / "graph"))
    assert path == str(tmp_path / "graph.svg")
    assert os.path.exists(tmp_path / "graph.dot")
    assert Path(path).read_text().strip() == "<svg/>"


def test_display_falls_back_to_the_dot_file_when_dot_fails(tmp_path, monkeypatch, capsys):
    fake = _fake_dot(tmp_path, "echo broken >&2; exit 3\n")
    monkeypatch.setattr(shutil, "which", lambda name: fake)
    cx, _ = small_graph()
    path = cx.display(str(tmp_path / "graph"))
    assert path == str(tmp_path / "graph.dot")
    assert "dot failed: broken" in capsys.readouterr().out


def test_execute_debug_prints_one_line_per_executed_op(capsys):
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = ((x + 1.0).exp2().sum(1)).retrieve()
    cx.execute_debug()
    lines = capsys.readouterr().out.splitlines()
    executed = [n for n in cx.topological_order([y.node_id]) if n != x.node_id]
    assert len(lines) == len(executed) == 4  # Constant, Add, Exp2, SumReduce
    for line, node_id in zip(lines, executed, strict=True):
        assert line.startswith(f"[{node_id:>4}] {cx.nodes[node_id].op.name}")
        assert line.endswith("ms")
    np.testing.assert_allclose(y.numpy(), np.exp2(np.arange(6).reshape(2, 3) + 1.0).sum(1))

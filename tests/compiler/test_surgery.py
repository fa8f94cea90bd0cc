"""Graph surgery: replacing nodes keeps readers and user handles correct."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.shape.tracker import ShapeTracker
from tests.conftest import uniform


def test_replace_rewires_readers_and_user_handles(rng):
    cx = lm.Graph()
    data = uniform(rng, (2, 3))
    x = cx.tensor((2, 3)).set(data)
    doubled = x * 2
    same = x + x
    out = (same.permute(1, 0) + 1).retrieve()
    held = same.T  # a user handle with a view of the replaced node
    assert cx.replace(same.node_id, doubled.node_id)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), (data * 2).T + 1)
    assert held.node_id == doubled.node_id
    assert held.shape == (3, 2)


def test_replace_with_a_view_composes_reader_views(rng):
    cx = lm.Graph()
    data = uniform(rng, (4, 3))
    x = cx.tensor((4, 3)).set(data)
    transposed_copy = x.T.contiguous()  # node of shape (3, 4)
    out = (transposed_copy[1:, ::2] * 1.5).retrieve()
    # the copy equals x read through a transpose view: forward readers to x directly
    view = ShapeTracker.contiguous((4, 3)).permute((1, 0))
    assert cx.replace(transposed_copy.node_id, x.node_id, view)
    assert not any(isinstance(n.op, lm.ops.Contiguous) for n in cx.nodes.values())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), data.T[1:, ::2] * 1.5)


def test_replace_refuses_view_for_outputs_and_changes_nothing():
    cx = lm.Graph()
    x = cx.tensor((4, 3))
    copy = x.T.contiguous().retrieve()
    nodes = dict(cx.nodes)
    view = ShapeTracker.contiguous((4, 3)).permute((1, 0))
    assert not cx.replace(copy.node_id, x.node_id, view)
    assert dict(cx.nodes) == nodes


def test_view_composition_replays_history():
    base = ShapeTracker.contiguous((2, 3, 4)).permute((2, 0, 1))
    top = ShapeTracker.contiguous((4, 2, 3)).slice(((1, 3, 1), (0, 2, 1), (0, 3, 2)))
    composed = base.then(top)
    data = np.arange(24).reshape(2, 3, 4)
    from luminal.reference.views import read_view

    expected = data.transpose(2, 0, 1)[1:3, 0:2, 0:3:2]
    np.testing.assert_array_equal(read_view(data, composed, {}), expected)

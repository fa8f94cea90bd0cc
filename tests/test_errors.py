"""Bad input raises a LuminalError naming the op, the shapes and what was expected, and
leaves the graph usable."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from tests.conftest import uniform


def _still_works(cx: lm.Graph, x: lm.GraphTensor, data: np.ndarray) -> None:
    before = cx.num_nodes
    out = (x * 2).retrieve()
    x.set(data)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), data * 2)
    assert cx.num_nodes == before + 2


def test_incompatible_shapes(rng):
    cx = lm.Graph()
    a, b = cx.tensor((2, 3)), cx.tensor((4, 3))
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError, match=r"add: shapes \(2, 3\) and \(4, 3\)"):
        a + b
    with pytest.raises(lm.ShapeError, match=r"matmul.*\(2, 3\) @ \(4, 3\)"):
        a @ b
    assert cx.num_nodes == nodes
    _still_works(cx, a, uniform(rng, (2, 3)))


def test_failed_composite_op_leaves_no_nodes():
    cx = lm.Graph()
    a = cx.tensor((2, 3))
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError, match="axis 5"):
        (a * 2).var(5)
    assert cx.num_nodes == nodes + 2  # the successful mul stays; the failed var adds nothing


def test_wrong_data_shape_and_dtype(rng):
    cx = lm.Graph()
    a = cx.tensor((2, 3), name="weights")
    with pytest.raises(
        lm.ShapeError, match=r"'weights' has shape \(2, 3\), got data of shape \(3, 2\)"
    ):
        a.set(np.zeros((3, 2), np.float32))
    with pytest.raises(lm.DTypeError, match="float32.*complex"):
        a.set(np.zeros((2, 3), np.complex64))
    i = cx.tensor((2,), dtype=lm.int32)
    with pytest.raises(lm.DTypeError, match="int32.*float"):
        i.set(np.zeros((2,), np.float32))
    _still_works(cx, a, uniform(rng, (2, 3)))


def test_missing_input_and_unresolved_dim(rng):
    cx = lm.Graph()
    a = cx.tensor((2,), name="a")
    (a + 1).retrieve()
    with pytest.raises(lm.ExecutionError, match="input 'a' of shape \\(2,\\) has no data"):
        cx.execute()
    cx2 = lm.Graph()
    cx2.arange("n").retrieve()
    with pytest.raises(lm.ShapeError, match="'n' has no value"):
        cx2.execute()
    cx2.set_dim("n", 3)
    cx2.execute()
    _still_works(cx, a, uniform(rng, (2,)))


def test_axis_out_of_range(rng):
    cx = lm.Graph()
    a = cx.tensor((2, 3))
    with pytest.raises(lm.ShapeError, match=r"sum: axis 2 is out of range for shape \(2, 3\)"):
        a.sum(2)
    with pytest.raises(lm.ShapeError, match="permute"):
        a.permute(0, 0)
    with pytest.raises(lm.ShapeError, match="reshape"):
        a.reshape(4, 2)
    _still_works(cx, a, uniform(rng, (2, 3)))


def test_set_on_a_computed_tensor():
    cx = lm.Graph()
    a = cx.tensor((2,))
    with pytest.raises(lm.GraphError, match="only graph inputs"):
        (a + 1).set(np.zeros(2, np.float32))


def test_symbolic_dim_mismatch_between_inputs(rng):
    cx = lm.Graph()
    a, b = cx.tensor(("n",), name="a"), cx.tensor(("n",), name="b")
    (a + b).retrieve()
    a.set(uniform(rng, (3,)))
    b.set(uniform(rng, (4,)))
    with pytest.raises(lm.ShapeError, match="input 'a'"):
        cx.execute()
    a.set(uniform(rng, (4,)))
    cx.execute()


def test_retrieve_of_removed_node():
    class RemoveEverythingButInputs:
        def compile(self, graph: lm.Graph) -> None:
            from luminal import ops

            for node_id in [i for i, n in graph.nodes.items() if not isinstance(n.op, ops.Input)]:
                del graph.nodes[node_id]
                graph.forward[node_id] = None

    cx = lm.Graph()
    a = cx.tensor((2,))
    b = a * 2
    cx.compile(RemoveEverythingButInputs())
    with pytest.raises(lm.GraphError, match="removed"):
        b.retrieve()


def test_errors_share_one_base_class():
    for error in (lm.ShapeError, lm.DTypeError, lm.GraphError, lm.CompileError, lm.ExecutionError):
        assert issubclass(error, lm.LuminalError)


def test_atomic_block_rolls_back_every_node_it_added():
    cx = lm.Graph()
    a = cx.tensor((2,))
    nodes = cx.num_nodes
    with pytest.raises(lm.ShapeError), cx.atomic():
        b = (a * 2).exp2()
        b.retrieve()
        b.reshape(3)
    assert cx.num_nodes == nodes
    assert not cx.retrieved

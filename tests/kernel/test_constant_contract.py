"""Contractions with a constant matrix (`schedule/constant_matrix.py`,
`kernel/constant_contract.py`): the straight-line kernel against numpy's dense product,
with the matrix on either side and read through views; constants refuse new data; two
graphs differing only in the constant's values never share a program; data changed
behind the graph's back falls back to the ordinary product; the inf / NaN consequence
of skipping zero coefficients."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import program_cache
from luminal.errors import GraphError
from luminal.schedule.constant_matrix import constant_contract, constant_matrix


def _matrix(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Zeros, +-1 and other values, as the Winograd transforms have."""
    choices = np.array([0, 0, 0, 1, -1, 0.5, -2.5, 1 / 3], dtype=np.float32)
    return rng.choice(choices, size=(rows, cols)).astype(np.float32)


def _kernel_names(graph: lm.Graph) -> list[str]:
    return [k.name for segment in graph.compiled.segments for k in segment.kernels]


def _left(graph: lm.Graph, c: lm.GraphTensor, x: lm.GraphTensor, cols: int) -> lm.GraphTensor:
    """c (rows, k) @ x (k, a, b) with the columns' axes kept apart."""
    rows, k = (int(d.as_int()) for d in c.view.shape)
    return (c.reshape((rows, k, 1, 1)) * x.reshape((1, k, 3, cols))).sum(1)


def test_left_product_matches_numpy(rng):
    matrix, data = _matrix(rng, 16, 36), rng.standard_normal((36, 3, 37)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c")
    y = _left(cx, c, cx.tensor((36, 3, 37)).set(data), 37).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert any("constmat" in name for name in _kernel_names(cx))
    want = np.einsum("mq,qab->mab", matrix.astype(np.float64), data)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_right_product_through_views_matches_numpy(rng):
    """x (n, k) @ c^T with c read through a permute: the matrix is the second operand and
    its rows are an output axis that is not the last."""
    matrix, data = _matrix(rng, 6, 20), rng.standard_normal((50, 20)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c")
    y = cx.tensor((50, 20)).set(data).matmul(c.permute((1, 0))).permute((1, 0)) * 1.0
    y = y.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert any("constmat" in name for name in _kernel_names(cx))
    np.testing.assert_allclose(y.numpy(), (data @ matrix.T).T, rtol=1e-5, atol=1e-5)


def test_padded_constant_matches_numpy(rng):
    """The matrix read through a padded (masked) view: its coefficients are taken element
    by element through the view's validity, the padding's as zeros."""
    matrix, data = _matrix(rng, 5, 6), rng.standard_normal((8, 3, 7)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c").pad([None, (1, 1)])
    y = _left(cx, c, cx.tensor((8, 3, 7)).set(data), 7).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert any("constmat" in name for name in _kernel_names(cx))
    padded = np.pad(matrix, ((0, 0), (1, 1))).astype(np.float64)
    np.testing.assert_allclose(
        y.numpy(), np.einsum("mq,qab->mab", padded, data), rtol=1e-5, atol=1e-5
    )


def test_constant_refuses_new_data(rng):
    cx = lm.Graph()
    c = constant_matrix(cx, _matrix(rng, 4, 4), "c")
    with pytest.raises(GraphError, match="constant matrix"):
        c.set(np.zeros((4, 4), np.float32))


def test_other_values_give_another_program_key(rng):
    """The program cache keys on the graph's structure: the digest in the label makes
    two graphs that differ only in the constant's values differ there."""
    data = rng.standard_normal((36, 3, 5)).astype(np.float32)
    keys = []
    for matrix in (_matrix(rng, 8, 36), _matrix(rng, 8, 36)):
        cx = lm.Graph()
        _left(cx, constant_matrix(cx, matrix, "c"), cx.tensor((36, 3, 5)).set(data), 5).retrieve()
        keys.append(program_cache.structure(cx))
    assert keys[0] != keys[1]


def test_data_changed_behind_the_graph_is_not_folded(rng):
    """Data replaced without set() no longer matches the label's digest: lowering takes
    the ordinary product, which reads the new values."""
    matrix, data = _matrix(rng, 8, 36), rng.standard_normal((36, 3, 5)).astype(np.float32)
    other = _matrix(rng, 8, 36)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c")
    y = _left(cx, c, cx.tensor((36, 3, 5)).set(data), 5).retrieve()
    cx.input_data[c.node_id] = other
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert not any("constmat" in name for name in _kernel_names(cx))
    want = np.einsum("mq,qab->mab", other.astype(np.float64), data)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_zero_coefficients_skip_infinities():
    """An inf in the long operand reaches only the outputs with a nonzero coefficient
    for it; the dense product would make the others NaN (0 * inf)."""
    matrix = np.array([[1, 0], [0, 2]], dtype=np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c")
    x = cx.tensor((2, 3, 4)).set(np.ones((2, 3, 4), np.float32))
    y = _left(cx, c, x, 4).retrieve()
    cx.compile(lm.CPUCompiler())
    data = np.ones((2, 3, 4), np.float32)
    data[1, 0, 0] = np.inf
    x.set(data)
    cx.execute()
    out = y.numpy()
    assert out[0, 0, 0] == 1.0 and out[1, 0, 0] == np.inf
    with np.errstate(invalid="ignore"):
        assert np.isnan(matrix.astype(np.float64) @ data[:, 0, 0]).any()


def test_carry_and_optimizers_refuse_a_constant(rng):
    """The other ways an input's data changes between runs: a carry and an optimizer's
    step would replace values the CPU kernels hold folded in."""
    cx = lm.Graph()
    c = constant_matrix(cx, _matrix(rng, 4, 4), "c")
    with pytest.raises(GraphError, match="constant matrix"):
        cx.carry(c, c * 2.0)
    with pytest.raises(GraphError, match="constant matrix"):
        lm.training.SGD([c], lr=0.1)


def test_program_cache_never_serves_folded_values_to_replaced_data(rng, tmp_path, monkeypatch):
    """A graph whose constant's data was replaced behind its back has the structure,
    labels included, of one whose program folded the old values: the cache's key tells
    them apart, so the second compiles the ordinary product and reads the new data."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(program_cache.ENVIRONMENT_VARIABLE, "1")
    matrix, other = _matrix(rng, 8, 36), _matrix(rng, 8, 36)
    data = rng.standard_normal((36, 3, 5)).astype(np.float32)
    hits, outputs = [], []
    for replaced in (False, True):
        cx = lm.Graph()
        c = constant_matrix(cx, matrix, "c")
        y = _left(cx, c, cx.tensor((36, 3, 5)).set(data), 5).retrieve()
        if replaced:
            cx.input_data[c.node_id] = other
        compiler = lm.CPUCompiler()
        cx.compile(compiler)
        cx.execute()
        hits.append(compiler.program_cache_hit)
        outputs.append(y.numpy())
    assert hits == [False, False]
    want = np.einsum("mq,qab->mab", other.astype(np.float64), data)
    np.testing.assert_allclose(outputs[1], want, rtol=1e-5, atol=1e-5)


def test_other_operand_padded_along_the_matrix_rows_is_not_folded(rng):
    """The other operand broadcast along the matrix's row axis (stride 0) and padded
    there varies along the rows (zeros in the padding), so the contraction is not one
    of a constant matrix with per-column data (the sums would read row 0's padding for
    every row)."""
    matrix, data = _matrix(rng, 6, 36), rng.standard_normal((36, 5)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c").reshape((6, 36, 1))
    x = cx.tensor((36, 5)).set(data).reshape((1, 36, 5)).expand((4, 36, 5))
    (c * x.pad([(1, 1), None, None])).sum(1).retrieve()
    cx.compile(lm.CPUCompiler(verify=False))
    contracts = [n for n in cx.nodes.values() if type(n.op) is lm.ops.Contract]
    assert len(contracts) == 1 and constant_contract(cx, contracts[0]) is None
    assert not any("constmat" in name for name in _kernel_names(cx))


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "input"])
def test_product_with_an_operand_padded_along_its_broadcast_axis_matches_numpy(rng, constant):
    """The same product's values, from a constant matrix or an ordinary input: not a BLAS
    product either (its axis classes come from strides, so sgemm read the padded rows as
    the others; a product of an ordinary input failed verification before)."""
    matrix, data = _matrix(rng, 6, 36), rng.standard_normal((36, 5)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c") if constant else cx.tensor((6, 36)).set(matrix)
    x = cx.tensor((36, 5)).set(data).reshape((1, 36, 5)).expand((4, 36, 5))
    y = (c.reshape((6, 36, 1)) * x.pad([(1, 1), None, None])).sum(1).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    want = matrix.astype(np.float64) @ data
    want[[0, 5]] = 0.0
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_pickled_graph_keeps_its_constants(rng):
    """A copy by pickle still refuses new data for the constant and folds its values."""
    import pickle

    matrix, data = _matrix(rng, 8, 36), rng.standard_normal((36, 3, 5)).astype(np.float32)
    cx = lm.Graph()
    c = constant_matrix(cx, matrix, "c")
    y = _left(cx, c, cx.tensor((36, 3, 5)).set(data), 5).retrieve()
    cx, c, y = pickle.loads(pickle.dumps((cx, c, y)))
    with pytest.raises(GraphError, match="constant matrix"):
        c.set(np.zeros((8, 36), np.float32))
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert any("constmat" in name for name in _kernel_names(cx))
    want = np.einsum("mq,qab->mab", matrix.astype(np.float64), data)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)

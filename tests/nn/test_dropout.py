"""Training-mode Dropout: the in-graph random source. Masks are 0 or 1 / (1 - p) with
torch's keep probability, independent between elements, fresh on every run, the same
for the same seed, identical in the reference runtime and compiled code; two layers draw
different masks; gradients flow through the mask; eval mode is the identity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm

SHAPE = (64, 1024)


def _dropout_graph(p: float, seed: int = 0):
    cx = lm.Graph()
    x = cx.tensor(SHAPE).set(np.ones(SHAPE, np.float32))
    layer = lm.nn.Dropout(p).train()
    y = layer(x).retrieve()
    state = lm.nn.random_state(cx)
    state.manual_seed(seed)
    return cx, x, y, state


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_probability_and_scale_match_torch(p):
    cx, _, y, _ = _dropout_graph(p)
    cx.execute()
    out = y.numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / (1 - p))}
    n = out.size
    sigma = np.sqrt(p * (1 - p) / n)
    ours = (out != 0).mean()
    assert abs(ours - (1 - p)) < 5 * sigma
    torch.manual_seed(0)
    theirs = (torch.nn.functional.dropout(torch.ones(SHAPE), p) != 0).float().mean().item()
    assert abs(ours - theirs) < 7 * sigma  # two samples of the same Bernoulli(1 - p)
    assert abs(out.mean() - 1.0) < 5 * sigma / (1 - p)  # unbiased, as torch's scaling


def test_masks_are_independent_and_fresh_every_run():
    cx, _, y, state = _dropout_graph(0.5)
    cx.execute()
    first = (y.numpy() != 0).astype(np.float64).ravel()
    cx.execute()
    second = (y.numpy() != 0).astype(np.float64).ravel()
    assert state.steps == 2
    n = first.size
    for lag in (1, 2, SHAPE[1]):  # neighbours along a row and down a column
        assert abs(np.corrcoef(first[:-lag], first[lag:])[0, 1]) < 5 / np.sqrt(n)
    assert abs(np.corrcoef(first, second)[0, 1]) < 5 / np.sqrt(n)  # a fresh mask per run


def test_same_seed_same_sequence_in_both_runtimes():
    cx, _, y, state = _dropout_graph(0.3, seed=42)
    reference = []
    for _ in range(2):
        cx.execute()
        reference.append(y.numpy())
    state.manual_seed(42)
    cx.compile(lm.CPUCompiler())
    for expected in reference:
        cx.execute()
        np.testing.assert_array_equal(y.numpy(), expected)
    state.manual_seed(43)
    cx.execute()
    assert not np.array_equal(y.numpy(), reference[0])


def test_manual_seed_fixes_a_new_graphs_masks():
    def draw() -> np.ndarray:
        lm.nn.manual_seed(7)
        cx = lm.Graph()
        x = cx.tensor((8, 8)).set(np.ones((8, 8), np.float32))
        y = lm.nn.Dropout(0.5).train()(x).retrieve()
        cx.execute()
        return y.numpy()

    np.testing.assert_array_equal(draw(), draw())


def test_two_layers_draw_different_masks_and_gradients_follow_the_mask(rng):
    cx = lm.Graph()
    data = rng.uniform(1, 2, (32, 32)).astype(np.float32)
    x = cx.tensor((32, 32)).set(data)
    model = lm.nn.Sequential(cx, lm.nn.Dropout(0.5), lm.nn.Identity()).train()
    a = model(x).retrieve()
    b = lm.nn.functional.dropout(x, 0.5).retrieve()
    grad = cx.compile(lm.training.Autograd([x], a.sum()))[0].retrieve()
    cx.execute()
    assert not np.array_equal(a.numpy() != 0, b.numpy() != 0)
    np.testing.assert_allclose(grad.numpy(), a.numpy() / data, rtol=1e-6)


def test_eval_mode_is_the_identity_and_edge_probabilities(rng):
    cx = lm.Graph()
    data = rng.standard_normal((4, 5)).astype(np.float32)
    x = cx.tensor((4, 5)).set(data)
    layer = lm.nn.Dropout(0.5)
    assert layer(x) is x  # modules start in eval mode
    assert layer.train().eval()(x) is x
    assert lm.nn.functional.dropout(x, 0.0) is x
    zeros = lm.nn.functional.dropout(x, 1.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(zeros.numpy(), np.zeros((4, 5), np.float32))
    with pytest.raises(lm.DTypeError, match="floating"):
        lm.nn.functional.dropout(cx.tensor((2,), lm.int32), 0.5)
    with pytest.raises(lm.LuminalError, match="between 0 and 1"):
        lm.nn.Dropout(1.5)

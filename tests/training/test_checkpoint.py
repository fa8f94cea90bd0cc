"""Gradient checkpointing: gradients equal those without it (and torch's), the recomputed
copy survives CSE and the e-graph, and the compiled memory plan's peak is lower."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.compiler.passes import GenericCompiler, peak_memory_bytes
from luminal.training import Autograd, checkpoint, checkpoint_sequential
from luminal.training.checkpoint import segments_of
from tests.conftest import uniform

ATOL, RTOL = 1e-4, 1e-3
DEPTH, WIDTH, BATCH, SEGMENTS = 12, 64, 1024, 4  # wide activations, small weights


def deep_mlp(segments: int | None, depth: int = DEPTH, width: int = WIDTH, batch: int = BATCH):
    """Linear+ReLU x depth, loss = mean(out^2); with `segments`, checkpoint_sequential."""
    cx = lm.Graph()
    lm.nn.manual_seed(0)
    blocks = [
        lm.nn.Sequential(cx, lm.nn.Linear(cx, width, width), lm.nn.ReLU()) for _ in range(depth)
    ]
    x = cx.tensor((batch, width), name="x").set(uniform(np.random.default_rng(0), (batch, width)))
    if segments:
        out = checkpoint_sequential(blocks, segments, x)
    else:
        out = lm.nn.Sequential(cx, *blocks)(x)
    loss = (out * out).mean().retrieve()
    params = [p for block in blocks for p in block.parameters()]
    grads = cx.compile(Autograd(params, loss))
    for grad in grads:
        grad.retrieve()
    return cx, blocks, x, loss, grads


def torch_mlp_grads(blocks, x: np.ndarray) -> list[np.ndarray]:
    params, h = [], torch.tensor(x)
    for block in blocks:
        state = block.state_dict()
        w = torch.tensor(state["0.weight"], requires_grad=True)
        b = torch.tensor(state["0.bias"], requires_grad=True)
        params += [w, b]
        h = torch.relu(h @ w.T + b)
    return [g.numpy() for g in torch.autograd.grad((h * h).mean(), params)]


def gradients(cx: lm.Graph, params: list[lm.GraphTensor], loss: lm.GraphTensor) -> list:
    """d loss / d params on the reference runtime, as arrays."""
    out = cx.compile(Autograd(params, loss))
    for g in out:
        g.retrieve()
    cx.execute()
    return [g.numpy() for g in out]


def test_deep_mlp_checkpointed_gradients_match_and_peak_is_lower() -> None:
    results = {}
    for segments in (None, SEGMENTS):
        cx, blocks, x, loss, grads = deep_mlp(segments)
        cx.execute()  # the reference runtime
        reference = [g.numpy().copy() for g in grads]
        cx.compile(lm.CPUCompiler())
        cx.execute()
        compiled = [g.numpy().copy() for g in grads]
        report = cx.memory_report()
        results[segments] = (reference, compiled, report, peak_memory_bytes(cx), cx)
    expected = torch_mlp_grads(blocks, x.numpy())
    plain, checkpointed = results[None], results[SEGMENTS]
    for ours, theirs, torch_grad in zip(checkpointed[0], plain[0], expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)  # the same ops on the same values
        np.testing.assert_allclose(ours, torch_grad, atol=ATOL, rtol=RTOL)
    for ours, theirs, torch_grad in zip(checkpointed[1], plain[1], expected, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=1e-5)
        np.testing.assert_allclose(ours, torch_grad, atol=ATOL, rtol=RTOL)
    # the compiled memory plan (arena + outputs) and the compiled graph's simulated peak
    with_peak, without_peak = checkpointed[2]["peak_bytes"], plain[2]["peak_bytes"]
    assert with_peak < 0.6 * without_peak, (with_peak, without_peak)
    assert checkpointed[3] < 0.6 * plain[3], (checkpointed[3], plain[3])
    # the recomputed matmuls survived CSE and the e-graph: 3 segments x 3 recomputed layers
    counts = [Counter(n.op.name for n in r[4].nodes.values()) for r in (plain, checkpointed)]
    assert counts[1]["Contract"] - counts[0]["Contract"] == (SEGMENTS - 1) * (DEPTH // SEGMENTS)
    assert counts[1]["GraphBreak"] == SEGMENTS - 1


def test_generic_passes_keep_the_recomputed_copy() -> None:
    cx = lm.Graph()
    x = cx.tensor((4, 5)).set(uniform(np.random.default_rng(1), (4, 5)))
    w = cx.tensor((5, 5)).set(uniform(np.random.default_rng(2), (5, 5)))
    y = checkpoint(lambda t: (t @ w).tanh().exp(), x)
    grads = cx.compile(Autograd([w, x], y.sum()))
    for grad in grads:
        grad.retrieve()
    cx.compile(GenericCompiler())
    names = Counter(n.op.name for n in cx.nodes.values())
    assert names["GraphBreak"] == 1
    cx.execute()
    tx, tw = (torch.tensor(t.numpy(), requires_grad=True) for t in (x, w))
    expected = torch.autograd.grad((tx @ tw).tanh().exp().sum(), [tw, tx])
    for ours, theirs in zip(grads, expected, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=ATOL, rtol=RTOL)


def transformer_block(x: lm.GraphTensor, w1: lm.GraphTensor, w2: lm.GraphTensor, scale):
    """A pre-norm MLP block with softmax mixing and a residual: many op kinds."""
    h = x.layer_norm(-1) * scale
    mixed = (h @ h.transpose(0, 1) * 0.25).softmax(-1) @ h
    return x + (mixed @ w1).gelu() @ w2


@pytest.mark.parametrize("nested", [False, True])
def test_gradients_bit_identical_with_and_without_checkpoint(nested: bool) -> None:
    rng = np.random.default_rng(3)
    data = [uniform(rng, s, -1, 1) for s in ((6, 8), (8, 16), (16, 8), (8,))]

    def grads(use_checkpoint: bool) -> list[np.ndarray]:
        cx = lm.Graph()
        x, w1, w2, scale = (cx.tensor(a.shape).set(a) for a in data)
        h = x
        inner = lambda t: checkpoint(transformer_block, t, w1, w2, scale)  # noqa: E731
        for _ in range(2):  # four blocks
            if not use_checkpoint:
                h = transformer_block(transformer_block(h, w1, w2, scale), w1, w2, scale)
            elif nested:  # a segment of two segments
                h = checkpoint(lambda t: inner(inner(t)), h)
            else:
                h = checkpoint(transformer_block, h, w1, w2, scale=scale)
                h = checkpoint(transformer_block, h, w1, w2, scale=scale)
        return gradients(cx, [x, w1, w2, scale], (h * h).sum())

    for ours, theirs in zip(grads(True), grads(False), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_multiple_outputs_and_captured_tensors() -> None:
    rng = np.random.default_rng(4)
    a_data, b_data = uniform(rng, (3, 4)), uniform(rng, (3, 4))

    def grads(use_checkpoint: bool) -> list[np.ndarray]:
        cx = lm.Graph()
        a, b = cx.tensor((3, 4)).set(a_data), cx.tensor((3, 4)).set(b_data)
        captured = (b * 2.0).sin()  # read by the segment without being one of its inputs

        def fn(t: lm.GraphTensor) -> tuple[lm.GraphTensor, lm.GraphTensor]:
            s = (t * captured).sigmoid()
            return s * t, (s + 1.0).log()

        p, q = checkpoint(fn, a) if use_checkpoint else fn(a)
        return gradients(cx, [a, b], (p * q).sum() + q.sum())

    for ours, theirs in zip(grads(True), grads(False), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_errors() -> None:
    cx = lm.Graph()
    x = cx.tensor((2,))
    with pytest.raises(lm.LuminalError, match="must return a GraphTensor"):
        checkpoint(lambda t: 3.0, x)
    with pytest.raises(lm.LuminalError, match="at least one GraphTensor"):
        checkpoint(lambda: x)
    with pytest.raises(lm.GraphError, match="different graphs"):
        checkpoint(lambda s, t: s, x, lm.Graph().tensor((2,)))
    with pytest.raises(lm.LuminalError, match=r"segments must be in \[1, 1\]"):
        checkpoint_sequential([lambda t: t], 0, x)


class CheckpointedMLP(lm.nn.Module):
    """Blocks run through checkpoint_sequential when `segments` is set."""

    def __init__(self, cx: lm.Graph, segments: int | None) -> None:
        super().__init__(cx)
        lm.nn.manual_seed(0)
        self.blocks = lm.nn.ModuleList(
            cx, [lm.nn.Sequential(cx, lm.nn.Linear(cx, 8, 8), lm.nn.Tanh()) for _ in range(4)]
        )
        self.head = lm.nn.Linear(cx, 8, 3)
        self.segments = segments

    def forward(self, x: lm.GraphTensor) -> lm.GraphTensor:
        blocks = list(self.blocks)
        h = checkpoint_sequential(blocks, self.segments, x) if self.segments else x
        if not self.segments:
            for block in blocks:
                h = block(h)
        return self.head(h)


@pytest.mark.parametrize("precision", [None, "fp16"])
def test_train_step_with_checkpointed_model(precision: str | None) -> None:
    """TrainStep (with and without mixed precision) differentiates through checkpoints:
    the same losses and parameters, bit for bit, as without them."""
    rng = np.random.default_rng(5)
    x, y = uniform(rng, (16, 8)), rng.integers(0, 3, 16).astype(np.int32)
    runs = []
    for segments in (None, 2):
        cx = lm.Graph()
        model = CheckpointedMLP(cx, segments)
        step = lm.training.TrainStep.build(
            model,
            lm.training.losses.cross_entropy,
            lambda params: lm.training.SGD(params, lr=0.1, momentum=0.9),
            ("batch", 8),
            mixed_precision=precision,
            compiler=None,
        )
        assert bool(segments_of(cx)) == bool(segments)
        runs.append(([step(x, y) for _ in range(3)], [p.numpy() for p in step.params]))
    (losses_a, params_a), (losses_b, params_b) = runs
    assert losses_a == losses_b
    for a, b in zip(params_a, params_b, strict=True):
        np.testing.assert_array_equal(a, b)

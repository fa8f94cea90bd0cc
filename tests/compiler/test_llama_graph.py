"""The Llama-shaped benchmark graph (bench/llama_graph.py) on the reference runtime:
one graph runs at several sequence lengths, matches a PyTorch implementation of the
same model (Hugging Face conventions), and is causal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias

import luminal as lm
from bench.llama_graph import RMS_EPS, ROPE_THETA, build_llama_graph, weight_inputs
from luminal import ops

LAYERS, HIDDEN, HEADS, VOCAB = 2, 32, 4, 50


def _torch_llama(weights: dict[str, np.ndarray], ids: np.ndarray, kv_heads: int) -> np.ndarray:
    w = {name: torch.from_numpy(array) for name, array in weights.items()}
    seq, head_dim = len(ids), HIDDEN // HEADS

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return torch.cat([-second, first], dim=-1)

    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    x = w["embed"][torch.from_numpy(ids).long()]
    for layer in range(LAYERS):
        p = f"layers.{layer}."
        h = rms(x, w[p + "attention_norm"])
        q = (h @ w[p + "wq"]).view(seq, HEADS, head_dim).transpose(0, 1)
        k = (h @ w[p + "wk"]).view(seq, kv_heads, head_dim).transpose(0, 1)
        v = (h @ w[p + "wv"]).view(seq, kv_heads, head_dim).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // kv_heads, dim=0)
        v = v.repeat_interleave(HEADS // kv_heads, dim=0)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + context.transpose(0, 1).reshape(seq, HIDDEN) @ w[p + "wo"]
        h = rms(x, w[p + "mlp_norm"])
        x = x + (F.silu(h @ w[p + "w1"]) * (h @ w[p + "w3"])) @ w[p + "w2"]
    return (rms(x, w["norm"]) @ w["lm_head"]).numpy()


def _small_llama(kv_heads: int = HEADS) -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    ids, logits = build_llama_graph(
        cx, layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=kv_heads, vocab=VOCAB
    )
    return cx, ids, logits


@pytest.mark.parametrize("kv_heads", [HEADS, 2])
def test_llama_graph_runs_at_two_lengths_and_matches_torch(kv_heads):
    cx, ids, logits = _small_llama(kv_heads)
    weights = {name: t.numpy() for name, t in weight_inputs(cx).items()}
    rng = np.random.default_rng(0)
    for seq in (5, 7):
        tokens = rng.integers(0, VOCAB, size=seq, dtype=np.int32)
        ids.set(tokens)
        cx.execute()
        out = logits.numpy()
        assert out.shape == (seq, VOCAB)
        assert out.dtype == np.float32
        assert np.isfinite(out).all()
        np.testing.assert_allclose(
            out, _torch_llama(weights, tokens, kv_heads), atol=1e-5, rtol=1e-3
        )


def test_llama_graph_is_causal():
    cx, ids, logits = _small_llama()
    tokens = np.random.default_rng(1).integers(0, VOCAB, size=6, dtype=np.int32)
    ids.set(tokens)
    cx.execute()
    before = logits.numpy()
    tokens[-1] = (tokens[-1] + 1) % VOCAB
    ids.set(tokens)
    cx.execute()
    after = logits.numpy()
    np.testing.assert_allclose(after[:-1], before[:-1], atol=1e-6, rtol=0)
    assert not np.allclose(after[-1], before[-1])


@pytest.mark.parametrize("graph_breaks", [True, False])
def test_llama_graph_breaks_between_layers(graph_breaks):
    cx = lm.Graph()
    build_llama_graph(
        cx, layers=3, hidden=16, heads=2, kv_heads=2, vocab=10, graph_breaks=graph_breaks
    )
    breaks = sum(isinstance(node.op, ops.GraphBreak) for node in cx.nodes.values())
    assert breaks == (2 if graph_breaks else 0)

"""A small MLP and a causal softmax attention block, on the reference runtime.

    python -m luminal.examples.mlp_attention [--seed N]

Each graph is built lazily, executed with the reference runtime (numpy), and checked
against the same computation written directly in numpy: the smallest end-to-end tour of
the graph API (inputs, a symbolic batch dimension, retrieve, execute).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

import luminal as lm


def mlp(rng: np.random.Generator) -> float:
    """Softmax(relu(x @ w1) @ w2) for two batch sizes of one graph; returns the largest
    difference from numpy."""
    cx = lm.Graph()
    x = cx.tensor(("batch", 4), name="x")
    w1 = cx.tensor((4, 8), name="w1").set(rng.standard_normal((4, 8)).astype(np.float32))
    w2 = cx.tensor((8, 3), name="w2").set(rng.standard_normal((8, 3)).astype(np.float32))
    probs = ((x @ w1).relu() @ w2).softmax(-1).retrieve()
    print(f"MLP graph: {cx.num_nodes} nodes, output shape {probs.shape}")
    worst = 0.0
    for batch in (2, 5):  # one graph, two sizes of its symbolic batch dim
        data = rng.standard_normal((batch, 4)).astype(np.float32)
        x.set(data)
        cx.execute()
        logits = np.maximum(data @ w1.numpy(), 0) @ w2.numpy()
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        error = float(np.abs(probs.numpy() - expected).max())
        worst = max(worst, error)
        print(f"  batch {batch}: probabilities\n{np.array2string(probs.numpy(), precision=4)}")
        print(f"  max |luminal - numpy| = {error:.2e}")
    return worst


def attention(rng: np.random.Generator) -> float:
    """Causal single-head attention over 6 tokens; returns the largest difference from
    numpy."""
    seq, dim = 6, 8
    cx = lm.Graph()
    q = cx.tensor((seq, dim), name="q").set(rng.standard_normal((seq, dim)).astype(np.float32))
    k = cx.tensor((seq, dim), name="k").set(rng.standard_normal((seq, dim)).astype(np.float32))
    v = cx.tensor((seq, dim), name="v").set(rng.standard_normal((seq, dim)).astype(np.float32))
    scores = (q @ k.T) * (1.0 / np.sqrt(dim))
    causal = cx.constant(1.0).expand((seq, seq)).triu(1) * -1e9
    weights = (scores + causal).softmax(-1).retrieve()
    out = (weights @ v).retrieve()
    cx.execute()
    s = q.numpy() @ k.numpy().T / np.sqrt(dim) + np.triu(np.full((seq, seq), -1e9), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    error = float(np.abs(out.numpy() - p @ v.numpy()).max())
    print(f"Causal attention ({seq} tokens, dim {dim}): {cx.num_nodes} nodes")
    print(f"  attention weights\n{np.array2string(weights.numpy(), precision=3)}")
    print(f"  max |luminal - numpy| = {error:.2e}")
    return error


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m luminal.examples.mlp_attention",
        description="Build and run an MLP and a causal attention block on the reference "
        "runtime, checked against numpy.",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed for weights and inputs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rng = np.random.default_rng(args.seed)
    mlp(rng)
    attention(rng)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

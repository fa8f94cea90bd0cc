"""luminal demo: build, run and print a small MLP and a softmax attention block.

    python -m luminal.examples.demo [--seed N]

Each graph is built lazily, executed with the reference runtime, and checked against
the same computation written directly in numpy.
"""

from __future__ import annotations

import argparse

import numpy as np

import luminal as lm


def mlp(rng: np.random.Generator) -> None:
    cx = lm.Graph()
    x = cx.tensor(("batch", 4), name="x")
    w1 = cx.tensor((4, 8), name="w1").set(rng.standard_normal((4, 8)).astype(np.float32))
    w2 = cx.tensor((8, 3), name="w2").set(rng.standard_normal((8, 3)).astype(np.float32))
    probs = ((x @ w1).relu() @ w2).softmax(-1).retrieve()
    print(f"MLP graph: {cx.num_nodes} nodes, output shape {probs.shape}")
    for batch in (2, 5):  # one graph, two sizes of its symbolic batch dim
        data = rng.standard_normal((batch, 4)).astype(np.float32)
        x.set(data)
        cx.execute()
        logits = np.maximum(data @ w1.numpy(), 0) @ w2.numpy()
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        error = float(np.abs(probs.numpy() - expected).max())
        print(f"  batch {batch}: probabilities\n{np.array2string(probs.numpy(), precision=4)}")
        print(f"  max |luminal - numpy| = {error:.2e}")


def attention(rng: np.random.Generator) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description="Build and run an MLP and an attention block.")
    parser.add_argument("--seed", type=int, default=0, help="random seed for weights and inputs")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    mlp(rng)
    attention(rng)


if __name__ == "__main__":
    main()

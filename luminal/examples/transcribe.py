"""Transcribe a WAV file with a Whisper checkpoint folder, greedy and without timestamps.

    python -m luminal.examples.transcribe audio.wav --model whisper-tiny/
        [--language en] [--task transcribe|translate] [--max-new-tokens N] [--no-compile]

The folder is a Hugging Face Whisper folder: `config.json`, `*.safetensors`, and
`generation_config.json` (the language and task tokens, the suppressed tokens) and
`tokenizer.json` when present. The WAV file (integer PCM, any rate, mono or not) is read
with the standard library, mixed to mono and resampled to 16 kHz with numpy; the first
30 s (the model's `2 * max_source_positions` frames) become the log-mel input. Encoder
and decoder graphs are compiled with lm.CPUCompiler() (the first run includes
compilation); the decoder keeps a KV cache and the cross-attention keys/values are
computed once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.models.decoder import load_tokenizer
from luminal.models.whisper import Whisper


def transcribe(
    audio_path: str | Path,
    folder: str | Path,
    language: str | None = None,
    task: str | None = None,
    max_new_tokens: int | None = None,
    compile: bool = True,
) -> tuple[np.ndarray, str | None]:
    """(generated token ids, their text or None without a tokenizer), printing progress."""
    samples, rate = lm.audio.read_wav(audio_path)
    seconds = len(samples) / rate if rate else 0.0
    print(f"Audio: {audio_path}, {seconds:.2f} s at {rate} Hz, resampled to 16 kHz")
    waveform = lm.audio.resample(samples, rate, lm.audio.SAMPLE_RATE)
    model = Whisper.from_pretrained(folder)
    c = model.config
    n_samples = c.num_frames * lm.audio.HOP_LENGTH  # 30 s for Whisper's 1500 positions
    if len(waveform) > n_samples:
        print(f"  only the first {n_samples / lm.audio.SAMPLE_RATE:g} s are transcribed")
    print(
        f"Model: {folder} (Whisper d_model {c.d_model}, {c.encoder_layers} encoder + "
        f"{c.decoder_layers} decoder layers, vocab {c.vocab_size})"
    )
    log_mel = lm.audio.log_mel_spectrogram(waveform, c.num_mel_bins, n_samples=n_samples)
    start = time.perf_counter()
    tokens = model.transcribe_tokens(log_mel, language, task, max_new_tokens, compile=compile)
    elapsed = time.perf_counter() - start
    what = "compile + encode + decode" if compile else "encode + decode (reference runtime)"
    print(f"Tokens ({len(tokens)}, {what}: {elapsed:.2f} s): {tokens.tolist()}")
    tokenizer = load_tokenizer(folder)
    text = (
        None if tokenizer is None else tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
    )
    print(f"Text: {text}" if text is not None else "Text: (no tokenizer.json in the folder)")
    return tokens, text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m luminal.examples.transcribe",
        description="Transcribe a WAV file with a Hugging Face Whisper folder (greedy, "
        "no timestamps, first 30 s).",
    )
    p.add_argument("audio", help="a PCM WAV file (8/16/24/32-bit, any rate and channels)")
    p.add_argument("--model", required=True, help="Whisper folder: config.json, *.safetensors")
    p.add_argument("--language", help="e.g. en or de (default: detected, multilingual models)")
    p.add_argument("--task", choices=("transcribe", "translate"), help="default: transcribe")
    p.add_argument("--max-new-tokens", type=int, help="default: up to max_target_positions")
    p.add_argument("--no-compile", action="store_true", help="run on the reference runtime")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    transcribe(
        args.audio,
        args.model,
        args.language,
        args.task,
        args.max_new_tokens,
        compile=not args.no_compile,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Attention prefill: luminal's fused attention against the unfused graph and PyTorch.

    .venv/bin/python bench/attention.py [--threads N] [--rounds N] [--lengths 512,2048]

One causal self-attention of 8 heads of 64 (batch 1) over S tokens: softmax(q kᵀ / 8 +
causal mask) v, built with `lm.nn.functional`-style `scaled_dot_product_attention`.
Contestants, timed in interleaved rounds (medians):

- fused: `lm.CPUCompiler()` as users get it (the attention pass makes one FusedAttention
  kernel: online softmax, causal key blocks skipped, no S x S buffer);
- unfused: the same graph compiled with the attention pass switched off (two sgemms and a
  row softmax over a stored S x S score buffer per head);
- torch: `torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`.

Also printed: each compiled graph's planned arena (`cx.memory_report()`).
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from common import equal_threads
from rows import Row
from timing import Rounds, Timer

import luminal as lm
from luminal.nn.attention import scaled_dot_product_attention

BENCH = "attention"
HEADS, DEPTH = 8, 64


def compiled_attention(arrays: list[np.ndarray], fused: bool) -> lm.Graph:
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a) for a in arrays)
    scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
    if fused:
        cx.compile(lm.CPUCompiler())
        return cx
    # the pass switched off, and the program cache too (it would hand back the fused
    # program of this very structure)
    with (
        mock.patch("luminal.backends.cpu.lowering.fuse_attention", lambda graph: 0),
        mock.patch.dict(os.environ, {"LUMINAL_PROGRAM_CACHE": "0"}),
    ):
        cx.compile(lm.CPUCompiler())
    return cx


def bench_length(timer: Timer, length: int) -> list[Row]:
    rng = np.random.default_rng(length)
    arrays = [rng.standard_normal((1, HEADS, length, DEPTH)).astype(np.float32) for _ in range(3)]
    fused, unfused = compiled_attention(arrays, True), compiled_attention(arrays, False)
    tensors = [torch.from_numpy(a) for a in arrays]
    times = timer.times(
        {
            "fused": fused.execute,
            "unfused": unfused.execute,
            "torch": lambda: F.scaled_dot_product_attention(*tensors, is_causal=True),
        }
    )
    arenas = {
        name: g.memory_report()["arena_bytes"]
        for name, g in (("fused", fused), ("unfused", unfused))
    }
    mib = {name: f"{size / 2**20:.1f} MiB" for name, size in arenas.items()}
    note = f"arena fused {mib['fused']}, unfused {mib['unfused']}"
    print(
        f"prefill S={length:<5} fused {times['fused'] * 1e3:8.2f} ms   unfused "
        f"{times['unfused'] * 1e3:8.2f} ms   torch SDPA {times['torch'] * 1e3:8.2f} ms   "
        f"fused/unfused {times['fused'] / times['unfused']:5.2f}x   fused/torch "
        f"{times['fused'] / times['torch']:5.2f}x   {note}"
    )
    case = f"attention prefill {HEADS}x{DEPTH} S={length}"
    return [
        Row(BENCH, f"{case} fused", times["fused"], "torch SDPA", times["torch"], note),
        Row(BENCH, f"{case} unfused", times["unfused"], "torch SDPA", times["torch"], note),
    ]


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: S = 512 and 2048 (512 only when quick)."""
    lengths = (512,) if quick else (512, 2048)
    return [row for length in lengths for row in bench_length(timer, length)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lengths", default="512,2048")
    args = parser.parse_args()
    equal_threads(args.threads)
    for length in (int(n) for n in args.lengths.split(",")):
        bench_length(Rounds(args.rounds), length)


if __name__ == "__main__":
    main()

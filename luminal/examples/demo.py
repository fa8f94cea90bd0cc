"""The luminal demo: a graph tour, real sentence embeddings, and streamed Llama decoding.

    python -m luminal.examples.demo [--seed N] [--no-compile] [--no-check] [--train-epochs N]
    bash scripts/demo.sh            # sets up .venv first when needed

Runs, in order, each with a header line:
  1. `mlp_attention`: an MLP and causal attention on the reference runtime, vs numpy;
  2. `sentence_similarity`: all-MiniLM-L6-v2 (real weights) compiled for the CPU, cosine
     similarity of six sentences and sentences per second;
  3. `llama_generate`: a small seeded-random Llama, greedy tokens streamed as they come
     and tokens per second;
  4. `train_digits`: a LeNet-style CNN trained on scikit-learn's 8x8 digits (forward,
     backward and Adam in one compiled graph), test accuracy and samples per second.
Each part is runnable alone: python -m luminal.examples.<name> --help. The first run
compiles C kernels into the cache (`LUMINAL_CACHE_DIR`, default ~/.cache/luminal); later
runs find them there.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from luminal.backends.cpu import toolchain
from luminal.examples import llama_generate, mlp_attention, sentence_similarity, train_digits

RULE_WIDTH = 78


def section(index: int, total: int, title: str) -> None:
    """One header line per part of the demo."""
    text = f"== [{index}/{total}] {title} "
    print(f"\n{text}{'=' * max(RULE_WIDTH - len(text), 3)}", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m luminal.examples.demo",
        description="luminal demo: MLP + attention on the reference runtime, sentence "
        "similarity with all-MiniLM-L6-v2, streamed generation from a small Llama, and "
        "training a CNN on the 8x8 digits.",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and inputs")
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="run the models on the reference runtime (numpy) instead of compiled C kernels",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip comparing compiled results with the reference runtime",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=32, help="tokens for the Llama part (default 32)"
    )
    p.add_argument(
        "--train-epochs",
        type=int,
        default=30,
        help="epochs for the digits training part (default 30, about 6 s compiled)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    shared = [
        *(["--no-compile"] if args.no_compile else []),
        *(["--no-check"] if args.no_check else []),
    ]
    parts: list[tuple[str, Callable[[Sequence[str]], int], list[str]]] = [
        (
            "Graph tour: MLP and causal attention, reference runtime vs numpy",
            mlp_attention.main,
            ["--seed", str(args.seed)],
        ),
        (
            "Sentence similarity: all-MiniLM-L6-v2, real weights",
            sentence_similarity.main,
            shared,
        ),
        (
            "Greedy generation: small Llama, seeded random weights",
            llama_generate.main,
            ["--seed", str(args.seed), "--max-new-tokens", str(args.max_new_tokens), *shared],
        ),
        (
            "Training: LeNet-style CNN on the 8x8 digits, compiled training step",
            train_digits.main,
            [
                "--seed",
                str(args.seed),
                "--epochs",
                str(args.train_epochs),
                "--eval-every",
                str(max(1, args.train_epochs // 3)),
                *(["--no-compile"] if args.no_compile else []),
            ],
        ),
    ]
    start = time.perf_counter()
    for index, (title, run_part, part_args) in enumerate(parts, 1):
        section(index, len(parts), title)
        run_part(part_args)
    stats = toolchain.stats()
    print(
        f"\nDone in {time.perf_counter() - start:.1f} s. C kernels: "
        f"{stats.objects_compiled} compiled, {stats.objects_cached} objects and "
        f"{stats.libraries_cached} libraries found in the cache ({toolchain.cache_dir()})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

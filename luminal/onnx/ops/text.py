"""TfIdfVectorizer over integer tokens. The n-gram pool is an attribute, so every
(gram size, skip) pair is a fixed set of shifted slices of the input: each pool
n-gram's count is the number of start positions where all its tokens match (a product
of equalities, summed), and one matrix product routes the counts to their output
columns. Unigrams count at skip 0 only, as in ONNX's reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from luminal.dtype import float32, int32
from luminal.onnx.context import NodeContext
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _pool(ctx: NodeContext) -> dict[int, list[tuple[int, list[int]]]]:
    """gram size -> [(output column, tokens)] for the sizes in [min, max]."""
    if ctx.attr("pool_strings") is not None:
        raise ctx.unsupported("pool_strings (string tokens)")
    pool = [int(v) for v in ctx.attr("pool_int64s", [])]
    starts = list(ctx.attr("ngram_counts", [0]))
    columns = list(ctx.attr("ngram_indexes"))
    low, high = ctx.attr("min_gram_length", 1), ctx.attr("max_gram_length", 1)
    grams: dict[int, list[tuple[int, list[int]]]] = {}
    gram_id = 0
    for size, start in enumerate(starts, 1):
        end = starts[size] if size < len(starts) else len(pool)
        for first in range(start, end - size + 1, size):
            if low <= size <= high:
                grams.setdefault(size, []).append((columns[gram_id], pool[first : first + size]))
            gram_id += 1
    return grams


def _counts(
    ctx: NodeContext, x: GraphTensor, size: int, skip: int, tokens: np.ndarray
) -> GraphTensor:
    """(rows, grams): how often each gram (tokens: (grams, size)) occurs in each row
    with its tokens `skip` apart."""
    length = int(x.view.shape[-1].as_int())
    starts = length - (size - 1) * skip
    if starts <= 0:
        return x.graph.constant(0.0, float32).expand((x.view.shape[0], tokens.shape[0]))
    match = None
    for j in range(size):
        column = x.slice([None, (j * skip, j * skip + starts)]).unsqueeze(-1)
        wanted = ctx.lift(tokens[:, j].astype(np.int32).reshape((1, 1, -1)), "tfidf_pool")
        hit = column.eq(wanted).cast(float32)
        match = hit if match is None else match * hit
    assert match is not None
    return match.sum(1)


def _tfidf(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0).cast(int32)
    flat = x.ndim == 1
    rows = x.unsqueeze(0) if flat else x
    mode = ctx.attr("mode")
    grams = _pool(ctx)
    width = max(ctx.attr("ngram_indexes")) + 1
    skips = ctx.attr("max_skip_count", 0) + 1
    total = ctx.graph.constant(0.0, float32).expand((rows.view.shape[0], width))
    for size, entries in grams.items():
        tokens = np.array([t for _, t in entries], np.int64)
        route = np.zeros((len(entries), width), np.float32)
        for k, (column, _) in enumerate(entries):
            route[k, column] = 1.0
        counts = None
        for skip in range(1, (skips if size > 1 else 1) + 1):
            c = _counts(ctx, rows, size, skip, tokens)
            counts = c if counts is None else counts + c
        assert counts is not None
        total = total + counts.matmul(ctx.lift(route, f"{ctx.node.output[0]}_route{size}"))
    scale = _column_weights(ctx, width)
    if mode == "TF":
        out = total
    elif mode == "IDF":
        present = total.gt(0.0).cast(float32)
        out = present if scale is None else present * scale
    elif mode == "TFIDF":
        out = total if scale is None else total * scale
    else:
        raise ctx.unsupported(f"mode={mode!r}")
    return out.reshape((width,)) if flat else out


def _column_weights(ctx: NodeContext, width: int) -> GraphTensor | None:
    """The weights by output column. ONNX (and onnxruntime) give one weight per pool
    n-gram, which lands in that n-gram's column; ONNX's reference indexes the weights
    by column instead (the same when ngram_indexes is 0, 1, 2, ...)."""
    weights = ctx.attr("weights")
    if weights is None:
        return None
    by_column = np.zeros(width, np.float32)
    for gram, column in enumerate(ctx.attr("ngram_indexes")):
        by_column[column] = weights[gram]
    return ctx.lift(by_column, f"{ctx.node.output[0]}_weights")


RULES: dict[str, Rule] = {"TfIdfVectorizer": _tfidf}

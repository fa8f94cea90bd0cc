"""Models on `lm.OpenCLCompiler()` (PoCL in CI) with transformers as the oracle: a small
BERT with padding masks and symbolic batch/seq, the real all-MiniLM-L6-v2 sentence
embeddings, and a small Llama's greedy tokens with its KV cache."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.models import SentenceEncoder, generate
from tests.conftest import assert_matches_torch
from tests.models.test_bert import (
    ATOL,
    RTOL,
    SENTENCES,
    _batch,
    _expected,
    _symbolic_model,
    minilm,  # noqa: F401 - a fixture
    small,  # noqa: F401 - a fixture
)
from tests.models.test_llama import (
    NEW_TOKENS,
    hf,  # noqa: F401 - a fixture
    hf_greedy,  # noqa: F401 - a fixture
    luminal_llama,
    prompt,  # noqa: F401 - a fixture
)


@pytest.mark.slow  # two layers' e-graph, program build and reference check
def test_small_bert_with_padding_matches_transformers(small, rng):  # noqa: F811
    cx, inputs, out = _symbolic_model(small)
    for tensor, array in zip(inputs, _batch(rng, 2, 5), strict=True):
        tensor.set(array)
    cx.compile(lm.OpenCLCompiler())
    for batch, seq in ((3, 7), (1, 3)):  # new sizes of the symbolic dims: new plans
        arrays = _batch(rng, batch, seq)
        for tensor, array in zip(inputs, arrays, strict=True):
            tensor.set(array)
        cx.execute()
        assert_matches_torch(out.numpy(), _expected(small, *arrays), ATOL, RTOL)


@pytest.mark.slow  # real weights: 22M parameters through the reference check
def test_minilm_sentence_embeddings_match_transformers(minilm):  # noqa: F811
    folder, expected = minilm
    encoder = SentenceEncoder(folder, compiler="opencl")
    ours = encoder.encode(SENTENCES, batch_size=3)  # two batches of different lengths
    cosine = (ours * expected).sum(1) / np.linalg.norm(ours, axis=1)
    cosine /= np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.9999, cosine


@pytest.mark.slow  # a 4-layer Llama's prefill and decode graphs
def test_llama_greedy_tokens_equal_transformers(hf, prompt, hf_greedy):  # noqa: F811
    session = luminal_llama(hf).session(compiler="opencl")
    tokens = generate(session, prompt[0], NEW_TOKENS)
    np.testing.assert_array_equal(tokens, hf_greedy[0][0])

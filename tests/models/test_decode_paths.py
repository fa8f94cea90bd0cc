"""What a decode step of a deep model runs: a Qwen2 with 24 layers (the depth of
Qwen2-0.5B) compiles to BLAS products on the few-rows path and fused attention, as a
2-layer model does (each layer is its own e-graph region, saturated once for all of
them), and its logits equal transformers'. A float16 KV cache keeps the greedy tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import luminal as lm
from luminal.errors import DTypeError
from luminal.models import Llama, Qwen2
from luminal.models.decoder import MIN_CACHE
from tests.models.conftest import hf_greedy_continuation, seeded_pair


def test_deep_decoder_runs_products_on_the_rows_path_and_fused_attention():
    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=24,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=60,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        initializer_range=0.1,
        attn_implementation="eager",
    )
    hf, model = seeded_pair(Qwen2ForCausalLM, Qwen2, config, seed=0)
    session = model.session(compile=True)
    prompt = np.array([[5, 9, 31, 2]], np.int32)
    logits = [session.prefill(prompt), session.step([7]), session.step([44])]
    kernels = [k for s in session.compiled.segments for k in s.kernels]
    names = [k.name for k in kernels]
    # q, k, v, o, gate, up, down per layer and the head: every one a library product
    assert sum("lm_sgemm_rows(" in k.source for k in kernels) == 7 * 24 + 1
    assert sum(n.startswith("lm_fused_attention") for n in names) == 24
    assert not any("sumreduce" in n for n in names)
    ids = torch.tensor([[5, 9, 31, 2, 7, 44]])
    with torch.no_grad():
        expected = hf(ids).logits[0, 3:].numpy()
    np.testing.assert_allclose(np.concatenate(logits), expected, atol=1e-4, rtol=1e-4)


def test_float16_kv_cache_keeps_greedy_tokens_and_halves_the_buffers():
    """kv_dtype=float16: keys and values rounded to float16 as they join the cache (the
    buffers hold half the bytes), attention still in float32; across a growth of the
    buffers the logits stay within float16 rounding of transformers' and the greedy
    tokens equal transformers' generate()."""
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=256,
        initializer_range=0.1,
        attn_implementation="eager",
    )
    hf, model = seeded_pair(LlamaForCausalLM, Llama, config, seed=1)
    prompt = np.array([[3, 17, 5, 42, 8]], np.int32)
    steps = MIN_CACHE + 6  # the buffers double once
    tokens, expected = hf_greedy_continuation(hf, prompt, steps)
    full = model.session(compile=True)
    half = model.session(compile=True, kv_dtype=lm.float16)
    logits = [half.prefill(prompt)]
    full.prefill(prompt)
    for token in tokens[0, :-1]:
        logits.append(half.step([token]))
        full.step([token])
    logits = np.concatenate(logits)
    np.testing.assert_array_equal(logits.argmax(-1), tokens[0])
    scale = np.abs(expected[0]).max(-1, keepdims=True)
    np.testing.assert_allclose(logits / scale, expected[0] / scale, atol=2e-3)
    keys = half.buffers[0][0]
    assert keys.dtype == np.float16 and keys.nbytes * 2 == full.buffers[0][0].nbytes
    exact = full.buffers[0][0][:, :, : half.past]
    np.testing.assert_array_equal(keys[:, :, : half.past], exact.astype(np.float16))


def test_kv_dtype_must_be_a_float_the_cache_can_hold():
    model = Llama(lm.Graph(), dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32, vocab_size=20))  # fmt: skip
    with pytest.raises(DTypeError, match="kv_dtype must be float32 or float16, got"):
        model.session(kv_dtype=lm.int32)

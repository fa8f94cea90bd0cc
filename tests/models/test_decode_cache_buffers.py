"""DecoderSession's KV cache in preallocated buffers: the new rows are written in place,
the buffers double when full, the run plan is reused between doublings, and the logits
stay transformers' across a growth of the buffers."""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from luminal.models import Llama
from luminal.models.decoder import MIN_CACHE
from tests.models.conftest import seeded_pair


def _models() -> tuple[LlamaForCausalLM, Llama]:
    config = LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=256,
        initializer_range=0.05,
        attn_implementation="eager",
    )
    hf, model = seeded_pair(LlamaForCausalLM, Llama, config, seed=0)
    return hf, model


def test_cache_rows_are_written_in_place_and_logits_match_across_a_growth():
    hf, model = _models()
    session = model.session(compile=True)
    prompt = np.array([[3, 17, 5, 42, 8]], np.int32)
    tokens = np.random.default_rng(0).integers(0, 50, MIN_CACHE + 4).astype(np.int32)
    logits = [session.prefill(prompt)]
    first = session.buffers[0][0]
    plans = set()
    for token in tokens:
        logits.append(session.step([token]))
        held = session.past
        assert session.buffers[0][0].shape[2] == (MIN_CACHE if held <= MIN_CACHE else 2 * MIN_CACHE)
        if held <= MIN_CACHE:
            assert session.buffers[0][0] is first  # appended in place, never replaced
        if 20 <= held <= 32:
            recent = list(session.graph.compiled.plans.values())[-1]  # this step's plan
            plans.add(id(recent))
    assert len(plans) == 1  # past 19..31: one plan (bucket 32)
    assert session.cache_in[0].key.numpy().shape == (1, 2, session.past, 8)
    ids = torch.tensor(np.concatenate([prompt[0], tokens])[None], dtype=torch.long)
    with torch.no_grad():
        expected = hf(ids).logits[0, prompt.shape[1] - 1 :].numpy()
    np.testing.assert_allclose(np.concatenate(logits), expected, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        out = hf(ids, use_cache=True)
    keys = out.past_key_values.layers[1].keys.numpy()  # layer 1's, (1, kv, positions, d)
    np.testing.assert_allclose(
        session.buffers[1][0][:, :, : session.past - 1], keys[:, :, : session.past - 1], atol=1e-4
    )

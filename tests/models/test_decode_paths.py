"""What a decode step of a deep model runs: a Qwen2 with 24 layers (the depth of
Qwen2-0.5B) compiles to BLAS products on the few-rows path and fused attention, as a
2-layer model does (each layer is its own e-graph region, saturated once for all of
them), and its logits equal transformers'."""

from __future__ import annotations

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import luminal as lm
from luminal.models import Qwen2


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
    torch.manual_seed(0)
    hf = Qwen2ForCausalLM(config).eval()
    model = Qwen2(lm.Graph(), config.to_dict())
    model.load_state_dict(hf.state_dict())
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

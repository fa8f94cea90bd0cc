"""Llama (Hugging Face `LlamaForCausalLM`): the default configuration of `CausalLM`.

`Llama(cx, config)` takes a `config.json` mapping and names its parameters exactly like
transformers' state dict (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.
weight`, ..., `model.norm.weight`, `lm_head.weight`), so `load_state_dict(hf.state_dict())`
and safetensors checkpoints load unchanged. With `tie_word_embeddings` there is no
`lm_head.weight` parameter: the head reads `model.embed_tokens.weight`. Decoding goes
through a `DecoderSession` (`LlamaSession` is its older name).
"""

from __future__ import annotations

from luminal.models.decoder import CausalLM, DecoderSession
from luminal.weights import LlamaConfig


class Llama(CausalLM):
    """transformers' `LlamaForCausalLM` (inference): RMSNorm, grouped-query attention with
    rotary embeddings ("default", "linear" and "llama3" RoPE scaling), a SwiGLU MLP."""

    config_class = LlamaConfig


LlamaSession = DecoderSession  # the name earlier releases documented

__all__ = ["Llama", "LlamaConfig", "LlamaSession"]

"""Transformer blocks built from `luminal.nn.attention`: PyTorch's encoder layer, and the
pre-norm decoder block every decoder-only model in `luminal.models` is made of.

`DecoderLayer` takes its attention, MLP and two norms as arguments and attaches them
under the checkpoint's names, so one block serves Llama, Mistral, Qwen2, Phi-3, Gemma
and GPT-2 alike; `LlamaDecoderLayer` is its Llama configuration and `GatedMLP` the
gate/up/down feed-forward most of them share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from luminal.errors import LuminalError
from luminal.graph import Graph
from luminal.nn.attention import KVCache, MultiheadAttention, RotaryEmbedding, SelfAttention
from luminal.nn.layers import Dropout, LayerNorm, Linear, RMSNorm, activation
from luminal.nn.module import Module
from luminal.tensor import GraphTensor


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer (inference, dropout ignored): self-attention and
    a feed-forward block, post-norm by default (norm_first=True for pre-norm)."""

    def __init__(
        self,
        graph: Graph,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[GraphTensor], GraphTensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(graph)
        self.self_attn = MultiheadAttention(
            graph, d_model, nhead, dropout, bias, batch_first=batch_first
        )
        self.linear1 = Linear(graph, d_model, dim_feedforward, bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(graph, dim_feedforward, d_model, bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(graph, d_model, layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(graph, d_model, layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation)

    def forward(
        self,
        src: GraphTensor,
        src_mask: GraphTensor | None = None,
        src_key_padding_mask: GraphTensor | None = None,
        is_causal: bool = False,
    ) -> GraphTensor:
        """Masks follow torch.nn.MultiheadAttention (bool True = do not attend)."""

        def attention(x: GraphTensor) -> GraphTensor:
            out, _ = self.self_attn(
                x, x, x, src_key_padding_mask, False, src_mask, is_causal=is_causal
            )
            return self.dropout1(out)

        def feed_forward(x: GraphTensor) -> GraphTensor:
            hidden = self.dropout(self.activation(self.linear1(x)))
            return self.dropout2(self.linear2(hidden))

        x = src
        if self.norm_first:
            x = x + attention(self.norm1(x))
            return x + feed_forward(self.norm2(x))
        x = self.norm1(x + attention(x))
        return self.norm2(x + feed_forward(x))


def _activation(spec: str | Callable[[GraphTensor], GraphTensor]) -> Callable:
    return activation(spec) if isinstance(spec, str) else spec


class GatedMLP(Module):
    """Gated feed-forward (SwiGLU with silu, GeGLU with gelu):
    down_proj(act(gate_proj(x)) * up_proj(x)), Hugging Face Llama's names."""

    def __init__(
        self,
        graph: Graph,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        hidden_act: str | Callable[[GraphTensor], GraphTensor] = "silu",
    ) -> None:
        super().__init__(graph)
        self.gate_proj = Linear(graph, hidden_size, intermediate_size, bias)
        self.up_proj = Linear(graph, hidden_size, intermediate_size, bias)
        self.down_proj = Linear(graph, intermediate_size, hidden_size, bias)
        self.act_fn = _activation(hidden_act)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


LLAMA_LAYER_NAMES = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")


class DecoderLayer(Module):
    """The pre-norm block of decoder-only transformers:
    h = x + attention(attention_norm(x)), then h + mlp(mlp_norm(h)). The four parts are
    passed in and attached under `names` (attention, mlp, attention norm, mlp norm; Llama's
    by default, GPT-2's are "attn", "mlp", "ln_1", "ln_2"), so one block serves every
    checkpoint layout. `attention` is a `SelfAttention`; `forward` returns
    (hidden, new KV cache)."""

    def __init__(
        self,
        graph: Graph,
        attention: SelfAttention,
        mlp: Module,
        attention_norm: Module,
        mlp_norm: Module,
        names: tuple[str, str, str, str] = LLAMA_LAYER_NAMES,
    ) -> None:
        super().__init__(graph)
        if len(set(names)) != 4:
            raise LuminalError(f"DecoderLayer: names must be four distinct names, got {names}")
        for name, part in zip(names, (attention, mlp, attention_norm, mlp_norm), strict=True):
            setattr(self, name, part)
        object.__setattr__(self, "parts", (attention, mlp, attention_norm, mlp_norm))

    def forward(
        self,
        hidden_states: GraphTensor,
        cache: KVCache | tuple[GraphTensor, GraphTensor] | None = None,
        attn_mask: GraphTensor | None = None,
        position_embeddings: tuple[GraphTensor, GraphTensor] | None = None,
    ) -> tuple[GraphTensor, KVCache]:
        attention, mlp, attention_norm, mlp_norm = self.parts
        attended, new_cache = attention(
            attention_norm(hidden_states), cache, attn_mask, position_embeddings
        )
        hidden = hidden_states + self.combine(attended)
        return hidden + self.combine(mlp(mlp_norm(hidden))), new_cache

    def combine(self, partial: GraphTensor) -> GraphTensor:
        """A sublayer's output before its residual add (a tensor-parallel layer sums the
        ranks' partial products here)."""
        return partial


class LlamaDecoderLayer(DecoderLayer):
    """`DecoderLayer` configured as Hugging Face's LlamaDecoderLayer (same parameter
    names): RMSNorm, causal grouped-query `SelfAttention` with rotary embeddings, and a
    gated MLP."""

    def __init__(
        self,
        graph: Graph,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        intermediate_size: int | None = None,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        head_dim: int | None = None,
        attention_bias: bool = False,
        mlp_bias: bool = False,
        hidden_act: str = "silu",
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        head_dim = head_dim or hidden_size // num_heads
        rotary = rotary or RotaryEmbedding(head_dim, rope_theta)
        super().__init__(
            graph,
            SelfAttention(
                graph, hidden_size, num_heads, num_kv_heads, attention_bias, True, rotary, head_dim
            ),
            GatedMLP(
                graph, hidden_size, intermediate_size or 4 * hidden_size, mlp_bias, hidden_act
            ),
            RMSNorm(graph, hidden_size, rms_norm_eps),
            RMSNorm(graph, hidden_size, rms_norm_eps),
        )

    @classmethod
    def from_config(cls, graph: Graph, config: Mapping[str, Any]) -> LlamaDecoderLayer:
        """From a Hugging Face Llama `config.json` mapping (rope_theta at the top level
        or in `rope_parameters`, as transformers 5 writes it)."""
        rope = config.get("rope_parameters") or {}
        return cls(
            graph,
            config["hidden_size"],
            config["num_attention_heads"],
            config.get("num_key_value_heads"),
            config["intermediate_size"],
            config.get("rms_norm_eps", 1e-6),
            rope.get("rope_theta", config.get("rope_theta", 10000.0)),
            config.get("head_dim"),
            config.get("attention_bias", False),
            config.get("mlp_bias", False),
            config.get("hidden_act", "silu"),
        )


__all__ = [
    "LLAMA_LAYER_NAMES",
    "DecoderLayer",
    "GatedMLP",
    "LlamaDecoderLayer",
    "TransformerEncoderLayer",
]

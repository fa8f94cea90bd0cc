"""GPT-2 (Hugging Face `GPT2LMHeadModel`): learned positions, LayerNorm with bias,
`Conv1D` projections and the `gelu_new` (tanh) GELU, the head tied to `wte`.

Parameter names are `GPT2LMHeadModel.state_dict()`'s: `transformer.wte.weight`,
`transformer.wpe.weight`, `transformer.h.{i}.ln_1.{weight,bias}`, `...attn.c_attn`
(queries, keys and values in one weight), `...attn.c_proj`, `...ln_2`, `...mlp.c_fc`,
`...mlp.c_proj`, `transformer.ln_f`. `Conv1D` weights are stored (in, out), the
transpose of `Linear`'s, and load as they are. A `GPT2Model` checkpoint (no
`transformer.` prefix, as the original gpt2 files are) loads too; the `attn.bias` /
`attn.masked_bias` mask buffers of old checkpoints are dropped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from luminal.errors import ShapeError
from luminal.graph import Graph
from luminal.models.decoder import CausalLM, CheckpointNames, hf_activation
from luminal.nn.attention import SelfAttention
from luminal.nn.layers import LayerNorm, check_features, default_generator
from luminal.nn.module import Module
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig
from luminal.weights.hf_config import _FromDict

# GPT-2's config.json names -> the decoder's (transformers' GPT2Config.attribute_map)
_RENAMED = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "activation_function": "hidden_act",
}


@dataclasses.dataclass(frozen=True)
class GPT2Config(LlamaConfig):
    """A GPT-2 `config.json` under the decoder's field names (`n_embd` is `hidden_size`,
    `n_inner` (None: 4 * n_embd) is `intermediate_size`, ...), transformers'
    GPT2Config defaults."""

    REQUIRED: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
    )

    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 1024
    layer_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = True
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    bos_token_id: int | list[int] | None = 50256
    eos_token_id: int | list[int] | None = 50256

    @classmethod
    def _normalise(cls, config: dict[str, Any]) -> dict[str, Any]:
        for old, new in _RENAMED.items():
            if old in config:
                config[new] = config.pop(old)
        inner, hidden = config.get("n_inner"), config.get("hidden_size")
        if inner is None and isinstance(hidden, int) and not isinstance(hidden, bool):
            inner = 4 * hidden
        config["intermediate_size"] = inner
        return config

    def validate(self) -> None:
        _FromDict.validate(self)  # no rotary embedding: head_dim need not be even
        if self.hidden_size % self.num_attention_heads:
            raise ShapeError(
                f"GPT2Config: n_embd={self.hidden_size} is not a multiple of "
                f"n_head={self.num_attention_heads}"
            )


class Conv1D(Module):
    """transformers' `Conv1D`: y = x @ weight + bias with weight (in, out)."""

    def __init__(self, graph: Graph, in_features: int, out_features: int) -> None:
        super().__init__(graph)
        self.in_features, self.out_features = int(in_features), int(out_features)
        shape = (self.in_features, self.out_features)
        self.param("weight", shape, lambda: _normal(shape, 0.02))
        self.param("bias", (self.out_features,), lambda: np.zeros(shape[1], np.float32))

    def forward(self, x: GraphTensor) -> GraphTensor:
        check_features(f"Conv1D({self.in_features}, {self.out_features})", x, (self.in_features,))
        return x @ self.weight + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def _normal(shape: tuple[int, int], std: float) -> np.ndarray:
    """transformers' Conv1D initial weights, from lm.nn's seeded generator."""
    return (default_generator().standard_normal(shape) * std).astype(np.float32)


class GPT2Attention(SelfAttention):
    """Causal self-attention with `c_attn` (queries, keys, values) and `c_proj`."""

    def make_projections(self, bias: bool, out_bias: bool) -> None:
        self.c_attn = Conv1D(self.graph, self.embed_dim, 3 * self.embed_dim)
        self.c_proj = Conv1D(self.graph, self.embed_dim, self.embed_dim)

    def project(self, x: GraphTensor) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        qkv, e = self.c_attn(x), self.embed_dim
        return qkv[..., :e], qkv[..., e : 2 * e], qkv[..., 2 * e :]

    def project_out(self, out: GraphTensor) -> GraphTensor:
        return self.c_proj(out)


class GPT2MLP(Module):
    """c_proj(act(c_fc(x)))."""

    def __init__(self, graph: Graph, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__(graph)
        self.c_fc = Conv1D(graph, hidden_size, intermediate_size)
        self.c_proj = Conv1D(graph, intermediate_size, hidden_size)
        self.act = hf_activation(act)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2(CausalLM):
    """transformers' `GPT2LMHeadModel` (inference)."""

    config_class = GPT2Config
    names = CheckpointNames(
        model="transformer",
        embed="wte",
        positions="wpe",
        layers="h",
        norm="ln_f",
        layer=("attn", "mlp", "ln_1", "ln_2"),
    )
    buffer_suffixes = (".attn.bias", ".attn.masked_bias", ".crossattention.bias")

    def build_rotary(self) -> None:
        return None

    def build_norm(self, graph: Graph) -> Module:
        return LayerNorm(graph, self.config.hidden_size, self.config.layer_norm_epsilon)  # type: ignore[attr-defined]

    def build_attention(self, graph: Graph, index: int) -> SelfAttention:
        c = self.config
        assert c.head_dim is not None
        scale = 1.0 / math.sqrt(c.head_dim) if c.scale_attn_weights else 1.0  # type: ignore[attr-defined]
        if c.scale_attn_by_inverse_layer_idx:  # type: ignore[attr-defined]
            scale /= index + 1
        return GPT2Attention(graph, c.hidden_size, c.num_attention_heads, causal=True, scale=scale)

    def build_mlp(self, graph: Graph) -> Module:
        c = self.config
        return GPT2MLP(graph, c.hidden_size, c.intermediate_size, c.hidden_act)

    def checkpoint_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Also a `GPT2Model` checkpoint: its names get the `transformer.` prefix."""
        prefix = f"{self.names.model}."
        if not any(str(name).startswith(prefix) for name in state):
            state = {f"{prefix}{name}": value for name, value in state.items()}
        return super().checkpoint_state(state)


__all__ = ["GPT2", "Conv1D", "GPT2Attention", "GPT2Config", "GPT2MLP"]

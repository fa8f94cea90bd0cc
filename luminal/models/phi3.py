"""Phi-3 (Hugging Face `Phi3ForCausalLM`): Llama with fused projections and LongRoPE.

Checkpoint names are Llama's except inside the layers: `self_attn.qkv_proj` (queries,
keys and values stacked in one weight, one matmul) and `mlp.gate_up_proj` (gate and up
stacked; gate first). RoPE: "default" or "longrope" (legacy "su" / "yarn" configs are
read as "longrope", as transformers does), over the first `partial_rotary_factor` of
each head; `sliding_window` as Mistral.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from luminal.errors import LuminalError
from luminal.graph import Graph
from luminal.models.decoder import CausalLM, hf_activation
from luminal.models.mistral import check_window
from luminal.nn.attention import SelfAttention
from luminal.nn.layers import Linear
from luminal.nn.module import Module
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig


@dataclasses.dataclass(frozen=True)
class Phi3Config(LlamaConfig):
    """LlamaConfig with Phi-3's fields and defaults (transformers' Phi3Config)."""

    max_position_embeddings: int = 4096
    original_max_position_embeddings: int = 4096
    partial_rotary_factor: float = 1.0
    rms_norm_eps: float = 1e-5
    sliding_window: int | None = None
    eos_token_id: int | list[int] | None = 32000
    pad_token_id: int | None = 32000

    @classmethod
    def _normalise(cls, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._normalise(config)
        rope = config.get("rope_parameters")
        if isinstance(rope, dict) and "partial_rotary_factor" in rope:
            config.setdefault("partial_rotary_factor", rope["partial_rotary_factor"])
        scaling = config.get("rope_scaling")
        if isinstance(scaling, dict):
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind in ("su", "yarn"):  # Phi-3's legacy names of LongRoPE
                config["rope_scaling"] = {**scaling, "rope_type": "longrope"}
        return config

    def validate(self) -> None:
        super().validate()
        check_window(self, self.sliding_window)
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise LuminalError(
                f"Phi3Config: partial_rotary_factor must be in (0, 1], got "
                f"{self.partial_rotary_factor}"
            )


class Phi3Attention(SelfAttention):
    """Self-attention with one `qkv_proj` (queries, then keys, then values) and `o_proj`,
    no biases."""

    def make_projections(self, bias: bool, out_bias: bool) -> None:
        width = self.q_width + 2 * self.kv_width
        self.qkv_proj = Linear(self.graph, self.embed_dim, width, bias)
        self.o_proj = Linear(self.graph, self.q_width, self.embed_dim, out_bias)

    def project(self, x: GraphTensor) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        qkv = self.qkv_proj(x)
        q_end, k_end = self.q_width, self.q_width + self.kv_width
        return qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]


class Phi3MLP(Module):
    """down_proj(up * act(gate)) with gate and up from one `gate_up_proj` (gate first)."""

    def __init__(self, graph: Graph, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__(graph)
        self.intermediate_size = intermediate_size
        self.gate_up_proj = Linear(graph, hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = Linear(graph, intermediate_size, hidden_size, bias=False)
        self.activation_fn = hf_activation(act)

    def forward(self, x: GraphTensor) -> GraphTensor:
        gate_up = self.gate_up_proj(x)
        gate, up = gate_up[..., : self.intermediate_size], gate_up[..., self.intermediate_size :]
        return self.down_proj(up * self.activation_fn(gate))


class Phi3(CausalLM):
    """transformers' `Phi3ForCausalLM` (inference)."""

    config_class = Phi3Config
    attention_class = Phi3Attention

    def layer_window(self, index: int) -> int | None:
        return self.config.sliding_window  # type: ignore[attr-defined]

    def attention_biases(self) -> dict[str, bool]:
        """No biases: transformers' Phi3 ignores the config's `attention_bias`."""
        return {"bias": False}

    def build_mlp(self, graph: Graph) -> Module:
        c = self.config
        return Phi3MLP(graph, c.hidden_size, c.intermediate_size, c.hidden_act)


__all__ = ["Phi3", "Phi3Attention", "Phi3Config", "Phi3MLP"]

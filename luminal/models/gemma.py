"""Gemma (Hugging Face `GemmaForCausalLM`): Llama with embeddings scaled by
sqrt(hidden_size), RMSNorm weights applied as `1 + weight`, a GeGLU MLP (the tanh GELU:
`hidden_activation`, or `hidden_act` where "gelu" means the tanh approximation, as
transformers reads Gemma configs) and tied embeddings by default. Parameter names are
Llama's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from luminal.graph import Graph
from luminal.models.decoder import CausalLM
from luminal.nn.layers import check_features
from luminal.nn.module import Module
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig


@dataclasses.dataclass(frozen=True)
class GemmaConfig(LlamaConfig):
    """LlamaConfig with Gemma's defaults (transformers' GemmaConfig)."""

    head_dim: int | None = 256
    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | list[int] | None = 2
    eos_token_id: int | list[int] | None = 1

    @classmethod
    def _normalise(cls, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._normalise(config)
        act = config.get("hidden_activation") or config.get("hidden_act")
        if act is not None:
            config["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
        return config


class GemmaRMSNorm(Module):
    """x * rsqrt(mean(x^2) + eps) * (1 + weight); the weight starts at zeros."""

    def __init__(self, graph: Graph, dim: int, eps: float = 1e-6) -> None:
        super().__init__(graph)
        self.dim, self.eps = int(dim), float(eps)
        self.param("weight", (self.dim,), lambda: np.zeros(self.dim, np.float32))

    def forward(self, x: GraphTensor) -> GraphTensor:
        check_features(f"GemmaRMSNorm({self.dim})", x, (self.dim,), "dims")
        return x.std_norm(-1, self.eps) * (self.weight + 1.0)

    def extra_repr(self) -> str:
        return f"({self.dim},), eps={self.eps}"


class Gemma(CausalLM):
    """transformers' `GemmaForCausalLM` (inference)."""

    config_class = GemmaConfig

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.config.hidden_size)

    def build_norm(self, graph: Graph) -> Module:
        return GemmaRMSNorm(graph, self.config.hidden_size, self.config.rms_norm_eps)


__all__ = ["Gemma", "GemmaConfig", "GemmaRMSNorm"]

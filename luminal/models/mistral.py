"""Mistral (Hugging Face `MistralForCausalLM`): Llama with sliding-window attention.

Parameter names are Llama's. With `sliding_window` set, every layer's query sees only
the last `sliding_window` positions (itself included), in the prompt and with the KV
cache alike; `sliding_window: null` is full causal attention.
"""

from __future__ import annotations

import dataclasses

from luminal.errors import ShapeError
from luminal.models.decoder import CausalLM
from luminal.weights import LlamaConfig


@dataclasses.dataclass(frozen=True)
class MistralConfig(LlamaConfig):
    """LlamaConfig plus `sliding_window` (transformers' default 4096)."""

    sliding_window: int | None = 4096

    def validate(self) -> None:
        super().validate()
        check_window(self, self.sliding_window)


def check_window(config: LlamaConfig, window: int | None) -> None:
    if window is not None and window <= 0:
        raise ShapeError(f"{type(config).__name__}: sliding_window must be positive, got {window}")


class Mistral(CausalLM):
    """transformers' `MistralForCausalLM` (inference)."""

    config_class = MistralConfig

    def layer_window(self, index: int) -> int | None:
        return self.config.sliding_window  # type: ignore[attr-defined]


__all__ = ["Mistral", "MistralConfig", "check_window"]

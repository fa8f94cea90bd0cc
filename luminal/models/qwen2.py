"""Qwen2 (Hugging Face `Qwen2ForCausalLM`): Llama with biases on q/k/v (not on o_proj)
and optional sliding-window attention on the layers `layer_types` marks (by default,
with `use_sliding_window`, layers from `max_window_layers` on). Parameter names are
Llama's, plus `q_proj.bias`, `k_proj.bias` and `v_proj.bias`.
"""

from __future__ import annotations

import dataclasses

from luminal.errors import LuminalError
from luminal.models.decoder import CausalLM
from luminal.models.mistral import check_window
from luminal.weights import LlamaConfig

LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclasses.dataclass(frozen=True)
class Qwen2Config(LlamaConfig):
    """LlamaConfig plus Qwen2's sliding-window fields (transformers' defaults)."""

    use_sliding_window: bool = False
    sliding_window: int | None = 4096
    max_window_layers: int = 28
    layer_types: list[str] | None = None

    def validate(self) -> None:
        super().validate()
        check_window(self, self.sliding_window)
        types = self.layer_types
        if types is not None and (
            len(types) != self.num_hidden_layers or any(t not in LAYER_TYPES for t in types)
        ):
            raise LuminalError(
                f"Qwen2Config: layer_types must list one of {LAYER_TYPES} per layer "
                f"({self.num_hidden_layers}), got {types!r}"
            )

    def window(self, index: int) -> int | None:
        """Layer `index`'s sliding window, as transformers' Qwen2Config decides it."""
        window = self.sliding_window if self.use_sliding_window else None
        if window is None:
            return None
        if self.layer_types is not None:
            return window if self.layer_types[index] == "sliding_attention" else None
        return window if index >= self.max_window_layers else None


class Qwen2(CausalLM):
    """transformers' `Qwen2ForCausalLM` (inference)."""

    config_class = Qwen2Config

    def layer_window(self, index: int) -> int | None:
        return self.config.window(index)  # type: ignore[attr-defined]

    def attention_biases(self) -> dict[str, bool]:
        """Biases on the query, key and value projections, none on the output."""
        return {"bias": True, "out_bias": False}


__all__ = ["Qwen2", "Qwen2Config"]

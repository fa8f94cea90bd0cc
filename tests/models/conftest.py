"""Helpers shared by the model tests: transformers as the oracle."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import luminal as lm


def hf_logits(hf: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    """transformers' logits for int token ids `(batch, seq)`."""
    with torch.no_grad():
        return hf(torch.from_numpy(ids).long()).logits.numpy()


def hf_greedy_continuation(
    hf: Any, prompt: np.ndarray, new_tokens: int, **options: Any
) -> tuple[np.ndarray, np.ndarray]:
    """transformers' greedy continuation of `prompt` `(batch, seq)`: the new tokens
    `(batch, steps)` and every step's logits `(batch, steps, vocab)`."""
    with torch.no_grad():
        out = hf.generate(
            torch.from_numpy(prompt).long(),
            do_sample=False,
            max_new_tokens=new_tokens,
            output_logits=True,
            return_dict_in_generate=True,
            **options,
        )
    return out.sequences[:, prompt.shape[1] :].numpy(), torch.stack(out.logits, 1).numpy()


def seeded_pair(hf_class: Any, ours: Any, config: Any, seed: int) -> tuple[Any, Any]:
    """A transformers model of `config` with seeded random weights, and luminal's model
    class `ours` built from the same config and loaded with those weights."""
    torch.manual_seed(seed)
    hf = hf_class(config).eval()
    model = ours(lm.Graph(), config.to_dict())
    model.load_state_dict(hf.state_dict())
    return hf, model

"""The reference semantics of `ops.FusedAttention`: exactly the unfused graph it stands
for (the scores, the softmax as the primitives spell it, the product with v), in float32,
so a lowered graph run on the reference runtime gives what the user's graph gives."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from luminal import ops

LOG2_E = 1.0 / math.log(2.0)


def fused_attention(op: ops.FusedAttention, inputs: list[np.ndarray], ctx: Any) -> np.ndarray:
    """inputs: q, k of logical shape (*batch, L, S, D), v (*batch, L, Dv, S), optional
    mask (*batch, L, S); returns (*batch, L, Dv) float32."""
    q_full, k_full, v_full = inputs[:3]
    *batch, length, keys, _ = q_full.shape
    width = v_full.shape[-2]
    if length == 0 or keys == 0:  # an empty product sums to 0, as the unfused graph does
        return np.zeros((*batch, length, width), np.float32)
    q = q_full[..., :, 0, :]  # (*batch, L, D): constant along S
    k = k_full[..., 0, :, :]  # (*batch, S, D): constant along L
    v = v_full[..., 0, :, :]  # (*batch, Dv, S)
    with np.errstate(all="ignore"):
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(op.scale)
        if op.causal_offset is not None:
            first = op.causal_offset.evaluate(dict(ctx.dims))
            hidden = np.arange(length)[:, None] + first < np.arange(keys)[None, :]
            causal = np.where(hidden, np.float32(op.causal_value), np.float32(0.0))
            scores = scores + causal.astype(np.float32)
        if len(inputs) == 4:
            scores = scores + inputs[3]
        shifted = scores + scores.max(axis=-1, keepdims=True) * np.float32(-1.0)
        weights = np.exp2(shifted * np.float32(LOG2_E))
        weights = weights * np.reciprocal(weights.sum(axis=-1, keepdims=True))
        return np.matmul(weights, np.swapaxes(v, -1, -2)).astype(np.float32)

"""Sentence embeddings from token states: masked mean pooling and L2 normalisation, as
sentence-transformers' `Pooling(mean)` and `Normalize` modules compute them."""

from __future__ import annotations

from luminal.dtype import float32
from luminal.errors import ShapeError
from luminal.tensor import GraphTensor

# sentence-transformers clamps the token count with this, so an all-padding row gives 0
MIN_TOKENS = 1e-9


def mean_pooling(hidden: GraphTensor, attention_mask: GraphTensor | None = None) -> GraphTensor:
    """(batch, seq, hidden) -> (batch, hidden): the mean over the tokens whose mask is
    nonzero (all tokens without a mask). Padding does not change the result."""
    if hidden.ndim != 3:
        raise ShapeError(
            f"mean_pooling: hidden states must be (batch, seq, hidden), got {hidden._shape_text()}"
        )
    if attention_mask is None:
        return hidden.mean(1)
    if tuple(attention_mask.view.shape) != tuple(hidden.view.shape[:2]):
        raise ShapeError(
            f"mean_pooling: attention_mask {attention_mask._shape_text()} does not match the "
            f"(batch, seq) of hidden states {hidden._shape_text()}"
        )
    weights = attention_mask.cast(float32).unsqueeze(-1)  # (batch, seq, 1)
    total = (hidden * weights).sum(1)
    count = weights.sum(1).maximum(MIN_TOKENS)  # (batch, 1)
    return total / count


def l2_normalize(x: GraphTensor, axis: int = -1, eps: float = 1e-12) -> GraphTensor:
    """x / max(||x||_2, eps) along `axis` (torch.nn.functional.normalize), so cosine
    similarity becomes a dot product."""
    return x.normalize(2.0, axis, eps)


__all__ = ["l2_normalize", "mean_pooling"]

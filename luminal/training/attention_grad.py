"""The VJP of `ops.FusedAttention`, built from primitives: the scores and the softmax are
recomputed from q and k (as flash attention's backward does) instead of being kept from
the forward pass, so differentiating a compiled graph adds no (L, S) buffer that the
forward pass did not have. Each input gets its gradient in the logical index space its
edge reads (see `ops.FusedAttention`); autograd then undoes the views as for any op."""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal.compiler.attention import causal_mask_tensor

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor
    from luminal.training.autograd import Grads, VJPContext


def fused_attention(ctx: VJPContext) -> Grads:
    """Gradients of softmax(q kᵀ * scale + mask) v for q, k (*batch, L, S, D), v
    (*batch, L, Dv, S) and the mask (*batch, L, S)."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    masked = len(ctx.node.inputs) == 4
    scale = ctx.node.op.scale
    rows = len(ctx.node.shape) - 2  # the L axis of the output; S follows it in the scores
    keys, depth, width = q.shape[rows + 1], q.shape[rows + 2], v.shape[rows + 1]
    scores = (q * k).sum(rows + 2) * scale
    if ctx.node.op.causal_offset is not None:
        op = ctx.node.op
        causal = causal_mask_tensor(
            ctx.graph, op.causal_offset, op.causal_value, q.shape[rows], keys
        )
        scores = scores + causal
    if masked:
        scores = scores + ctx.input(3)
    weights = scores.softmax(-1)  # (*batch, L, S)
    grad = ctx.grad.expand_dim(rows + 2, keys)  # (*batch, L, Dv, S)
    dv = grad * weights.expand_dim(rows + 1, width) if ctx.wants(2) else None
    dweights = (grad * v).sum(rows + 1)  # (*batch, L, S)
    centred = dweights - (weights * dweights).sum(rows + 1, keepdim=True)
    dscores: GraphTensor = weights * centred
    spread = (dscores * scale).expand_dim(rows + 2, depth)  # (*batch, L, S, D)
    dq = spread * k if ctx.wants(0) else None
    dk = spread * q if ctx.wants(1) else None
    return (dq, dk, dv, dscores) if masked else (dq, dk, dv)

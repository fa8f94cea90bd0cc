"""The VJP of `ops.WinogradConv`, built from primitives: the chain the node stands for
(V = kron(B^T, B^T) d, M = U V, Y = kron(A^T, A^T) M) differentiated step by step, each
input's gradient in the logical index space its edge reads (see `ops.WinogradConv`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from luminal.training.autograd import Grads, VJPContext


def winograd_conv(ctx: VJPContext) -> Grads:
    """Gradients for the windows (alpha, alpha, C', N, TH, TW), U (alpha^2, K', T, C),
    kron(B^T, B^T) (alpha^2, alpha^2, C', T) and kron(A^T, A^T) (N, K, TH, tile, TW,
    tile, alpha^2)."""
    windows, weights, bt, at = (ctx.input(i) for i in range(4))
    alpha, _, padded, images, rows, cols = windows.shape
    positions, tiles = weights.shape[0], weights.shape[2]
    padded_outs, channels, outs = weights.shape[1], weights.shape[3], ctx.node.shape[1]
    d = windows.reshape((positions, padded, tiles))
    v = (bt * d.expand_dim(0, positions)).sum(1)  # (alpha^2, C', T)
    v_used = v.slice([None, (0, channels), None]).permute((0, 2, 1))  # (alpha^2, T, C)
    m = (weights * v_used.expand_dim(1, padded_outs)).sum(3)  # (alpha^2, K', T)
    m_used = m.slice([None, (0, outs), None]).reshape((positions, outs, images, rows, cols))
    m_read = m_used.permute((2, 1, 3, 4, 0)).expand_dim(3, at.shape[3]).expand_dim(5, at.shape[5])
    grad = ctx.grad.expand_dim(6, positions)  # (N, K, TH, tile, TW, tile, alpha^2)
    d_at = grad * m_read if ctx.wants(3) else None
    d_m = (grad * at).sum((3, 5)).permute((4, 1, 0, 2, 3)).reshape((positions, outs, tiles))
    d_m = d_m.pad([None, (0, padded_outs - outs), None]).expand_dim(3, channels)
    d_weights = d_m * v_used.expand_dim(1, padded_outs) if ctx.wants(1) else None
    d_v = (d_m * weights).sum(1).permute((0, 2, 1))  # (alpha^2, C, T)
    d_v = d_v.pad([None, (0, padded - channels), None]).expand_dim(1, positions)
    d_bt = d_v * d.expand_dim(0, positions) if ctx.wants(2) else None
    d_windows = (d_v * bt).sum(0).reshape((alpha, alpha, padded, images, rows, cols))
    return (d_windows if ctx.wants(0) else None, d_weights, d_bt, d_at)

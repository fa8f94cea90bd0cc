"""The reference semantics of `ops.WinogradConv`: exactly the four lowered nodes it stands
for (the windows, V = kron(B^T, B^T) d, the products M = U V, the output transform
kron(A^T, A^T) M), in float32, with the transforms read from the node's own inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal import ops


def winograd_conv(op: ops.WinogradConv, inputs: list[np.ndarray], ctx: Any) -> np.ndarray:
    """inputs (logical shapes): windows (alpha, alpha, C', N, TH, TW), U (alpha^2, K', T,
    C), kron(B^T, B^T) (alpha^2, alpha^2, C', T), kron(A^T, A^T) (N, K, TH, tile, TW,
    tile, alpha^2); returns (N, K, TH, tile, TW, tile) float32."""
    windows, weights, bt, at = inputs
    alpha, _, padded, images, rows, cols = windows.shape
    positions, tile, outs = alpha * alpha, op.tile, at.shape[1]
    channels = weights.shape[3]
    with np.errstate(all="ignore"):
        d = windows.reshape(positions, padded * images * rows * cols)
        v = (bt[:, :, 0, 0] @ d).reshape(positions, padded, -1)[:, :channels]
        m = np.matmul(weights[:, :outs, 0, :], v)  # (alpha^2, K, T)
        m = m.reshape(positions, outs, images, rows, cols)
        transform = at[0, 0, 0, :, 0, :, :]  # (tile, tile, alpha^2)
        y = np.einsum("ijq,qknhw->nkhiwj", transform, m, optimize=True)
    return np.ascontiguousarray(y, dtype=np.float32).reshape(images, outs, rows, tile, cols, tile)

"""Winograd convolution F(4x4, 3x3) for 3x3, stride-1, undilated, ungrouped 2-D convolutions.

Each output tile of 4x4 pixels is computed from a 6x6 input tile with 36 multiplications
per (input channel, output channel) pair instead of 144 (Lavin & Gray, "Fast Algorithms
for Convolutional Neural Networks", 2016):

    Y = A^T [ (G g G^T) . (B^T d B) ] A

All four steps are matrix products, so they are written with `matmul` and lower to
`lm_sgemm` on the CPU (and to each backend's matmul elsewhere):

- the input tiles are overlapping windows of the padded input (`pool_last_dim`, stride 4:
  a view), read as a (36, C * tiles) matrix and multiplied by kron(B^T, B^T) (36 x 36):
  the product packs the windows straight from the padded input, one pass;
- the weight transform kron(G, G) (36 x 9) @ g reads only the weight, so a runtime that
  keeps kernels of unchanged parameters (`backends/cpu/invariants.py`) computes it once;
- the 36 products (Cout, Cin) @ (Cin, tiles), one per tile position: the FLOPs that are
  left (4x fewer than the direct convolution, less the tiles' overhang);
- the output transform, tiles x 36 @ kron(A^T, A^T)^T (36 x 16), then a crop and an
  NCHW view that the next elementwise kernel (bias, activation) reads in place.

The transforms were also tried as sums of scaled views (the matrices are mostly 0 and
+-1): joined with `concat` they render as nested conditionals, 3x slower than the packed
products, and as broadcast columns the two 1-D passes fuse into 36 strided loads per
value (docs/layers.md has the measurements).

The constant matrices are graph inputs holding their values (as ONNX initializers are),
float32 of the float64 matrices; the error against a direct convolution is bounded in
docs/layers.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from luminal.graph import Graph
from luminal.shape.expr import Expr
from luminal.tensor import GraphTensor

TILE = 4  # output pixels per tile side (m); the input tile side is TILE + 2 (alpha)
ALPHA = TILE + 2
# interpolation points 0, 1, -1, 1/2, -2 and infinity (Barabasz et al., "Error Analysis
# and Improving the Accuracy of Winograd Convolution for Deep Neural Networks", 2020):
# 3x less error than Lavin's 0, +-1, +-2 at 256 channels (docs/layers.md)
BT = np.array(
    [
        [1, -3 / 2, -2, 3 / 2, 1, 0],
        [0, -1, 1 / 2, 5 / 2, 1, 0],
        [0, 1, -5 / 2, 1 / 2, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 1 / 2, -1, -1 / 2, 1, 0],
        [0, 1, -3 / 2, -2, 3 / 2, 1],
    ],
    dtype=np.float64,
)
G = np.array(
    [
        [1, 0, 0],
        [1 / 3, 1 / 3, 1 / 3],
        [-1 / 3, 1 / 3, -1 / 3],
        [-16 / 15, -8 / 15, -4 / 15],
        [1 / 15, -2 / 15, 4 / 15],
        [0, 0, 1],
    ],
    dtype=np.float64,
)
AT = np.array(
    [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 1 / 2, -2, 0],
        [0, 1, 1, 1 / 4, 4, 0],
        [0, 1, -1, 1 / 8, -8, 1],
    ],
    dtype=np.float64,
)

# "auto" takes Winograd when both channel counts and the tiles per image reach these:
# below them the transforms' memory traffic outweighs the saved products (ResNet-18's
# convolutions at batch 8, 1 thread: 56x56x64 is 1.3x slower, 7x7x512 (4 tiles) 1.5x
# slower; see docs/layers.md)
MIN_CHANNELS = 128
MIN_TILES = 16


def applicable(
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    spatial: Sequence[Expr],
) -> str | None:
    """Why Winograd cannot compute this convolution, or None when it can."""
    if len(kernel) != 2:
        return f"it is {len(kernel)}-D (Winograd here is 2-D)"
    if tuple(kernel) != (3, 3):
        return f"the kernel is {tuple(kernel)}, not (3, 3)"
    if tuple(stride) != (1, 1):
        return f"the stride is {tuple(stride)}, not 1"
    if tuple(dilation) != (1, 1):
        return f"the dilation is {tuple(dilation)}, not 1"
    if groups != 1:
        return f"groups is {groups}, not 1"
    if any(s.as_int() is None for s in spatial):
        return "the spatial sizes are symbolic (tiles need known sizes)"
    return None


def worthwhile(in_channels: int, out_channels: int, out_sizes: Sequence[int]) -> bool:
    """The "auto" rule: enough channels for the 36 products to dominate the transforms,
    and enough tiles per image for those products to fill sgemm's blocks."""
    tiles = -(-out_sizes[0] // TILE) * -(-out_sizes[1] // TILE)
    return min(in_channels, out_channels) >= MIN_CHANNELS and tiles >= MIN_TILES


def _constant(graph: Graph, matrix: np.ndarray, name: str) -> GraphTensor:
    """A float32 matrix the graph holds as an input with its data (an ONNX initializer),
    read-only: the runtime keeps kernels that read only unchanging, read-only inputs
    (the weight transform) instead of running them again."""
    data = np.array(matrix, dtype=np.float32)
    data.setflags(write=False)
    return graph.tensor(data.shape, name=name).set(data)


def winograd_conv2d(
    x: GraphTensor, weight: GraphTensor, pads: Sequence[tuple[int, int]]
) -> GraphTensor:
    """Convolution of x (N, C, H, W) with weight (K, C, 3, 3), zero padding `pads`
    ((top, bottom), (left, right)), stride 1: (N, K, H + top + bottom - 2, W + ...).
    The caller has checked `applicable`."""
    graph = x.graph
    n, channels = x.view.shape[0], int(x.view.shape[1].as_int())  # type: ignore[arg-type]
    sizes = [int(d.as_int()) for d in x.view.shape[2:]]  # type: ignore[arg-type]
    out_channels = int(weight.view.shape[0].as_int())  # type: ignore[arg-type]
    out_sizes = [s + before + after - 2 for s, (before, after) in zip(sizes, pads, strict=True)]
    tiles = [-(-o // TILE) for o in out_sizes]
    # pad to whole tiles: the last tile reads zeros past the input, its extra outputs
    # are cropped
    padded = x.pad(
        [None, None]
        + [
            (before, t * TILE + 2 - s - before)
            for s, t, (before, _) in zip(sizes, tiles, pads, strict=True)
        ]
    )
    windows = padded.pool_last_dim(ALPHA, TILE)  # (N, C, Hp, tiles_w, alpha_w)
    windows = windows.permute((0, 1, 3, 4, 2)).pool_last_dim(ALPHA, TILE)
    # (N, C, tiles_w, alpha_w, tiles_h, alpha_h) -> (alpha_h * alpha_w, C * N * tiles)
    positions = n * tiles[0] * tiles[1]
    d = windows.permute((5, 3, 1, 0, 4, 2)).reshape((ALPHA * ALPHA, channels * positions))
    v = _constant(graph, np.kron(BT, BT), "winograd_BT").matmul(d)
    v = v.reshape((ALPHA * ALPHA, channels, positions))
    g = weight.permute((2, 3, 0, 1)).reshape((9, out_channels * channels))
    u = _constant(graph, np.kron(G, G), "winograd_G").matmul(g)
    u = u.reshape((ALPHA * ALPHA, out_channels, channels))
    m = u.matmul(v).reshape((ALPHA * ALPHA, out_channels * positions))
    y = m.permute((1, 0)).matmul(_constant(graph, np.kron(AT, AT).T, "winograd_AT"))
    # (K, N, tiles_h, tiles_w, 4, 4) -> (N, K, tiles_h, 4, tiles_w, 4) -> NCHW
    y = y.reshape((out_channels, n, tiles[0], tiles[1], TILE, TILE))
    y = y.permute((1, 0, 2, 4, 3, 5)).reshape((n, out_channels, tiles[0] * TILE, tiles[1] * TILE))
    if [t * TILE for t in tiles] != out_sizes:
        y = y.slice([None, None, (0, out_sizes[0]), (0, out_sizes[1])])
    return y

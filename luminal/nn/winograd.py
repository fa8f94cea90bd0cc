"""Winograd convolution F(m x m, 3x3) for 3x3, stride-1, undilated, ungrouped 2-D
convolutions (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).

Each output tile of m x m pixels is computed from an alpha x alpha input tile (alpha =
m + 2) with alpha^2 multiplications per (input channel, output channel) pair instead of
9 m^2: F(4x4) 36 instead of 144, F(2x2) 16 instead of 36:

    Y = A^T [ (G g G^T) . (B^T d B) ] A

The four steps are contractions, written with ordinary ops (the reference runtime,
autograd and the GPU backends see matrix products):

- the input tiles are overlapping windows of the padded input (`pool_last_dim` at
  stride m), copied as an (alpha^2, C * tiles) matrix (2.25x the input for F(4x4)) so
  that each row is one unit-stride run, then multiplied by kron(B^T, B^T);
- the weight transform kron(G, G) (alpha^2 x 9) @ g reads only the weight, so the
  runtime, which keeps kernels of unchanging read-only inputs (`backends/cpu/
  invariants.py`), computes it once;
- alpha^2 products (Cout, Cin) @ (Cin, tiles), one per tile position: the FLOPs left;
- the output transform kron(A^T, A^T) contracted with the products straight into NCHW
  order (no copy; a crop view where the tiles overhang).

kron(B^T, B^T) and kron(A^T, A^T) are constant matrices (`schedule/constant_matrix.py`):
their values are fixed when the graph is built, so the CPU backend renders those two
contractions as straight-line sums with the values folded in (`kernel/
constant_contract.py`) instead of compute-bound dense products. docs/layers.md has
the measurements, what was tried, and the error against im2col.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from luminal.dtype import DType
from luminal.graph import Graph
from luminal.schedule.constant_matrix import constant_matrix
from luminal.shape.expr import Expr
from luminal.tensor import GraphTensor


@dataclass(frozen=True)
class Transforms:
    """F(m x m, 3x3): B^T (alpha x alpha), G (alpha x 3), A^T (m x alpha), alpha = m + 2."""

    tile: int
    bt: np.ndarray
    g: np.ndarray
    at: np.ndarray

    @property
    def alpha(self) -> int:
        return self.tile + 2


# interpolation points 0, 1, -1, 1/2, -2 and infinity (Barabasz et al., "Error Analysis
# and Improving the Accuracy of Winograd Convolution for Deep Neural Networks", 2020):
# 2.6x less error than Lavin's 0, +-1, +-2 at 256 channels (docs/layers.md)
F4 = Transforms(
    4,
    np.array(
        [
            [1, -3 / 2, -2, 3 / 2, 1, 0],
            [0, -1, 1 / 2, 5 / 2, 1, 0],
            [0, 1, -5 / 2, 1 / 2, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 1 / 2, -1, -1 / 2, 1, 0],
            [0, 1, -3 / 2, -2, 3 / 2, 1],
        ]
    ),
    np.array(
        [
            [1, 0, 0],
            [1 / 3, 1 / 3, 1 / 3],
            [-1 / 3, 1 / 3, -1 / 3],
            [-16 / 15, -8 / 15, -4 / 15],
            [1 / 15, -2 / 15, 4 / 15],
            [0, 0, 1],
        ]
    ),
    np.array(
        [
            [1, 1, 1, 1, 1, 0],
            [0, 1, -1, 1 / 2, -2, 0],
            [0, 1, 1, 1 / 4, 4, 0],
            [0, 1, -1, 1 / 8, -8, 1],
        ]
    ),
)
# points 0, +-1 and infinity: 16 products per 2x2 tile (2.25x fewer than direct)
F2 = Transforms(
    2,
    np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
    np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
    np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64),
)

# "auto" takes Winograd when both channel counts and the tiles per image reach these:
# below them the transforms' memory traffic outweighs the saved products (ResNet-18's
# convolutions at batch 8, 1 thread, conv + bias + ReLU kernels: 56x56x64 7.2 ms against
# im2col's 9.5, 28x28x128 4.8 / 8.4, 14x14x256 4.8 / 8.2, 7x7x512 with F(2x2) 6.3 / 8.6;
# see docs/layers.md)
MIN_CHANNELS = 64
# zero channels appended to the transforms' rows (see winograd_conv2d)
SKEW = 1
MIN_TILES = 16
# ... and the batch this many tiles: the alpha^2 products are (Cout, Cin) @ (Cin, tiles),
# too narrow below it (1 thread: 7x7x512 F(2x2) at batch 2, 32 tiles, 3.9 ms against
# im2col's 2.8, at batch 4 4.3 against 5.0; 14x14x256 at batch 2 2.3 / 2.2; 28x28x128
# at batch 1, 49 tiles, 0.76 / 1.06)
MIN_BATCH_TILES = 48
# F(4x4) also on maps where an image has fewer than MIN_TILES of its tiles, when its tiles
# cover no more of the map than F(2x2)'s (7x7: both 8x8) and the batch holds from
# SMALL_MAP_F4_TILES[0] to SMALL_MAP_F4_TILES[1] of them: half F(2x2)'s multiplications in
# products 4x narrower, and up to 48 tiles (one block of the CPU kernel's AVX-512 register
# tile, which the CPU compiler then fuses whatever the size of the transformed weights:
# they are read once, compiler/winograd.py). ResNet-18's 7x7x512 at batch 8 (32 tiles),
# fused, caches cold, 2 threads: 2.04 against F(2x2)'s 2.48 ms; batch 4 1.69 / 1.82,
# batch 2 (8 tiles) 1.71 / 0.99; the whole ONNX ResNet-18 at batch 8 1.2-3.2 ms faster
# (both rules compiled in one process, runs alternated, paired medians)
SMALL_MAP_F4_TILES = (16, 48)


def applicable(
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    spatial: Sequence[Expr],
    dtypes: Sequence[DType],
) -> str | None:
    """Why Winograd cannot compute this convolution, or None when it can. Float32 only:
    its transforms' rounding, 6x im2col's in float32, would swamp half precision."""
    if any(dtype != DType.float32 for dtype in dtypes):
        return f"the operands are {', '.join(str(d) for d in dtypes)}, not float32"
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


def tiles_per_image(transforms: Transforms, out_sizes: Sequence[int]) -> int:
    """Output tiles of one image (the last row and column of tiles may overhang)."""
    return math.prod(-(-o // transforms.tile) for o in out_sizes)


def pick(out_sizes: Sequence[int], batch: int | None = None) -> Transforms:
    """F(4x4) where an image has MIN_TILES of its tiles, else F(2x2): its 4x smaller tiles
    keep the products wide enough on small maps (ResNet-18's 7x7: 16 tiles, not 4) --
    unless the batch (when its size is known) holds enough F(4x4) tiles for them, covering
    no more of the map (SMALL_MAP_F4_TILES)."""
    per_image = tiles_per_image(F4, out_sizes)
    if per_image >= MIN_TILES:
        return F4
    low, high = SMALL_MAP_F4_TILES
    same_cover = all(-(-o // F4.tile) * F4.tile == -(-o // F2.tile) * F2.tile for o in out_sizes)
    if batch is not None and same_cover and low <= batch * per_image <= high:
        return F4
    return F2


def worthwhile(
    in_channels: int, out_channels: int, out_sizes: Sequence[int], batch: int | None = None
) -> Transforms | None:
    """The "auto" rule: the transforms to use, or None for im2col. Winograd needs enough
    channels for the products to outweigh the transforms' memory traffic, and enough
    tiles per image and in the whole batch (when its size is known) for those products
    to fill sgemm's blocks."""
    if min(in_channels, out_channels) < MIN_CHANNELS:
        return None
    # worthwhile at all by the rule without the batch (F(2x2) on small maps) ...
    tiles = tiles_per_image(pick(out_sizes), out_sizes)
    if (batch is not None and batch * tiles < MIN_BATCH_TILES) or tiles < MIN_TILES:
        return None
    return pick(out_sizes, batch)  # ... with F(4x4) there when the batch fills it


def _weight_transform(graph: Graph, transforms: Transforms) -> GraphTensor:
    """kron(G, G) as an ordinary read-only input (as ONNX initializers are), not a constant
    matrix: its product reads the weight at stride 9, which sgemm packs faster than the
    straight-line sums read it, and the runtime keeps kernels that read only unchanging
    read-only inputs, so for fixed weights it runs once."""
    data = np.kron(transforms.g, transforms.g).astype(np.float32)
    data.setflags(write=False)
    return graph.tensor(data.shape, name="winograd_G").set(data)


def winograd_conv2d(
    x: GraphTensor,
    weight: GraphTensor,
    pads: Sequence[tuple[int, int]],
    transforms: Transforms = F4,
) -> GraphTensor:
    """Convolution of x (N, C, H, W) with weight (K, C, 3, 3), zero padding `pads`
    ((top, bottom), (left, right)), stride 1: (N, K, H + top + bottom - 2, W + ...).
    The caller has checked `applicable`."""
    graph, tile, alpha = x.graph, transforms.tile, transforms.alpha
    n, channels = x.view.shape[0], int(x.view.shape[1].as_int())  # type: ignore[arg-type]
    sizes = [int(d.as_int()) for d in x.view.shape[2:]]  # type: ignore[arg-type]
    out_channels = int(weight.view.shape[0].as_int())  # type: ignore[arg-type]
    out_sizes = [s + before + after - 2 for s, (before, after) in zip(sizes, pads, strict=True)]
    tiles = [-(-o // tile) for o in out_sizes]
    # pad to whole tiles: the last tile reads zeros past the input, its extra outputs
    # are cropped
    padded = x.pad(
        [None, None]
        + [
            (before, t * tile + 2 - s - before)
            for s, t, (before, _) in zip(sizes, tiles, pads, strict=True)
        ]
    )
    windows = padded.pool_last_dim(alpha, tile)  # (N, C, Hp, tiles_w, alpha_w)
    windows = windows.permute((0, 1, 3, 4, 2)).pool_last_dim(alpha, tile)
    # (N, C, tiles_w, alpha_w, tiles_h, alpha_h) -> (alpha_h * alpha_w, C * N * tiles),
    # copied (2.25x the input): each row is then one unit-stride run the transforms'
    # loops vectorise over. The alpha^2 rows of V and of M are SKEW channels longer
    # than C * N * tiles: rows a multiple of 4 KiB apart (ResNet's at batch 8) put the
    # transforms' 36 streams in one L1 set (56x56x64 input transform 2.7 -> 1.4 ms)
    positions = n * tiles[0] * tiles[1]
    d = windows.permute((5, 3, 1, 0, 4, 2)).pad([None, None, (0, SKEW), None, None, None])
    d = d.contiguous()
    d = d.reshape((1, alpha * alpha, channels + SKEW, positions))
    bt = constant_matrix(graph, np.kron(transforms.bt, transforms.bt), "winograd_BT")
    # V = kron(B^T, B^T) @ d: a constant-matrix contraction, straight-line sums over
    # the columns
    # (the channel axis kept: the kernel's threads take channels, its SIMD lanes tiles)
    v = (bt.reshape((alpha * alpha, alpha * alpha, 1, 1)) * d).sum(1)
    v = v.slice([None, (0, channels)])
    g = weight.pad([(0, SKEW), None, None, None]).permute((2, 3, 0, 1))
    g = g.reshape((9, (out_channels + SKEW) * channels))
    u = _weight_transform(graph, transforms).matmul(g)
    u = u.reshape((alpha * alpha, out_channels + SKEW, channels))
    m = u.matmul(v).reshape((alpha * alpha, out_channels + SKEW, n, *tiles))
    m = m.slice([None, (0, out_channels)])
    # Y[n, k, th, i, tw, j] = sum_q kron(A^T, A^T)[(i, j), q] M[q, k, n, th, tw]: the
    # output transform writes NCHW itself, so its readers index it without / and %
    at = constant_matrix(graph, np.kron(transforms.at, transforms.at), "winograd_AT")
    at = at.reshape((1, 1, 1, tile, 1, tile, alpha * alpha))
    m = m.permute((2, 1, 3, 4, 0)).unsqueeze(3).unsqueeze(5)  # (N, K, th, 1, tw, 1, q)
    y = (at * m).sum(-1)
    y = y.reshape((n, out_channels, tiles[0] * tile, tiles[1] * tile))
    if [t * tile for t in tiles] != out_sizes:
        y = y.slice([None, None, (0, out_sizes[0]), (0, out_sizes[1])])
    return y

"""Winograd fusion: find the four lowered nodes of one `nn/winograd.py` convolution (the
window copy, V = kron(B^T, B^T) d, the alpha^2 products M = U V, the output transform
kron(A^T, A^T) M) and replace them by one `ops.WinogradConv` node.

Unfused, each step writes a buffer of several MB that the next reads back (ResNet-18's
56 x 56 x 64 convolutions at batch 8: about 100 MB moved per convolution, which on two
threads took longer than the multiplications); the CPU kernel of the fused node
(`backends/cpu/winograd.c`) runs blocks of tiles through all three steps while they
are in cache (a block's transformed input and products: about 1 MB at 64 channels).

A graph pass like the attention pass (`compiler/attention.py`), for the same reason: the
pattern is decided by views (the windows, the products' batch and broadcast strides),
which the e-graph holds as opaque ids. Every view is checked to be exactly the one
`winograd_conv2d` builds, the constant matrices to be exactly its transforms, and every
removed node to be read only inside the pattern; anything else is left unfused. The node
keeps the graph's semantics (`reference/winograd.py` computes the replaced nodes), and
compiled graphs are verified against the original graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal import ops
from luminal.compiler.pattern import live_nodes, private, replace_pattern
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.nn.winograd import F2, F4, SMALL_MAP_F4_TILES
from luminal.schedule.constant_matrix import constant_value
from luminal.shape.expr import known_ints, sym
from luminal.shape.tracker import ShapeTracker

TRANSFORMS = {4: F4, 2: F2}
# fused only while the transformed weights (alpha^2 x K x C floats), which every block of
# tiles reads again, stay in the last-level cache: the CPU lowering passes half its size
# (`backends/cpu/cpu_caches.winograd_weight_limit`), MAX_WEIGHT_BYTES where it is unknown.
# ResNet-18 at batch 8, 2 threads, per convolution, fused against unfused (window copy,
# transforms, products): 56x56x64 (0.6 MB) 1.8-2.1 against 4.0-4.3 ms, 28x28x128 (2.4 MB)
# 1.5-2.0 / 3.0; with a 32 MiB L3, 14x14x256 (9.4 MB) 1.9-2.0 / 2.1-2.3 and 7x7x512 with
# F(2x2) (16.8 MB) 2.7-2.8 / 2.8-2.9 on a quiet machine, and 1.9-2.2 / 2.7 and 2.7 / 3.4
# when other tenants share the L3 (docs/cpu-backend.md); past it U streams from memory
# once per block: 14x14x512 (37.7 MB) at batch 4 7.2 against 6.3 ms. A convolution of at
# most one block of tiles (nn/winograd.py's SMALL_MAP_F4_TILES: 7x7x512 by F(4x4) at batch
# 8, U 37.7 MB) reads U once whatever its size, and is fused past the limit.
MAX_WEIGHT_BYTES = 4 << 20


@dataclass(frozen=True)
class Sizes:
    """One convolution's sizes: tiles of `tile` outputs, C' = channels + skew rows of the
    windows, K' = outs + skew rows of U."""

    tile: int
    channels: int
    padded_channels: int
    outs: int
    padded_outs: int
    images: int
    rows: int
    cols: int

    @property
    def alpha(self) -> int:
        return self.tile + 2

    @property
    def positions(self) -> int:
        return self.alpha * self.alpha

    @property
    def tiles(self) -> int:
        return self.images * self.rows * self.cols


def _view(
    shape: tuple[int, ...], strides: tuple[int, ...], source: tuple[int, ...]
) -> ShapeTracker:
    dims = tuple(sym(d) for d in shape)
    return ShapeTracker(
        dims, tuple(sym(s) for s in strides), sym(0), None, tuple(sym(d) for d in source)
    )


def chain_views(s: Sizes) -> dict[str, ShapeTracker]:
    """The views `winograd_conv2d`'s lowered nodes read their intermediate buffers
    through: the windows copy in V, V in M, M in the output transform."""
    q, t = s.positions, s.tiles
    windows = (s.alpha, s.alpha, s.padded_channels, s.images, s.rows, s.cols)
    at_strides = (0, 0, 0, s.tile * q, 0, q, 1)
    return {
        "bt": _view((q, q, s.padded_channels, t), (q, 1, 0, 0), (q, q)),
        "at": _view(
            (s.images, s.outs, s.rows, s.tile, s.cols, s.tile, q), at_strides, (s.tile**2, q)
        ),
        "d": _view((q, q, s.padded_channels, t), (0, s.padded_channels * t, t, 1), windows),
        "v": _view(
            (q, s.padded_outs, t, s.channels),
            (s.padded_channels * t, 0, 1, t),
            (q, s.padded_channels, t),
        ),
        "m": _view(
            (s.images, s.outs, s.rows, s.tile, s.cols, s.tile, q),
            (s.rows * s.cols, t, s.cols, 0, 1, 0, s.padded_outs * t),
            (q, s.padded_outs, t),
        ),
    }


def _same(a: ShapeTracker, b: ShapeTracker) -> bool:
    """Equal views up to the strides of dims of size 1 (never multiplied by an index)."""
    if (a.shape, a.offset, a.mask) != (b.shape, b.offset, b.mask):
        return False
    pairs = zip(a.shape, a.strides, b.strides, strict=True)
    return all(dim == 1 or x == y for dim, x, y in pairs)


@dataclass
class Match:
    """One Winograd convolution: the fused node's input edges (windows, U, kron(B^T,
    B^T), kron(A^T, A^T)), its sizes, and the nodes it replaces (the output last)."""

    edges: tuple[Edge, Edge, Edge, Edge]
    sizes: Sizes
    replaced: list[int]


def _constant_operand(graph: Graph, node: Node, prefix: str) -> tuple[int, Edge, np.ndarray] | None:
    """(the other operand's index, the constant's edge, its data) when one operand of
    `node` is a constant matrix named `prefix`."""
    for side in (0, 1):
        edge = node.inputs[side]
        source = graph.nodes[edge.source]
        if isinstance(source.op, ops.Input) and source.op.label.startswith(prefix + "#"):
            data = constant_value(graph, edge.source)
            if data is not None:
                return 1 - side, edge, data
    return None


def _contract(graph: Graph, edge: Edge, axis: int) -> Node | None:
    node = graph.nodes[edge.source]
    if type(node.op) is not ops.Contract or node.op.axis != axis or node.dtype != DType.float32:
        return None
    return node


def match_winograd(graph: Graph, node: Node) -> Match | None:
    """The Winograd convolution whose output transform is `node`, or None."""
    if type(node.op) is not ops.Contract or node.dtype != DType.float32 or node.op.axis != 6:
        return None
    found = _constant_operand(graph, node, "winograd_AT")
    out_shape = known_ints(tuple(node.shape))
    if found is None or out_shape is None or len(out_shape) != 6:
        return None
    m_side, at_edge, at_data = found
    images, outs, rows, tile, cols, _ = out_shape
    transforms = TRANSFORMS.get(tile)
    if transforms is None or not _equal(at_data, np.kron(transforms.at, transforms.at)):
        return None
    m = _contract(graph, node.inputs[m_side], 3)
    if m is None or len(m.shape) != 3:
        return None
    side = _input_transform(graph, m)
    if side is None:
        return None
    v_side, (d_side, bt_edge, bt_data) = side
    v = graph.nodes[m.inputs[v_side].source]
    if v.op.axis != 1:
        return None
    if not _equal(bt_data, np.kron(transforms.bt, transforms.bt)):
        return None
    d = graph.nodes[v.inputs[d_side].source]
    m_shape, v_shape, d_shape = (
        known_ints(tuple(m.shape)),
        known_ints(tuple(v.shape)),
        known_ints(tuple(d.shape)),
    )
    if type(d.op) is not ops.Contiguous or None in (m_shape, v_shape, d_shape):
        return None
    u_edge = m.inputs[1 - v_side]
    channels = u_edge.view.shape[3].as_int()
    sizes = Sizes(tile, channels or 0, d_shape[2], outs, m_shape[1], images, rows, cols)  # type: ignore[index]
    expected = chain_views(sizes)
    if (
        d_shape != (sizes.alpha, sizes.alpha, sizes.padded_channels, images, rows, cols)
        or not _same(v.inputs[d_side].view, expected["d"])
        or not _same(m.inputs[v_side].view, expected["v"])
        or not _same(node.inputs[m_side].view, expected["m"])
        or not _same(bt_edge.view, expected["bt"])
        or not _same(at_edge.view, expected["at"])
    ):
        return None
    edges, replaced = (d.inputs[0], u_edge, bt_edge, at_edge), [d.id, v.id, m.id, node.id]
    # the kernel reads float32 buffers that outlive the removed nodes
    read = [graph.nodes[e.source] for e in edges] + [d, v]
    if any(n.dtype != DType.float32 for n in read) or {e.source for e in edges} & {*replaced}:
        return None
    return Match(edges, sizes, replaced)


def _input_transform(graph: Graph, m: Node) -> tuple[int, tuple[int, Edge, np.ndarray]] | None:
    """(which operand of the products M = U V is V, V's `_constant_operand` for
    kron(B^T, B^T)) when one is a contraction with it, else None."""
    for side in (0, 1):
        source = graph.nodes[m.inputs[side].source]
        if type(source.op) is ops.Contract:
            found = _constant_operand(graph, source, "winograd_BT")
            if found is not None:
                return side, found
    return None


def _equal(data: np.ndarray, expected: np.ndarray) -> bool:
    return data.shape == expected.shape and np.array_equal(data, expected.astype(np.float32))


def _fusable(
    graph: Graph, match: Match, readers: dict[int, set[int]], max_weight_bytes: int
) -> bool:
    """The removed nodes are read only inside the pattern, U is at most `max_weight_bytes`
    or read once (its tiles one block of the kernel's), and the windows and U are read
    the way the CPU kernel reads them (`winograd_kernel`)."""
    if not private(graph, readers, match.replaced):
        return False
    s = match.sizes
    # U read once (one block of tiles, SMALL_MAP_F4_TILES's top: the AVX-512 register tile's
    # width; with AVX2's, 16 tiles, three blocks read it three times) or staying in cache
    read_once = s.tiles <= SMALL_MAP_F4_TILES[1]
    return (read_once or s.positions * s.outs * s.channels * 4 <= max_weight_bytes) and (
        windows_layout(match.edges[0].view, s) is not None
        and weights_layout(match.edges[1].view) is not None
    )


def windows_layout(view: ShapeTracker, s: Sizes) -> tuple[int, int, int, int, int] | None:
    """(offset, image, channel, row and tile-row strides) of the windows' view when each
    window row is unit-stride, tiles `tile` columns apart, images and channels are planes
    laid out one after another, and nothing is masked but the skew channels (the input is
    already padded), else None."""
    strides = known_ints(tuple(view.strides))
    offset = view.offset.as_int()
    if strides is None or offset is None:
        return None
    row, column, channel, image, tile_row, tile_col = strides
    if column != 1 or (s.cols > 1 and tile_col != s.tile):
        return None
    if s.rows > 1 and tile_row != s.tile * row:
        return None
    # planes after one another as in a padded NCHW buffer (the kernel's whole-vector reads
    # past a row check only the last window row of a group against the buffer's end)
    plane = row * (s.tile * s.rows + 2)
    if row <= 0 or (s.channels > 1 and channel < plane):
        return None
    if s.images > 1 and image < max(channel * s.channels, plane):
        return None
    if view.mask is not None:
        sizes = (s.alpha, s.alpha, s.padded_channels, s.images, s.rows, s.cols)
        bounds = [(lo.as_int(), hi.as_int()) for lo, hi in view.mask]
        if any(
            b != (0, d) for axis, (b, d) in enumerate(zip(bounds, sizes, strict=True)) if axis != 2
        ):
            return None
        if bounds[2] not in ((0, s.channels), (0, s.padded_channels)):
            return None
    return offset, image, channel, row, tile_row


def weights_layout(view: ShapeTracker) -> tuple[int, int, int] | None:
    """(offset, position and row strides) of U's view (alpha^2, K', T, C) when constant
    along T and unit-stride along C (either of size 1 aside), unmasked, else None."""
    strides = known_ints(tuple(view.strides))
    offset = view.offset.as_int()
    if strides is None or offset is None or view.mask is not None:
        return None
    position, row, tiles, channel = strides
    if (tiles != 0 and view.shape[2] != 1) or (channel != 1 and view.shape[3] != 1):
        return None
    return offset, position, row


def fuse_winograd(graph: Graph, max_weight_bytes: int = MAX_WEIGHT_BYTES) -> int:
    """Replace every fusable Winograd convolution of `graph` whose transformed weights are
    at most `max_weight_bytes` (or read once: `_fusable`) by an `ops.WinogradConv` node;
    returns how many."""
    readers = graph.readers()
    fused = 0
    for node in live_nodes(graph):
        match = match_winograd(graph, node)
        if match is None or not _fusable(graph, match, readers, max_weight_bytes):
            continue
        replace_pattern(
            graph, ops.WinogradConv(match.sizes.tile), match.edges, match.replaced, readers
        )
        fused += 1
    return fused


def sizes_of(node: Node) -> Sizes:
    """The sizes of a `WinogradConv` node, from its shape and its inputs' views."""
    images, outs, rows, tile, cols, _ = known_ints(tuple(node.shape))  # type: ignore[misc]
    windows, weights = node.inputs[0].view.shape, node.inputs[1].view.shape
    return Sizes(
        tile,
        int(weights[3].as_int()),  # type: ignore[arg-type]
        int(windows[2].as_int()),  # type: ignore[arg-type]
        outs,
        int(weights[1].as_int()),  # type: ignore[arg-type]
        images,
        rows,
        cols,
    )


def unfuse_winograd(graph: Graph) -> int:
    """Replace every `ops.WinogradConv` by the four nodes it stands for (for a lowering
    without a kernel for it, such as the GPU's); returns how many."""
    count = 0
    for node in [n for n in graph.nodes.values() if isinstance(n.op, ops.WinogradConv)]:
        windows, weights, bt, at = node.inputs
        s = sizes_of(node)
        views = chain_views(s)
        q = s.positions
        d = graph.insert(ops.Contiguous(), (windows,), windows.view.shape, DType.float32)
        shape_v = tuple(sym(x) for x in (q, s.padded_channels, s.tiles))
        v = graph.insert(ops.Contract(1), (bt, Edge(d, 0, views["d"])), shape_v, DType.float32)
        shape_m = tuple(sym(x) for x in (q, s.padded_outs, s.tiles))
        m = graph.insert(ops.Contract(3), (weights, Edge(v, 0, views["v"])), shape_m, DType.float32)
        out = graph.insert(ops.Contract(6), (at, Edge(m, 0, views["m"])), node.shape, DType.float32)
        graph.replace(node.id, out)
        count += 1
    return count

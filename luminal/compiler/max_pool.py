"""Padded max pooling as one kernel: find `nn/pooling.max_pool`'s windows over a padded
copy (a `Contiguous` of the zero-padded input, two `MaxReduce`s over the window's rows
and columns, and the ReLU after them when the input was a ReLU's) and replace them by one
custom C kernel that reads the unpadded input.

Unfused, the padded copy is a whole extra buffer: ResNet-18's stem at batch 8 writes its
25.7 MB output, reads it back to write a 26.6 MB padded copy, and the pool reads that
(two threads: 0.98 ms copy and 1.00 ms pool). The padding cannot be a view, because a
window's validity depends on the output and the kernel index together, which a view's
per-dim mask cannot say; a kernel that checks the bounds itself can. With the copy gone,
the input is a plain elementwise result again, so a product's bias joins the product's
epilogue (`backends/cpu/sgemm_epilogue.py`).

Padding here reads 0 (the ReLU case: max over relu(y) with 0-padding equals relu of the
max over y with 0-padding); any other padded pool keeps its copy. The node is a custom
kernel (`luminal/custom.py`) whose numpy reference computes exactly the replaced nodes, and
compiled graphs are verified against the original graph. A lowering without a C kernel
(the GPU's) puts the nodes back (`unfuse_max_pools`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from luminal import ops
from luminal.compiler.pattern import live_nodes, private, relu_edge, replace_pattern
from luminal.custom import CustomKernel
from luminal.dtype import DType
from luminal.graph import Edge, Graph, Node
from luminal.shape.expr import known_ints, sym
from luminal.shape.tracker import ShapeTracker, contiguous_strides

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor
    from luminal.training.autograd import VJPContext


# the kernel keeps one padded row on each thread's stack: wider rows keep their copy
MAX_ROW = 1 << 14


@dataclass(frozen=True)
class PaddedMaxPool:
    """One 2-d max pool over (..., H, W) with zero padding: the numpy reference of the
    fused kernel, and what `unfuse_max_pools` rebuilds the nodes from. `padded` is the
    copy's (height, width) and `pads` where the input starts in it (top, left)."""

    size: tuple[int, int]
    padded: tuple[int, int]
    pads: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    relu: bool

    @property
    def out(self) -> tuple[int, int]:
        return tuple(  # type: ignore[return-value]
            (p - d * (k - 1) - 1) // s + 1
            for p, k, s, d in zip(self.padded, self.kernel, self.stride, self.dilation, strict=True)
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        (h, w), (ph, pw), (top, left) = self.size, self.padded, self.pads
        padded = np.zeros((*x.shape[:-2], ph, pw), np.float32)
        padded[..., top : top + h, left : left + w] = x
        (oh, ow), (kh, kw), (sh, sw), (dh, dw) = self.out, self.kernel, self.stride, self.dilation
        out = np.full((*x.shape[:-2], oh, ow), -np.inf, np.float32)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                out = np.maximum(out, padded[..., rows, cols])  # NaN propagates
        return np.maximum(out, 0.0) if self.relu else out

    def windows(self, x: GraphTensor) -> GraphTensor:
        """x's windows (..., OH, OW, KH, KW) over its zero-padded copy, as `max_pool`
        builds them (`nn/conv.sliding_windows`)."""
        from luminal.nn.conv import sliding_windows

        (h, w), (ph, pw), (top, left) = self.size, self.padded, self.pads
        pads = [(top, ph - top - h), (left, pw - left - w)]
        return sliding_windows(x, self.kernel, self.stride, self.dilation, pads)

    def vjp(self, ctx: VJPContext) -> tuple[GraphTensor | None]:
        """The gradient the replaced nodes' own rules give (`training/autograd.py`: each
        max shares its gradient among tied maxima, a ReLU at 0 half), so a graph compiled
        once differentiates as it did unfused: the windows are rebuilt from the input and
        the gradient goes back through their views."""
        from luminal.training.autograd_views import view_adjoint

        x = ctx.input(0)
        windows = self.windows(x)
        row_peaks = windows.max(-1)
        peaks = row_peaks.max(-1)
        grad = ctx.grad
        if self.relu:  # relu = max(peak, 0): a zero peak ties with the padded zero
            grad = grad * (peaks.gt(0.0) + 0.5 * _ties(peaks, 0.0))
        rows = _ties(row_peaks, peaks.unsqueeze(-1))
        grad_rows = rows * (grad / rows.sum(-1)).unsqueeze(-1)
        cols = _ties(windows, row_peaks.unsqueeze(-1))
        grad_windows = cols * (grad_rows / cols.sum(-1)).unsqueeze(-1)
        grad_read = view_adjoint(grad_windows, windows.view)
        if windows.node_id == x.node_id:  # no padding: the windows read x itself
            return (grad_read,)
        copy = windows.graph.nodes[windows.node_id]  # the padded copy
        return (view_adjoint(grad_read, copy.inputs[0].view),)

    def source(self, function: str) -> str:
        """The C kernel (`luminal/custom.py`'s ABI): per plane and output row, the max over
        the window's rows, valid ones only, into a row buffer with the padding's zeros at
        both ends, then the max over each window's columns of that row."""
        (h, w), (_, pw), (top, left) = self.size, self.padded, self.pads
        (oh, ow), (kh, kw), (sh, sw), (dh, dw) = self.out, self.kernel, self.stride, self.dilation
        relu = "acc = lm_pool_max(acc, 0.0f);" if self.relu else ""
        return f"""
static inline float lm_pool_max(float a, float b) {{
    const float m = b > a ? b : a;
    return b != b ? b : m;
}}
void {function}(float* restrict out, const float* restrict x, const long long* numel) {{
    const long long planes = numel[1] / {h * w}LL;
    #pragma omp parallel for if (numel[0] > 16384)
    for (long long plane = 0; plane < planes; plane++) {{
        const float* restrict src = x + plane * {h * w}LL;
        float* restrict dst = out + plane * {oh * ow}LL;
        float row[{pw}];
        for (int c = 0; c < {pw}; c++) row[c] = 0.0f;
        for (int r = 0; r < {oh}; r++) {{
            float* restrict inner = row + {left};
            for (int i = 0; i < {kh}; i++) {{
                const int y = r * {sh} + i * {dh} - {top};
                const float* restrict line = src + (long long)(y < 0 ? 0 : y) * {w};
                if (y < 0 || y >= {h}) {{
                    if (i == 0) for (int c = 0; c < {w}; c++) inner[c] = 0.0f;
                    else for (int c = 0; c < {w}; c++) inner[c] = lm_pool_max(inner[c], 0.0f);
                }} else if (i == 0) {{
                    for (int c = 0; c < {w}; c++) inner[c] = line[c];
                }} else {{
                    for (int c = 0; c < {w}; c++) inner[c] = lm_pool_max(inner[c], line[c]);
                }}
            }}
            float* restrict o = dst + (long long)r * {ow};
            for (int c = 0; c < {ow}; c++) {{
                float acc = row[c * {sw}];
                for (int j = 1; j < {kw}; j++) acc = lm_pool_max(acc, row[c * {sw} + j * {dw}]);
                {relu}
                o[c] = acc;
            }}
        }}
    }}
}}
"""


def _ties(a: GraphTensor, b: GraphTensor | float) -> GraphTensor:
    """1 where a equals b (broadcast), else 0."""
    return 1.0 - (a.lt(b) + a.gt(b))


@dataclass
class Match:
    pool: PaddedMaxPool
    source: Edge  # the unpadded input, read contiguously
    replaced: list[int]  # the copy, the two reductions, the ReLU when there is one


def _padding(edge: Edge, source: Node) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(top, left), (padded height, width) when `edge` reads `source`'s contiguous buffer
    zero-padded in its last two dims only, else None."""
    view = edge.view
    shape = tuple(source.shape)
    if len(view.shape) != len(shape) or len(shape) < 3 or view.source_shape != shape:
        return None
    if tuple(view.strides) != contiguous_strides(shape) or view.mask is None:
        return None
    lead = len(shape) - 2
    if any(view.shape[a] != shape[a] or view.mask[a] != (sym(0), shape[a]) for a in range(lead)):
        return None
    size, padded = known_ints(shape[lead:]), known_ints(view.shape[lead:])
    ranges = known_ints(tuple(e for pair in view.mask[lead:] for e in pair))
    if size is None or padded is None or ranges is None or padded[1] > MAX_ROW:
        return None
    top, bottom, left, right = ranges
    if bottom - top != size[0] or right - left != size[1] or min(top, left) < 0:
        return None
    if bottom > padded[0] or right > padded[1] or view.offset != sym(-(top * size[1] + left)):
        return None
    return (top, left), padded  # type: ignore[return-value]


def _windows(edge: Edge, padded: tuple[int, int], lead: int) -> tuple[tuple[int, ...], ...] | None:
    """(kernel, stride, dilation) when `edge` is the windows view (..., OH, OW, KH, KW)
    of a contiguous (..., PH, PW) buffer, else None."""
    view = edge.view
    if view.mask is not None or view.offset != sym(0) or len(view.shape) != lead + 4:
        return None
    if known_ints(view.source_shape[lead:]) != padded:
        return None
    outer = contiguous_strides(view.source_shape)
    if (
        tuple(view.strides[:lead]) != tuple(outer[:lead])
        or view.shape[:lead] != view.source_shape[:lead]
    ):
        return None
    dims, strides = known_ints(view.shape[lead:]), known_ints(view.strides[lead:])
    if dims is None or strides is None:
        return None
    oh, ow, kh, kw = dims
    row_stride, col_stride, row_step, col_step = strides
    width = padded[1]
    if row_stride % width or row_step % width or col_stride < 1 or row_step < 1:
        return None
    kernel, stride = (kh, kw), (row_stride // width, col_stride)
    dilation = (row_step // width, col_step)
    if min(*stride, *dilation) < 1:
        return None
    for p, o, k, s, d in zip(padded, (oh, ow), kernel, stride, dilation, strict=True):
        if (p - d * (k - 1) - 1) // s + 1 != o:
            return None
    return kernel, stride, dilation


def _relu_reading(graph: Graph, node: Node, readers: dict[int, set[int]]) -> Node | None:
    """The ReLU of `node` (`pattern.relu_edge`) when it is `node`'s only reader."""
    reading = readers.get(node.id, set())
    if len(reading) != 1:
        return None
    relu = graph.nodes[next(iter(reading))]
    edge = relu_edge(relu)
    return relu if edge is not None and edge.source == node.id else None


def match_max_pool(graph: Graph, node: Node, readers: dict[int, set[int]]) -> Match | None:
    """The padded pool whose column reduction is `node`, or None."""
    if not isinstance(node.op, ops.MaxReduce) or node.dtype != DType.float32:
        return None
    lead = len(node.shape) - 3  # node: (..., OH, OW, KH) reducing KW
    if lead < 1 or node.op.axis != lead + 3 or len(node.inputs) != 1:
        return None
    copy = graph.nodes[node.inputs[0].source]
    if not isinstance(copy.op, ops.Contiguous) or len(copy.inputs) != 1:
        return None
    source = graph.nodes[copy.inputs[0].source]
    if source.dtype != DType.float32:
        return None
    padding = _padding(copy.inputs[0], source)
    if padding is None:
        return None
    pads, padded = padding
    windows = _windows(node.inputs[0], padded, lead)
    reading = readers.get(node.id, set())
    if windows is None or len(reading) != 1:
        return None
    rows = graph.nodes[next(iter(reading))]
    if not isinstance(rows.op, ops.MaxReduce) or rows.op.axis != lead + 2:
        return None
    if not rows.inputs[0].view.is_identity():
        return None
    relu = _relu_reading(graph, rows, readers)
    size = known_ints(tuple(source.shape[-2:]))
    assert size is not None  # _padding checked it
    kernel, stride, dilation = windows
    pool = PaddedMaxPool(size, padded, pads, kernel, stride, dilation, relu is not None)  # type: ignore[arg-type]
    contiguous = ShapeTracker.contiguous(tuple(source.shape))
    replaced = [copy.id, node.id, rows.id] + ([relu.id] if relu is not None else [])
    return Match(pool, Edge(source.id, copy.inputs[0].output, contiguous), replaced)


def _function(pool: PaddedMaxPool) -> str:
    digest = hashlib.sha256(repr(pool).encode()).hexdigest()[:12]
    return f"lm_max_pool_{digest}"


def fuse_max_pools(graph: Graph) -> int:
    """Replace every padded max pool of `graph` that `match_max_pool` finds, and whose
    padded copy and row maxima nothing else reads, by one C kernel; returns how many."""
    readers = graph.readers()
    fused = 0
    for node in live_nodes(graph):
        match = match_max_pool(graph, node, readers)
        if match is None or not private(graph, readers, match.replaced):
            continue
        function = _function(match.pool)
        op = CustomKernel(function, match.pool.source(function), match.pool)
        replace_pattern(graph, op, [match.source], match.replaced, readers)
        fused += 1
    return fused


def unfuse_max_pools(graph: Graph) -> int:
    """Replace every fused pool by the nodes it stands for, built as `max_pool` builds them
    (for a lowering without its C kernel, such as the GPU's); returns how many."""
    from luminal.tensor import GraphTensor

    count = 0
    for node in [n for n in graph.nodes.values() if isinstance(n.op, CustomKernel)]:
        pool = node.op.reference
        if not isinstance(pool, PaddedMaxPool):
            continue
        (edge,) = node.inputs
        x = GraphTensor(graph, edge.source, edge.view, graph.nodes[edge.source].dtype)
        out = pool.windows(x).max(-1).max(-1)
        out = out.relu() if pool.relu else out
        graph.replace(node.id, out.node_id, out.view)
        count += 1
    return count

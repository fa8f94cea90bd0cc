"""Pooling layers (torch.nn.MaxPool*, AvgPool*, AdaptiveAvgPool*) built from views.

Average pooling reuses the convolution's `sliding_windows` (pad, then `pool_last_dim`
per spatial dim) and sums over the kernel dims; max pooling pools one spatial dim at a
time (separable: k + k comparisons per output for a k x k window, not k * k). Adaptive average
pooling is separable: along each spatial dim it either splits the dim and takes a mean
(when the size divides evenly) or multiplies by an averaging matrix built with `iota`
from PyTorch's start/end index formula, so uneven windows are averaged exactly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from luminal import ops
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.conv import IntOrTuple, ntuple, sliding_windows
from luminal.nn.layers import Stateless
from luminal.shape.expr import Expr, logical_and, sym, var
from luminal.tensor import GraphTensor


def _pool_geometry(
    x: GraphTensor,
    dims: int,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None,
    padding: IntOrTuple,
    dilation: IntOrTuple,
    ceil_mode: bool,
    op: str,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Checked (kernel, stride, dilation, padding, extra right padding for ceil_mode)."""
    if x.ndim not in (dims + 1, dims + 2):
        raise ShapeError(
            f"{op}: expected input (N, C, {dims} spatial dims) or (C, {dims} spatial dims), "
            f"got {x._shape_text()}"
        )
    kernel = ntuple(kernel_size, dims, "kernel_size", op)
    strides = kernel if stride is None else ntuple(stride, dims, "stride", op)
    dilations = ntuple(dilation, dims, "dilation", op)
    pads = ntuple(padding, dims, "padding", op, minimum=0)
    for k, d, p in zip(kernel, dilations, pads, strict=True):
        if p > (d * (k - 1) + 1) // 2:
            raise ShapeError(
                f"{op}: padding {pads} must be at most half of the (dilated) kernel "
                f"{kernel} with dilation {dilations}, as in PyTorch"
            )
    extra = []
    for axis in range(dims):
        k, s, d, p = kernel[axis], strides[axis], dilations[axis], pads[axis]
        size_expr = x.view.shape[x.ndim - dims + axis]
        size = size_expr.as_int()
        if size is not None and size + 2 * p < d * (k - 1) + 1:
            raise ShapeError(
                f"{op}: spatial dim {axis} of input {x._shape_text()} (padded to {size + 2 * p}) "
                f"is smaller than the window {d * (k - 1) + 1}"
            )
        if not ceil_mode:
            extra.append(0)
            continue
        if size is None:
            raise ShapeError(f"{op}: ceil_mode needs known spatial sizes, got {x._shape_text()}")
        span = size + 2 * p - d * (k - 1) - 1
        out = -(-span // s) + 1
        if (out - 1) * s >= size + p:  # the last window must start inside the input
            out -= 1
        extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
    return kernel, strides, dilations, pads, tuple(extra)


def max_pool(
    x: GraphTensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
    dims: int = 2,
    op: str = "max_pool",
) -> GraphTensor:
    """Max over sliding windows of the last `dims` dims (torch.nn.functional.max_pool*d).
    Padding reads -inf (clamped to the dtype's lowest finite value, same result for max).

    Separable: the max over a box is the max over its rows of each row's max, so each
    spatial dim is pooled on its own, last first (one reduction per dim over the previous
    one's output). A k x k window costs 2k comparisons per output instead of k * k, and
    each reduction runs along contiguous outputs. Windows where that saves no comparison
    (2 x 2, 1-d) are reduced over their kernel dims in place: a pass's row maxima would
    be one more buffer, and their gradient one more tie mask (LeNet-5's two 2 x 2 pools:
    0.15 ms more per training step, 1 thread)."""
    kernel, strides, dilations, pads, extra = _pool_geometry(
        x, dims, kernel_size, stride, padding, dilation, ceil_mode, op
    )
    padding_pairs = [(p, p + e) for p, e in zip(pads, extra, strict=True)]
    inner = relu_input(x)
    with x.graph.atomic():
        if inner is not None:  # max(relu(y)) = relu(max(y)) = relu(max(y, 0-padding))
            windows = sliding_windows(inner, kernel, strides, dilations, padding_pairs)
            return windows.max(tuple(range(x.ndim, x.ndim + dims))).relu()
        if math.prod(kernel) <= sum(kernel):
            windows = sliding_windows(x, kernel, strides, dilations, padding_pairs, -math.inf)
            return windows.max(tuple(range(x.ndim, x.ndim + dims)))
        if any(pads) or any(extra):
            x = x.pad([None] * (x.ndim - dims) + padding_pairs, -math.inf)
        lead = x.ndim - dims
        for i in reversed(range(dims)):
            axis, nd = lead + i, x.ndim
            to_last = [a for a in range(nd) if a != axis] + [axis]
            back = list(range(axis)) + [nd - 1] + list(range(axis, nd - 1))
            pooled = x.permute(to_last).pool_last_dim(kernel[i], strides[i], dilations[i])
            # the windows axis back in place before reducing the kernel axis: each
            # reduction's output is stored in x's own axis order (reduced and then
            # permuted, a 2-d pool's output was stored transposed, and the next layer
            # read it so: LeNet's conv2 im2col copy, flatten and pool gradients)
            x = pooled.permute([*back, nd]).max(nd)
        return x


def relu_input(x: GraphTensor) -> GraphTensor | None:
    """y when `x` is a whole relu(y) (`GraphTensor.relu`: a max over the pair (y, 0),
    y's view with one zero padded on a new last axis), else None.

    max_pool(relu(y)) is rewritten relu(max_pool(y)): relu is monotone, so the max of the
    relus is the relu of the max (NaN stays NaN: both maxima propagate it). Under the relu
    a padded 0 changes nothing (relu(max(S, 0)) = relu(max(S))), so the padding is the
    view's own zeros instead of the -inf fill, which is arithmetic (a copy of the padded
    input for overlapping windows to read). The relu and its gradient run on the pooled
    output: ResNet-18's stem wrote relu(conv + bias) into a -inf padded copy for the pool
    to read; LeNet-5's pool gradients compared against the relu's output. The windows are
    reduced over their kernel dims in place (not separably): one pass under the relu."""
    node = x.node
    if not isinstance(node.op, ops.MaxReduce) or not x.view.is_identity():
        return None
    edge = node.inputs[0]
    view, axis = edge.view, node.op.axis
    if axis != view.ndim - 1 or view.shape[axis] != 2 or view.mask is None:
        return None
    *outer, (lo, hi) = view.mask
    if (hi - lo) != 1 or any(
        a != 0 or b != d for (a, b), d in zip(outer, view.shape[:-1], strict=True)
    ):
        return None
    pair = GraphTensor(x.graph, edge.source, view, x.graph.nodes[edge.source].dtype)
    ranges = [(0, d, 1) for d in view.shape[:-1]] + [(lo, hi, 1)]
    return pair._with_view(view.slice(ranges)).squeeze(-1)


def avg_pool(
    x: GraphTensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: IntOrTuple = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    dims: int = 2,
    op: str = "avg_pool",
) -> GraphTensor:
    """Mean over sliding windows (torch.nn.functional.avg_pool*d). The divisor follows
    PyTorch: the window clipped to the padded input (count_include_pad=True) or to the
    input itself (False), or `divisor_override`."""
    kernel, strides, dilations, pads, extra = _pool_geometry(
        x, dims, kernel_size, stride, padding, 1, ceil_mode, op
    )
    if divisor_override is not None and (
        not isinstance(divisor_override, numbers.Integral) or divisor_override == 0
    ):
        raise ShapeError(f"{op}: divisor_override must be a non-zero int, got {divisor_override!r}")
    with x.graph.atomic():
        source = x if x.dtype.is_float else x.cast("float32")
        padding_pairs = [(p, p + e) for p, e in zip(pads, extra, strict=True)]
        windows = sliding_windows(source, kernel, strides, dilations, padding_pairs)
        sums = windows.sum(tuple(range(x.ndim, x.ndim + dims)))
        if divisor_override is not None:
            return sums / float(divisor_override)
        uneven = any(extra) or (not count_include_pad and any(pads))
        if not uneven:
            return sums / float(math.prod(kernel))
        counts = None
        lead = x.ndim - dims
        for axis in range(dims):
            count = _window_counts(
                x,
                lead + axis,
                kernel[axis],
                strides[axis],
                pads[axis],
                extra[axis],
                count_include_pad,
            )
            shape = [1] * dims
            shape[axis] = count.view.shape[0]
            count = count.reshape(tuple(shape))
            counts = count if counts is None else counts * count
        return sums / counts


def _window_counts(
    x: GraphTensor, axis: int, kernel: int, stride: int, pad: int, extra: int, include_pad: bool
) -> GraphTensor:
    """How many elements each window along `axis` averages: ones over the input (and over
    its padding when `include_pad`), zeros over the extra ceil_mode padding."""
    size = x.view.shape[axis]
    ones = x.graph.constant(1.0).expand((size + 2 * pad if include_pad else size,))
    before = 0 if include_pad else pad
    after = extra if include_pad else pad + extra
    return ones.pad([(before, after)]).pool_last_dim(kernel, stride).sum(-1)


def adaptive_avg_pool(
    x: GraphTensor, output_size: Any, dims: int = 2, op: str = "adaptive_avg_pool"
) -> GraphTensor:
    """torch.nn.functional.adaptive_avg_pool*d: output index i along a dim of size L
    averages input [floor(i*L/O), ceil((i+1)*L/O)). None in output_size keeps a dim."""
    if x.ndim not in (dims + 1, dims + 2):
        raise ShapeError(
            f"{op}: expected input (N, C, {dims} spatial dims) or (C, {dims} spatial dims), "
            f"got {x._shape_text()}"
        )
    if output_size is None or isinstance(output_size, numbers.Integral):
        sizes = (output_size,) * dims
    else:
        sizes = tuple(output_size)
    if len(sizes) != dims or not all(
        s is None or (isinstance(s, numbers.Integral) and s >= 1) for s in sizes
    ):
        raise ShapeError(
            f"{op}: output_size must be a positive int, None or {dims} of them, got {output_size!r}"
        )
    lead = x.ndim - dims
    with x.graph.atomic():
        result = x if x.dtype.is_float else x.cast("float32")
        matrices: dict[tuple[Expr, int], GraphTensor] = {}  # shared by equal dims
        for axis, out in enumerate(sizes):
            if out is not None:
                result = _adaptive_axis(result, lead + axis, int(out), matrices)
        return result


def _adaptive_axis(
    x: GraphTensor, axis: int, out: int, matrices: dict[tuple[Expr, int], GraphTensor]
) -> GraphTensor:
    """Adaptive average over one dim."""
    size = x.view.shape[axis]
    known = size.as_int()
    if known == out:
        return x
    if known is not None and known % out == 0:
        return x.split_dims(axis, known // out).mean(axis + 1)
    if (size, out) not in matrices:
        matrices[(size, out)] = _averaging_matrix(x.graph, size, out, x.dtype)
    return (x.transpose(axis, -1) @ matrices[(size, out)]).transpose(axis, -1)


def _averaging_matrix(graph: Graph, size: Expr, out: int, dtype: Any) -> GraphTensor:
    """(size, out) matrix whose column i holds 1/len over input window i, from iota."""
    z = var("z")
    j, i = z // out, z % out  # element (j, i) of a row-major (size, out) matrix
    start = (i * size) // out
    end = ((i + 1) * size + out - 1) // out
    inside = graph.iota(logical_and(j.ge(start), j.lt(end)), (size, sym(out))).cast(dtype)
    return inside / inside.sum(0, keepdim=True)


# ---------------------------------------------------------------------- modules
# Parameter-free, so the graph is optional: `MaxPool2d(2)` or `MaxPool2d(cx, 2)`.
class _MaxPoolNd(Stateless):
    dims = 0

    def setup(
        self,
        kernel_size: IntOrTuple,
        stride: IntOrTuple | None = None,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        name = type(self).__name__
        if return_indices:
            raise LuminalError(f"{name}: return_indices=True is not supported")
        self.kernel_size = ntuple(kernel_size, self.dims, "kernel_size", name)
        self.stride = (
            self.kernel_size if stride is None else ntuple(stride, self.dims, "stride", name)
        )
        self.padding = ntuple(padding, self.dims, "padding", name, minimum=0)
        self.dilation = ntuple(dilation, self.dims, "dilation", name)
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return max_pool(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.dims,
            type(self).__name__,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """torch.nn.MaxPool1d: input (N, C, L)."""

    dims = 1


class MaxPool2d(_MaxPoolNd):
    """torch.nn.MaxPool2d: input (N, C, H, W)."""

    dims = 2


class MaxPool3d(_MaxPoolNd):
    """torch.nn.MaxPool3d: input (N, C, D, H, W)."""

    dims = 3


class _AvgPoolNd(Stateless):
    dims = 0

    def setup(
        self,
        kernel_size: IntOrTuple,
        stride: IntOrTuple | None = None,
        padding: IntOrTuple = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        name = type(self).__name__
        self.kernel_size = ntuple(kernel_size, self.dims, "kernel_size", name)
        self.stride = (
            self.kernel_size if stride is None else ntuple(stride, self.dims, "stride", name)
        )
        self.padding = ntuple(padding, self.dims, "padding", name, minimum=0)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, x: GraphTensor) -> GraphTensor:
        return avg_pool(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
            self.dims,
            type(self).__name__,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """torch.nn.AvgPool1d: input (N, C, L)."""

    dims = 1


class AvgPool2d(_AvgPoolNd):
    """torch.nn.AvgPool2d: input (N, C, H, W)."""

    dims = 2


class AvgPool3d(_AvgPoolNd):
    """torch.nn.AvgPool3d: input (N, C, D, H, W)."""

    dims = 3


class _AdaptiveAvgPoolNd(Stateless):
    dims = 0

    def setup(self, output_size: int | Sequence[int | None] | None) -> None:
        self.output_size = output_size

    def forward(self, x: GraphTensor) -> GraphTensor:
        return adaptive_avg_pool(x, self.output_size, self.dims, type(self).__name__)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """torch.nn.AdaptiveAvgPool1d: input (N, C, L)."""

    dims = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """torch.nn.AdaptiveAvgPool2d: input (N, C, H, W)."""

    dims = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """torch.nn.AdaptiveAvgPool3d: input (N, C, D, H, W)."""

    dims = 3

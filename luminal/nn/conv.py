"""Convolutions (torch.nn.Conv1d/2d/3d) as sliding-window views plus one matmul.

The input is padded, each spatial dim is turned into (windows, kernel) by
`pool_last_dim` (a strided view, so overlapping windows cost nothing), the windows are
laid out as (taps, batch, positions) columns (one `Contiguous` copy: im2col, none for a
1x1 convolution of one image) and multiplied by the weight, (out, taps) @ (taps, batch *
positions) per group: one sgemm whatever the batch, the batch and positions being one
matrix dimension; the output is written as NCHW, each image's block of columns in
place. The graph has a fixed, small number of nodes whatever the image size: there are
no per-output-position ops.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.layers import fan_in_bound, uniform_init
from luminal.nn.module import Module
from luminal.nn.winograd import Transforms, applicable, pick, winograd_conv2d, worthwhile
from luminal.shape.expr import product, sym
from luminal.tensor import GraphTensor

IntOrTuple = int | Sequence[int]
Padding = int | Sequence[int] | str
ALGORITHMS = ("auto", "im2col", "winograd")


def ntuple(value: Any, dims: int, what: str, op: str, minimum: int = 1) -> tuple[int, ...]:
    """`value` (an int or a sequence of `dims` ints) as a tuple of `dims` ints >= minimum."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        values = (int(value),) * dims
    elif isinstance(value, Sequence) and not isinstance(value, str):
        values = tuple(value)
        if len(values) != dims or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values
        ):
            raise ShapeError(f"{op}: {what} must be an int or {dims} ints, got {value!r}")
        values = tuple(int(v) for v in values)
    else:
        raise ShapeError(f"{op}: {what} must be an int or {dims} ints, got {value!r}")
    if any(v < minimum for v in values):
        raise ShapeError(f"{op}: {what} must be >= {minimum}, got {value!r}")
    return values


def conv_padding(
    padding: Padding,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    op: str,
) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial dim. "same" splits the total as PyTorch does (the odd
    element goes after) and, as in PyTorch, needs stride 1."""
    dims = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * dims
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(
                    f"{op}: padding='same' needs stride 1 (as in PyTorch), got stride {stride}"
                )
            totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
            return tuple((t // 2, t - t // 2) for t in totals)
        raise ShapeError(
            f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}"
        )
    amounts = ntuple(padding, dims, "padding", op, minimum=0)
    return tuple((p, p) for p in amounts)


def sliding_windows(
    x: GraphTensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[tuple[Any, Any]],
    value: float = 0.0,
) -> GraphTensor:
    """Windows over the last len(kernel) dims: (..., *S) -> (..., *O, *kernel).

    Pads with `value`, then for each spatial dim, last first, moves it last, pools it
    with `pool_last_dim` and moves the window count back, appending the kernel dim at
    the end. Views only, except one copy when a padded dim is pooled: the last dim is
    pooled first, so that copy is the padded input in its own row-major order.
    """
    dims = len(kernel)
    lead = x.ndim - dims
    if any(before != 0 or after != 0 for before, after in padding):
        x = x.pad([None] * lead + list(padding), value)
    for i in reversed(range(dims)):
        axis = lead + i
        nd = x.ndim
        to_last = [a for a in range(nd) if a != axis] + [axis]
        pooled = x.permute(to_last).pool_last_dim(kernel[i], stride[i], dilation[i])
        back = list(range(axis)) + [nd - 1] + list(range(axis, nd - 1)) + [nd]
        x = pooled.permute(back)  # (..., O_i, ..., k_last, ..., k_i)
    kernel_axes = list(range(x.ndim - 1, x.ndim - dims - 1, -1))
    return x.permute(list(range(x.ndim - dims)) + kernel_axes)


def conv(
    x: GraphTensor,
    weight: GraphTensor,
    bias: GraphTensor | None = None,
    stride: IntOrTuple = 1,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    op: str = "conv",
    algorithm: str = "auto",
) -> GraphTensor:
    """N-d convolution (torch.nn.functional.conv1d/2d/3d): x (N, C, *S) or unbatched
    (C, *S), weight (out, C // groups, *kernel), bias (out,) or None. The number of
    spatial dims is weight.ndim - 2; the batch dim may be symbolic. `algorithm`: "im2col"
    (one matmul over sliding windows), "winograd" (3x3, stride 1, 2-D, groups 1 only) or
    "auto" (Winograd where `winograd.worthwhile`, else im2col)."""
    dims = weight.ndim - 2
    if dims < 1:
        raise ShapeError(
            f"{op}: weight must be (out_channels, in_channels/groups, *kernel), "
            f"got {weight._shape_text()}"
        )
    kernel = tuple(d.as_int() for d in weight.view.shape[2:])
    if any(k is None or k < 1 for k in kernel):
        raise ShapeError(f"{op}: kernel dims of weight {weight._shape_text()} must be known ints")
    kernel = tuple(int(k) for k in kernel)  # type: ignore[arg-type]
    stride_t = ntuple(stride, dims, "stride", op)
    dilation_t = ntuple(dilation, dims, "dilation", op)
    pads = conv_padding(padding, kernel, stride_t, dilation_t, op)
    if not isinstance(groups, numbers.Integral) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    unbatched = x.ndim == dims + 1
    if x.ndim not in (dims + 1, dims + 2):
        raise ShapeError(
            f"{op}: expected input (N, C, {dims} spatial dims) or (C, {dims} spatial dims), "
            f"got {x._shape_text()}"
        )
    out_channels = weight.view.shape[0].as_int()
    group_in = weight.view.shape[1].as_int()
    if out_channels is None or group_in is None:
        raise ShapeError(f"{op}: weight shape {weight._shape_text()} must be known")
    if out_channels % groups:
        raise ShapeError(f"{op}: out_channels {out_channels} is not divisible by groups {groups}")
    channels = x.view.shape[0 if unbatched else 1]
    if channels != group_in * groups:
        raise ShapeError(
            f"{op}: input {x._shape_text()} has {channels} channels, but weight "
            f"{weight._shape_text()} with groups={groups} expects {group_in * groups}"
        )
    if bias is not None and tuple(bias.view.shape) != (sym(out_channels),):
        raise ShapeError(f"{op}: bias must have shape ({out_channels},), got {bias._shape_text()}")
    for axis, (k, d, (before, after)) in enumerate(zip(kernel, dilation_t, pads, strict=True)):
        size = x.view.shape[x.ndim - dims + axis].as_int()
        if size is not None and size + before + after < d * (k - 1) + 1:
            raise ShapeError(
                f"{op}: spatial dim {axis} of input {x._shape_text()} (padded to "
                f"{size + before + after}) is smaller than the dilated kernel {d * (k - 1) + 1}"
            )
    transforms = _winograd_transforms(
        algorithm, x, weight, kernel, stride_t, dilation_t, pads, groups, op
    )

    with x.graph.atomic():
        if unbatched:
            x = x.unsqueeze(0)
        n = x.view.shape[0]
        if transforms is not None:
            out = winograd_conv2d(x, weight, pads, transforms)
            if bias is not None:
                out = out + bias.reshape((out_channels, 1, 1))
            return out.squeeze(0) if unbatched else out
        windows = sliding_windows(x, kernel, stride_t, dilation_t, pads)  # (N, C, *O, *k)
        out_sizes = tuple(windows.view.shape[2 : 2 + dims])
        taps = group_in * math.prod(kernel)
        windows = windows.reshape((n, groups, group_in) + out_sizes + kernel)
        order = (1, 2, *range(3 + dims, 3 + 2 * dims), 0, *range(3, 3 + dims))
        # im2col, channels first and the batch inside the matrix: (groups, taps, N,
        # positions), a view for a 1x1 convolution of one image, else one copy whose
        # inner loop runs along an image row; read as (N, groups, taps, positions) and
        # multiplied by the weight broadcast over N: one product per group whose columns
        # are (image, position) and whose output is already NCHW (the backend writes each
        # image's block of columns in place)
        positions = product(out_sizes)
        columns = windows.permute(order).reshape((groups, taps, n, positions))
        matrix = weight.reshape((1, groups, out_channels // groups, taps))
        out = matrix.matmul(columns.permute((2, 0, 1, 3)))  # (N, groups, out/groups, P)
        out = out.reshape((n, out_channels, *out_sizes))
        if bias is not None:
            out = out + bias.reshape((out_channels,) + (1,) * dims)
        return out.squeeze(0) if unbatched else out


def _winograd_transforms(
    algorithm: str,
    x: GraphTensor,
    weight: GraphTensor,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    groups: int,
    op: str,
) -> Transforms | None:
    """The Winograd transforms `conv` computes this convolution with, or None for im2col:
    as asked ("winograd" where it cannot apply is an error), or for "auto" where it
    applies and is worthwhile (`winograd.worthwhile`)."""
    if algorithm not in ALGORITHMS:
        raise LuminalError(f"{op}: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm == "im2col":
        return None
    spatial = tuple(x.view.shape[x.ndim - len(kernel) :])
    why = applicable(kernel, stride, dilation, groups, spatial, (x.dtype, weight.dtype))
    if why is not None:
        if algorithm == "winograd":
            raise ShapeError(
                f"{op}: algorithm='winograd' needs a float32 2-D 3x3 convolution with "
                f"stride 1, dilation 1 and groups 1 over known spatial sizes, but {why} "
                f"(input {x._shape_text()}, weight {weight._shape_text()})"
            )
        return None
    sizes = [
        int(s.as_int()) + before + after - 2  # type: ignore[operator]
        for s, (before, after) in zip(spatial, pads, strict=True)
    ]
    batch = x.view.shape[0].as_int() if x.ndim == len(kernel) + 2 else 1
    if algorithm == "winograd":
        return pick(sizes, batch)
    channels = int(x.view.shape[x.ndim - 3].as_int())  # type: ignore[arg-type]
    out_channels = int(weight.view.shape[0].as_int())  # type: ignore[arg-type]
    return worthwhile(channels, out_channels, sizes, batch)


def _weight_and_bias(
    module: Module, shape: tuple[int, ...], fan_in_channels: int, out_channels: int, bias: bool
) -> None:
    """PyTorch's default initialisation of a (transposed) convolution's weight and bias:
    uniform in +-1/sqrt(fan_in), fan_in = channels per group times the kernel's taps."""
    bound = fan_in_bound(fan_in_channels * math.prod(shape[2:]))
    module.param("weight", shape, lambda: uniform_init(shape, bound))
    module.bias = None
    if bias:
        module.param("bias", (out_channels,), lambda: uniform_init((out_channels,), bound))


class _ConvNd(Module):
    """Shared body of Conv1d/2d/3d: parameters `weight` (out, in/groups, *kernel) and
    `bias` (out,), PyTorch names and shapes."""

    dims = 0

    def __init__(
        self,
        graph: Graph,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: Padding = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        algorithm: str = "auto",
    ) -> None:
        super().__init__(graph)
        name = type(self).__name__
        if padding_mode != "zeros":
            raise LuminalError(
                f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}"
            )
        if algorithm not in ALGORITHMS:
            raise LuminalError(f"{name}: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        self.algorithm = algorithm
        if not isinstance(groups, numbers.Integral) or groups < 1:
            raise ShapeError(f"{name}: groups must be a positive int, got {groups!r}")
        if in_channels % groups or out_channels % groups:
            raise ShapeError(
                f"{name}: in_channels {in_channels} and out_channels {out_channels} must be "
                f"divisible by groups {groups}"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = ntuple(kernel_size, self.dims, "kernel_size", name)
        self.stride = ntuple(stride, self.dims, "stride", name)
        self.dilation = ntuple(dilation, self.dims, "dilation", name)
        conv_padding(padding, self.kernel_size, self.stride, self.dilation, name)  # validate
        self.padding = (
            padding if isinstance(padding, str) else ntuple(padding, self.dims, "padding", name, 0)
        )
        self.groups = groups
        if algorithm == "winograd":  # refuse now what the first call would refuse
            why = applicable(self.kernel_size, self.stride, self.dilation, groups, (), ())
            if why is not None:
                raise ShapeError(f"{name}: algorithm='winograd' cannot apply: {why}")
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        _weight_and_bias(self, shape, in_channels // groups, out_channels, bias)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return conv(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            op=type(self).__name__,
            algorithm=self.algorithm,
        )

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self.dims:
            text += f", padding={self.padding!r}"
        if self.dilation != (1,) * self.dims:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.algorithm != "auto":
            text += f", algorithm={self.algorithm!r}"
        return text


class Conv1d(_ConvNd):
    """torch.nn.Conv1d: input (N, C, L)."""

    dims = 1


class Conv2d(_ConvNd):
    """torch.nn.Conv2d: input (N, C, H, W)."""

    dims = 2


class Conv3d(_ConvNd):
    """torch.nn.Conv3d: input (N, C, D, H, W)."""

    dims = 3


# ---------------------------------------------------------------- transposed convolutions
def _transpose_geometry(
    x: GraphTensor, weight: GraphTensor, groups: int, op: str
) -> tuple[int, tuple[int, ...], int, int]:
    """Checked (dims, kernel, in_channels per group, out_channels per group)."""
    dims = weight.ndim - 2
    shape = tuple(d.as_int() for d in weight.view.shape)
    if dims < 1 or any(d is None or d < 1 for d in shape):
        raise ShapeError(
            f"{op}: weight must be (in_channels, out_channels/groups, *kernel) with known "
            f"sizes, got {weight._shape_text()}"
        )
    if not isinstance(groups, numbers.Integral) or groups < 1 or shape[0] % groups:
        raise ShapeError(f"{op}: groups {groups!r} must be a positive divisor of {shape[0]}")
    if x.ndim not in (dims + 1, dims + 2):
        raise ShapeError(
            f"{op}: expected input (N, C, {dims} spatial dims) or (C, {dims} spatial dims), "
            f"got {x._shape_text()}"
        )
    channels = x.view.shape[x.ndim - dims - 1]
    if channels != shape[0]:
        raise ShapeError(
            f"{op}: input {x._shape_text()} has {channels} channels, weight "
            f"{weight._shape_text()} expects {shape[0]}"
        )
    return dims, shape[2:], shape[0] // groups, shape[1]  # type: ignore[return-value]


def conv_transpose(
    x: GraphTensor,
    weight: GraphTensor,
    bias: GraphTensor | None = None,
    stride: IntOrTuple = 1,
    padding: IntOrTuple = 0,
    output_padding: IntOrTuple = 0,
    groups: int = 1,
    dilation: IntOrTuple = 1,
    op: str = "conv_transpose",
) -> GraphTensor:
    """torch.nn.functional.conv_transpose1d/2d/3d: x (N, C_in, *S) or (C_in, *S), weight
    (C_in, C_out // groups, *kernel). The adjoint of `conv` with the same weight: every
    input position is multiplied into a (C_out, *kernel) patch by one matmul, and the
    patches are added into place by the exact adjoint of the convolution's sliding-window
    view (overlaps summed), so no zeros are inserted and no kernel is flipped. Output size
    per dim: (S - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1."""
    dims, kernel, group_in, group_out = _transpose_geometry(x, weight, groups, op)
    strides = ntuple(stride, dims, "stride", op)
    dilations = ntuple(dilation, dims, "dilation", op)
    pads = ntuple(padding, dims, "padding", op, minimum=0)
    extra = ntuple(output_padding, dims, "output_padding", op, minimum=0)
    for o, s, d in zip(extra, strides, dilations, strict=True):
        if o >= max(s, d):
            raise ShapeError(
                f"{op}: output_padding {extra} must be smaller than stride {strides} or "
                f"dilation {dilations} in every dim, as in PyTorch"
            )
    out_channels = group_out * groups
    if bias is not None and tuple(bias.view.shape) != (sym(out_channels),):
        raise ShapeError(f"{op}: bias must have shape ({out_channels},), got {bias._shape_text()}")
    unbatched = x.ndim == dims + 1
    with x.graph.atomic():
        if unbatched:
            x = x.unsqueeze(0)
        n, sizes = x.view.shape[0], tuple(x.view.shape[2:])
        for size, k, s, d, p, o in zip(sizes, kernel, strides, dilations, pads, extra, strict=True):
            known = size.as_int()
            if known is not None and (known - 1) * s + d * (k - 1) + 1 + o - 2 * p < 1:
                raise ShapeError(f"{op}: input {x._shape_text()} gives an empty output")
        # (N, positions, groups, 1, C_in/groups) @ (groups, C_in/groups, C_out/groups * K)
        rows = x.reshape((n, groups, group_in, *sizes)).permute((0, *range(3, 3 + dims), 1, 2))
        rows = rows.reshape((n, product(sizes), groups, 1, group_in))
        patches = rows.matmul(weight.reshape((groups, group_in, group_out * math.prod(kernel))))
        patches = patches.reshape((n, *sizes, groups, group_out, *kernel))
        order = (0, dims + 1, dims + 2, *range(1, dims + 1), *range(dims + 3, 2 * dims + 3))
        patches = patches.permute(order).reshape((n, out_channels, *sizes, *kernel))
        out = _add_windows(patches, kernel, strides, dilations, pads, extra)
        if bias is not None:
            out = out + bias.reshape((out_channels,) + (1,) * dims)
        return out.squeeze(0) if unbatched else out


def _add_windows(
    patches: GraphTensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    extra: Sequence[int],
) -> GraphTensor:
    """(N, C, *windows, *kernel) -> (N, C, *out): patch element (w, k) added at position
    w * stride + k * dilation - padding of each dim (the adjoint of `sliding_windows`),
    dim by dim from the last, with `extra` (output_padding) zeros after the end."""
    from luminal.shape.tracker import ShapeTracker
    from luminal.training.autograd_views import view_adjoint

    dims = len(kernel)
    t = patches
    for axis in reversed(range(dims)):
        k, s, d = kernel[axis], strides[axis], dilations[axis]
        nd = t.ndim  # (N, C, *spatial, k_0..k_axis): window axis 2 + axis, kernel last
        window_axis = 2 + axis
        to_end = [a for a in range(nd - 1) if a != window_axis] + [window_axis, nd - 1]
        t = t.permute(to_end)
        windows = t.view.shape[-2]
        length = (windows - 1) * s + d * (k - 1) + 1
        pooled = ShapeTracker.contiguous((*t.view.shape[:-2], length)).pool_last_dim(k, s, d)
        t = view_adjoint(t, pooled)  # (..., length), overlaps summed
        back = list(range(window_axis)) + [nd - 2] + list(range(window_axis, nd - 2))
        t = t.permute(back)
        pad, more = pads[axis], extra[axis]
        if more:
            t = t.pad([None] * window_axis + [(0, more)] + [None] * (t.ndim - window_axis - 1))
        if pad:
            ranges = [None] * t.ndim
            ranges[window_axis] = (pad, length + more - pad)
            t = t.slice(ranges)
    return t


class _ConvTransposeNd(Module):
    """Shared body of ConvTranspose1d/2d/3d: `weight` (in, out/groups, *kernel) and `bias`
    (out,), PyTorch names, shapes and initialisation bounds."""

    dims = 0

    def __init__(
        self,
        graph: Graph,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        output_padding: IntOrTuple = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: IntOrTuple = 1,
        padding_mode: str = "zeros",
    ) -> None:
        super().__init__(graph)
        name = type(self).__name__
        if padding_mode != "zeros":
            raise LuminalError(f"{name}: only padding_mode='zeros' is supported (as PyTorch)")
        if not isinstance(groups, numbers.Integral) or groups < 1:
            raise ShapeError(f"{name}: groups must be a positive int, got {groups!r}")
        if in_channels % groups or out_channels % groups:
            raise ShapeError(
                f"{name}: in_channels {in_channels} and out_channels {out_channels} must be "
                f"divisible by groups {groups}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = ntuple(kernel_size, self.dims, "kernel_size", name)
        self.stride = ntuple(stride, self.dims, "stride", name)
        self.padding = ntuple(padding, self.dims, "padding", name, minimum=0)
        self.output_padding = ntuple(output_padding, self.dims, "output_padding", name, 0)
        self.dilation = ntuple(dilation, self.dims, "dilation", name)
        shape = (in_channels, out_channels // groups, *self.kernel_size)
        _weight_and_bias(self, shape, out_channels // groups, out_channels, bias)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return conv_transpose(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
            op=type(self).__name__,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, "
            f"output_padding={self.output_padding}, groups={self.groups}, "
            f"dilation={self.dilation}, bias={self.bias is not None}"
        )


class ConvTranspose1d(_ConvTransposeNd):
    """torch.nn.ConvTranspose1d: input (N, C, L)."""

    dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """torch.nn.ConvTranspose2d: input (N, C, H, W)."""

    dims = 2


class ConvTranspose3d(_ConvTransposeNd):
    """torch.nn.ConvTranspose3d: input (N, C, D, H, W)."""

    dims = 3

"""DFT, STFT and MelWeightMatrix. A DFT of a known length is a matrix product: the
cos/sin tables are computed at load (float64, rounded once to float32), and the real
and imaginary parts (ONNX's trailing dim of 1 or 2) are multiplied by them. O(n^2)
work instead of an FFT's O(n log n), fine for the frame lengths models use."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from luminal.dtype import float32
from luminal.hl.combine import concat
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import floor, select
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _tables(used: int, length: int, bins: int, inverse: bool, real_out: bool) -> np.ndarray:
    """(4, used, bins) float32: how input element n feeds output k, as
    (re->re, im->re, re->im, im->im). Forward: e^{-2 pi i kn/L}; inverse: e^{+...}/L;
    `real_out` (inverse onesided, numpy's irfft): the used bins are half a Hermitian
    spectrum, each inner bin counted twice, only the real part produced."""
    n = np.arange(used)[:, None]
    k = np.arange(bins)[None, :]
    angle = 2 * np.pi * ((n * k) % length) / length
    cos, sin = np.cos(angle), np.sin(angle)
    if real_out:  # input index n is a frequency, output k a time step
        weight = np.where((n == 0) | ((length % 2 == 0) & (n == length // 2)), 1.0, 2.0)
        return np.stack([weight * cos, -weight * sin, 0 * cos, 0 * cos]) / length
    if inverse:
        return np.stack([cos, -sin, sin, cos]) / length
    return np.stack([cos, sin, -sin, cos])


def dft_last(
    ctx: NodeContext, x: GraphTensor, length: int, inverse: bool, onesided: bool
) -> GraphTensor:
    """The DFT along the second-to-last dim of x (..., n, 1 or 2): (..., bins, 2), or
    (..., length, 1) for an inverse onesided transform."""
    n, parts = int(x.view.shape[-2].as_int()), int(x.view.shape[-1].as_int())
    real_out = inverse and onesided
    bins = length if inverse else (length // 2 + 1 if onesided else length)
    used = min(n, length // 2 + 1 if real_out else length)
    x = x.slice([None] * (x.ndim - 2) + [(0, used), None]).cast(float32)
    tables = _tables(used, length, bins, inverse, real_out).astype(np.float32)
    name = ctx.node.output[0]

    def part(i: int) -> GraphTensor:
        return x.slice([None] * (x.ndim - 1) + [(i, i + 1)]).reshape(tuple(x.view.shape[:-1]))

    def table(i: int) -> GraphTensor:
        return ctx.lift(tables[i], f"{name}_dft_{i}")

    real = part(0).matmul(table(0))
    imag = part(0).matmul(table(2))
    if parts == 2:
        real = real + part(1).matmul(table(1))
        imag = imag + part(1).matmul(table(3))
    if real_out:
        return real.unsqueeze(-1)
    return concat([real.unsqueeze(-1), imag.unsqueeze(-1)], -1)


def _dft(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.opset >= 20:
        axis = int(ctx.static_ints(2, "axis")[0]) if ctx.has(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis %= x.ndim
    if axis == x.ndim - 1:
        raise ctx.invalid("axis is the trailing real/imaginary dim")
    if ctx.has(1):
        length = int(ctx.static_ints(1, "dft_length")[0])
    else:
        size = int(x.view.shape[axis].as_int())
        length = 2 * (size - 1) if inverse and onesided else size
    order = [d for d in range(x.ndim - 1) if d != axis] + [axis, x.ndim - 1]
    y = dft_last(ctx, x.permute(order), length, inverse, onesided)
    back = [order.index(d) for d in range(x.ndim)]
    return y.permute(back).cast(x.dtype)


def _stft(ctx: NodeContext) -> GraphTensor:
    """Frames of the signal (a gather of rows hop * f + t), windowed, each one DFT."""
    x = ctx.tensor(0)
    step = int(ctx.static_ints(1, "frame_step")[0])
    window = ctx.optional(2)
    if ctx.has(3):
        length = int(ctx.static_ints(3, "frame_length")[0])
    elif window is not None:
        length = int(window.view.shape[0].as_int())
    else:
        raise ctx.invalid("needs a window or a frame_length")
    onesided = bool(ctx.attr("onesided", 1))
    size = int(x.view.shape[1].as_int())
    frames = 1 + (size - length) // step
    rows = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    picked = x.permute((1, 0, 2)).gather(ctx.lift(rows.astype(np.int32), "stft_rows"))
    picked = picked.permute((2, 0, 1, 3))  # (batch, frames, length, parts)
    if window is not None:
        picked = picked * window.cast(picked.dtype).reshape((length, 1))
    return dft_last(ctx, picked, length, False, onesided).cast(x.dtype)


def _hertz_to_mel(hertz: GraphTensor) -> GraphTensor:
    return (hertz / 700.0 + 1.0).log() * (2595.0 / math.log(10))


def _mel_weight_matrix(ctx: NodeContext) -> GraphTensor:
    """The reference's triangular filters, built elementwise over (bin j, filter i):
    the band edges are whole bins ((dft_length + 1) * f // sample_rate), so the
    sample rate and band limits may be run-time values; the two sizes must be known."""
    mels = int(ctx.static_ints(0, "num_mel_bins")[0])
    length = int(ctx.static_ints(1, "dft_length")[0])
    rate = ctx.tensor(2).cast(float32).reshape(())
    low = _hertz_to_mel(ctx.tensor(3).cast(float32).reshape(()))
    high = _hertz_to_mel(ctx.tensor(4).cast(float32).reshape(()))
    steps = ctx.graph.arange(mels + 2).cast(float32)
    mel = steps * ((high - low) / float(mels + 2)) + low
    hertz = ((mel * (math.log(10) / 2595.0)).exp() - 1.0) * 700.0
    edges = floor(hertz * float(length + 1) / rate)  # (mels + 2,)

    def edge(offset: int) -> GraphTensor:
        return edges.slice([(offset, offset + mels)]).reshape((1, mels))

    left, center, right = edge(0), edge(1), edge(2)
    j = ctx.graph.arange(length // 2 + 1).cast(float32).reshape((-1, 1))
    rising_span, falling_span = center - left, right - center
    rising = (j - left) / rising_span.maximum(1.0)
    rising = select(j.ge(left) * j.le(center), rising, j * 0.0)
    rising = select(rising_span.eq(0.0), j.eq(center).cast(float32), rising)
    falling = (right - j) / falling_span.maximum(1.0)
    in_fall = (j.ge(center) * j.lt(right)).cast(float32) * falling_span.gt(0.0).cast(float32)
    out = select(in_fall.gt(0.5), falling, rising)
    kind = ctx.attr("output_datatype", 1)
    return out.cast(dtypes.luminal_dtype(kind))


RULES: dict[str, Rule] = {
    "DFT": _dft,
    "STFT": _stft,
    "MelWeightMatrix": _mel_weight_matrix,
}

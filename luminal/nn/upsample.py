"""Upsample and interpolate (torch.nn.Upsample, torch.nn.functional.interpolate).

Interpolation is separable: each spatial dim is resampled on its own. Nearest by an
integer factor repeats every element (a broadcast and a reshape, symbolic sizes
allowed). Every other case multiplies the dim by a (out, in) matrix computed with
numpy when the graph is built, with PyTorch's float32 index formulas (source index
`scale * (o + 0.5) - 0.5` clamped at 0, or `o * (in - 1) / (out - 1)` with
align_corners; `floor(o * scale)` for nearest), so the result and its gradient
are ordinary matmuls: one-hot rows for nearest, two weights per row for linear. Those
sizes must be known when building. (The matrix is dense: fine for feature maps, costly
for very large images.)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from luminal.errors import LuminalError, ShapeError
from luminal.nn.layers import Stateless
from luminal.tensor import GraphTensor

LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
MODES = ("nearest", *LINEAR_MODES)


def interpolate(
    x: GraphTensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> GraphTensor:
    """torch.nn.functional.interpolate for (N, C, *spatial) inputs: modes "nearest",
    "linear" (3-D input), "bilinear" (4-D), "trilinear" (5-D)."""
    dims = x.ndim - 2
    op = f"interpolate(mode={mode!r})"
    if mode not in MODES:
        raise LuminalError(f"interpolate: mode must be one of {MODES}, got {mode!r}")
    if dims < 1:
        raise ShapeError(f"{op}: expected input (N, C, *spatial), got {x._shape_text()}")
    if mode in LINEAR_MODES and LINEAR_MODES[mode] != dims:
        raise ShapeError(f"{op}: needs a {LINEAR_MODES[mode] + 2}-D input, got {x._shape_text()}")
    if mode == "nearest" and align_corners is not None:
        raise LuminalError(f"{op}: align_corners only applies to linear modes")
    targets = _output_sizes(x, dims, size, scale_factor, recompute_scale_factor, op)
    with x.graph.atomic():  # an error on a later dim removes what earlier dims added
        repeats: dict[int, int] = {}
        for axis, (out, scale) in enumerate(targets):
            x = _resample(x, 2 + axis, out, scale, mode, bool(align_corners), op, repeats)
        return _repeat(x, repeats)


def _output_sizes(
    x: GraphTensor,
    dims: int,
    size: int | Sequence[int] | None,
    scale_factor: float | Sequence[float] | None,
    recompute: bool | None,
    op: str,
) -> list[tuple[object, float | None]]:
    """Per spatial dim (output size, the scale PyTorch uses or None to derive it)."""
    if (size is None) == (scale_factor is None):
        raise LuminalError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        sizes = _per_dim(size, dims, "size", op)
        return [(int(s), None) for s in sizes]
    factors = _per_dim(scale_factor, dims, "scale_factor", op)
    out = []
    for axis, factor in enumerate(factors):
        if not factor > 0:
            raise ShapeError(f"{op}: scale_factor must be positive, got {scale_factor!r}")
        dim = x.view.shape[2 + axis]
        known = dim.as_int()
        if known is None:
            if float(factor) != int(factor):
                raise ShapeError(
                    f"{op}: a non-integer scale_factor needs known spatial sizes, got "
                    f"{x._shape_text()}"
                )
            out.append((dim * int(factor), None))
            continue
        scale = None if recompute else 1.0 / float(factor)
        out.append((math.floor(known * float(factor)), scale))
    return out


def _per_dim(value: object, dims: int, what: str, op: str) -> tuple:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return (value,) * dims
    values = tuple(value)  # type: ignore[arg-type]
    if len(values) != dims:
        raise ShapeError(f"{op}: {what} must have {dims} entries, got {value!r}")
    return values


def _resample(
    x: GraphTensor,
    axis: int,
    out: object,
    scale: float | None,
    mode: str,
    corners: bool,
    op: str,
    repeats: dict[int, int],
) -> GraphTensor:
    """Resample dim `axis` of x to `out` elements; a nearest resampling by an integer
    factor is only recorded in `repeats` (the caller repeats all such dims at once:
    resampling one dim commutes with repeating another)."""
    size = x.view.shape[axis].as_int()
    out_known = out if isinstance(out, int) else getattr(out, "as_int", lambda: None)()
    if out_known is not None and out_known < 1:
        raise ShapeError(f"{op}: output size {out} of dim {axis} must be positive")
    if size is None or out_known is None:
        factor = (out // x.view.shape[axis]).as_int()  # type: ignore[operator]
        if mode != "nearest" or factor is None:
            raise ShapeError(
                f"{op}: symbolic spatial sizes need mode 'nearest' with an integer "
                f"scale_factor, got {x._shape_text()}"
            )
        repeats[axis] = factor
        return x
    if size == out_known:
        return x
    matrix = (
        _nearest_matrix(size, out_known, scale)
        if mode == "nearest"
        else _linear_matrix(size, out_known, scale, corners)
    )
    if mode == "nearest":
        factor, rest = divmod(out_known, size)
        if rest == 0 and np.array_equal(matrix.argmax(1), np.arange(out_known) // factor):
            repeats[axis] = factor
            return x
    weights = x.graph.tensor(matrix.shape, name=f"interpolate.{mode}").set(matrix)
    moved = x.transpose(axis, -1)
    return (moved @ weights.T).transpose(axis, -1)


def _repeat(x: GraphTensor, factors: dict[int, int]) -> GraphTensor:
    """Each element repeated `factors[axis]` times along each of those dims (nearest,
    integer factors): one broadcast and one reshape for all dims, so a reader indexes the
    input directly (YOLOv8's upsample feeds a concatenation that reads x[.., h // 2,
    w // 2]); a reshape per dim needed a copy of the first dim's result."""
    factors = {axis: factor for axis, factor in factors.items() if factor != 1}
    if not factors:
        return x
    shape = x.view.shape
    spread = x
    for axis in sorted(factors, reverse=True):  # later dims first: earlier axes keep places
        spread = spread.unsqueeze(axis + 1).expand_dim(axis + 1, factors[axis])
    return spread.reshape(tuple(dim * factors.get(axis, 1) for axis, dim in enumerate(shape)))


def _scale(size: int, out: int, scale: float | None, corners: bool) -> np.float32:
    """PyTorch's area_pixel_compute_scale in float32."""
    if corners:
        return np.float32((size - 1) / (out - 1)) if out > 1 else np.float32(0)
    if scale is not None and scale > 0:
        return np.float32(scale)
    return np.float32(size) / np.float32(out)


def _nearest_matrix(size: int, out: int, scale: float | None) -> np.ndarray:
    """One-hot rows at min(floor(o * scale), size - 1) (PyTorch's "nearest")."""
    ratio = _scale(size, out, scale, False)
    index = np.floor(np.arange(out, dtype=np.float32) * ratio).astype(np.int64)
    if out == 2 * size:
        index = np.arange(out) >> 1
    matrix = np.zeros((out, size), np.float32)
    matrix[np.arange(out), np.minimum(index, size - 1)] = 1.0
    return matrix


def _linear_matrix(size: int, out: int, scale: float | None, corners: bool) -> np.ndarray:
    """Two weights per row: PyTorch's source index and lambdas, in float32."""
    ratio = _scale(size, out, scale, corners)
    o = np.arange(out, dtype=np.float32)
    if corners:
        source = ratio * o
    else:
        source = np.maximum(ratio * (o + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    low = np.minimum(np.floor(source).astype(np.int64), size - 1)
    high_weight = np.clip(source - low.astype(np.float32), 0, 1).astype(np.float32)
    high = low + (low < size - 1)
    matrix = np.zeros((out, size), np.float32)
    rows = np.arange(out)
    np.add.at(matrix, (rows, low), np.float32(1) - high_weight)
    np.add.at(matrix, (rows, high), high_weight)
    return matrix


class Upsample(Stateless):
    """torch.nn.Upsample(size=None, scale_factor=None, mode="nearest", align_corners=None)."""

    def setup(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        if mode not in MODES:
            raise LuminalError(f"Upsample: mode must be one of {MODES}, got {mode!r}")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: GraphTensor) -> GraphTensor:
        return interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"

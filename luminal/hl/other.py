"""Scans, triangular masks, and debugging ops (print, diff, graph_break).

Scans over an axis of known size use a log-depth (Hillis-Steele) scan: ceil(log2 n)
steps, each combining the running value with itself shifted by 1, 2, 4, ... along the
axis. The shifted copy is a padded view, so each step is one or two nodes and the
work is O(n log n), exact for infinities (no `inf * 0`). Over a symbolic axis the
number of steps is unknown at build time, so each output reduces a (n, n) window of
the inputs gathered through an Iota index instead (O(n^2)).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np

from luminal import ops
from luminal.dtype import DType, float32, int32
from luminal.errors import ExecutionError, ShapeError
from luminal.hl.movement import normalize_axis
from luminal.shape.expr import var

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

# How a shifted copy fills the positions it shifted in: the identity of the combine
# ("zeros" for sum, "ones" for product) or, for idempotent max, the running value itself.
Fill = Literal["zeros", "ones", "self"]


class OtherOps:
    # ---------------------------------------------------------------- scans
    def cumsum(self: GraphTensor, axis: int = -1) -> GraphTensor:
        """Running sum along `axis` (torch.cumsum; bool and int32 give int32)."""
        x = self if self.dtype != DType.bool else self.cast(int32)
        return x._scan(axis, "cumsum", lambda a, b: a + b, "zeros")

    def cummax(self: GraphTensor, axis: int = -1) -> GraphTensor:
        """Running maximum along `axis` (torch.cummax(...).values; no indices)."""
        x = self if self.dtype != DType.bool else self.cast(int32)
        result = x._scan(axis, "cummax", lambda a, b: a.maximum(b), "self")
        return result if self.dtype != DType.bool else result.cast(DType.bool)

    def cumprod(self: GraphTensor, axis: int = -1) -> GraphTensor:
        """Running product along `axis` (torch.cumprod; bool and int32 give int32).
        Multiplies exactly over a known axis; over a symbolic one it goes through
        log2/exp2 (float accuracy, integers rounded to nearest)."""
        x = self if self.dtype != DType.bool else self.cast(int32)
        return x._scan(axis, "cumprod", lambda a, b: a * b, "ones")

    def _scan(
        self: GraphTensor,
        axis: int,
        name: str,
        combine: Callable[[GraphTensor, GraphTensor], GraphTensor],
        fill: Fill,
    ) -> GraphTensor:
        if self.ndim == 0:  # a scalar is its own running total (axis 0 or -1)
            normalize_axis(axis, 1, name, self._shape_text())
            return self
        a = normalize_axis(axis, self.ndim, name, self._shape_text())
        size = self.view.shape[a].as_int()
        if size is None:
            return self._window_scan(a, fill)
        result = self
        step = 1
        while step < size:
            result = combine(result, _shifted(result, a, step, size, fill))
            step *= 2
        return result

    def _window_scan(self: GraphTensor, axis: int, fill: Fill) -> GraphTensor:
        """Scan over a symbolic axis: gather the (n, n) lower-triangular windows of the
        axis (moved first), whose masked slots read an identity row, and reduce them."""
        n = self.view.shape[axis]
        order = (axis, *(d for d in range(self.ndim) if d != axis))
        front = self.permute(order)
        z = var("z")
        row, col = z // n, z % n
        keep = (col - row).lt(1)  # 1 where col <= row
        if fill == "self":  # max: masked slots re-read row 0, harmless for a max
            table, index = front, col * keep
        else:  # masked slots read row n, which holds the identity
            identity_row = (1 - keep) * (n - col)
            table, index = _append_identity_row(front, fill), col + identity_row
        windows = table.gather(self.graph.iota(index, (n, n)))
        if fill == "zeros":
            reduced = windows.sum(1)
        elif fill == "self":
            reduced = windows._reduce(ops.MaxReduce, 1, False, "cummax")  # n = 0: empty
        else:
            floats = windows if self.dtype.is_float else windows.cast(float32)
            reduced = floats.prod(1)
            if not self.dtype.is_float:
                reduced = _round_to_int(reduced, self.dtype)
        inverse = tuple(order.index(d) for d in range(self.ndim))
        return reduced.permute(inverse)

    # ---------------------------------------------------------------- triangles
    def tril(self: GraphTensor, diagonal: int = 0) -> GraphTensor:
        """Keep elements on and below the `diagonal`-th diagonal of the last two dims
        (torch.tril); the rest become exactly 0, even where the input is inf or NaN."""
        return self._triangle(diagonal, lower=True)

    def triu(self: GraphTensor, diagonal: int = 0) -> GraphTensor:
        """Keep elements on and above the `diagonal`-th diagonal (torch.triu)."""
        return self._triangle(diagonal, lower=False)

    def _triangle(self: GraphTensor, diagonal: int, lower: bool) -> GraphTensor:
        """Gather from the flattened tensor followed by a zero-padded copy of itself:
        kept elements read their own position z, dropped ones read z + N (a zero).
        A select, not a multiply by a 0/1 mask, so inf and NaN never leak as NaN."""
        name = "tril" if lower else "triu"
        if self.ndim < 2:
            raise ShapeError(f"{name}: needs at least 2 dims, got shape {self._shape_text()}")
        if not isinstance(diagonal, int) or isinstance(diagonal, bool):
            raise ShapeError(f"{name}: diagonal must be an int, got {diagonal!r}")
        rows, cols = self.view.shape[-2], self.view.shape[-1]
        total = self.view.n_elements()
        if total.as_int() == 0:
            return self
        z = var("z")
        offset = (z % cols) - (z // cols) % rows  # column - row
        keep = (offset - diagonal).lt(1) if lower else (offset - diagonal).ge(0)
        index = z + total * (1 - keep)
        flat = self.reshape((total,))
        table = flat.pad(((0, total),))
        picked = table.gather(self.graph.iota(index, (total,)))
        return picked.reshape(self.view.shape)

    # ---------------------------------------------------------------- debugging
    def print(self: GraphTensor, message: str = "") -> GraphTensor:
        """Print `message`, shape, dtype and value whenever the graph executes.
        Returns `self` unchanged so calls chain; the print runs as a side effect."""
        header = f"{message}: " if message else ""
        dtype = self.dtype

        def show(value: np.ndarray) -> np.ndarray:
            shown = np.asarray(value).astype(dtype.numpy)
            print(f"{header}shape {shown.shape} {dtype.value}\n{np.array2string(shown)}")
            return value

        self._side_effect(f"print {message!r}", show)
        return self

    def diff(self: GraphTensor, path: str, atol: float = 1e-5, rtol: float = 1e-3) -> GraphTensor:
        """Compare with a raw little-endian float32 file (e.g. `tensor.numpy().tofile`
        from a reference implementation) whenever the graph executes; print a report.
        A missing file or a different element count raises ExecutionError."""
        shape_text = self._shape_text()

        def compare(value: np.ndarray) -> np.ndarray:
            print(_diff_report(np.asarray(value), path, shape_text, atol, rtol))
            return value

        self._side_effect(f"diff {os.path.basename(path)!r}", compare)
        return self

    def _side_effect(self: GraphTensor, label: str, fn: Callable) -> GraphTensor:
        """A Function node that the executor always runs, even when nothing reads it."""
        function = ops.Function(label, fn, side_effect=True)
        return self.graph.add_node(function, [self], shape=self.view.shape, dtype=self.dtype)

    def graph_break(self: GraphTensor) -> GraphTensor:
        """Identity that splits the graph into separately searched regions."""
        return self.graph.add_node(ops.GraphBreak(), [self])


def _shifted(x: GraphTensor, axis: int, step: int, size: int, fill: Fill) -> GraphTensor:
    """x shifted by `step` along `axis` (x[i - step] at i); the first `step` positions
    hold the combine's identity (`fill`). Views and one Add, never a multiply."""
    from luminal.hl.combine import concat

    ranges: list = [None] * x.ndim
    ranges[axis] = (0, size - step)
    head = x.slice(ranges)
    if fill == "zeros":
        padding: list = [None] * x.ndim
        padding[axis] = (step, 0)
        return head.pad(padding)
    if fill == "self":
        ranges[axis] = (0, step)
        return concat([x.slice(ranges), head], axis)
    shape = list(x.view.shape)
    shape[axis] = step
    ones = x.graph.constant(1, x.dtype).expand(tuple(shape))
    return concat([ones, head], axis)


def _append_identity_row(x: GraphTensor, fill: Fill) -> GraphTensor:
    """x with one more row along axis 0 holding 0 (a free padded view) or 1."""
    if fill == "zeros":
        return x.pad([(0, 1)] + [None] * (x.ndim - 1))
    from luminal.hl.combine import concat

    ones = x.graph.constant(1, x.dtype).expand((1, *x.view.shape[1:]))
    return concat([x, ones], 0)


def _round_to_int(x: GraphTensor, dtype: DType) -> GraphTensor:
    """Round half away from zero, then cast (a plain cast truncates 14.9999 to 14)."""
    half = x.ge(0) - 0.5
    return (x + half).cast(dtype)


def _diff_report(value: np.ndarray, path: str, shape_text: str, atol: float, rtol: float) -> str:
    """Compare `value` with the float32 file at `path`; the text of the report."""
    if not os.path.exists(path):
        raise ExecutionError(f"diff: file {path!r} does not exist (tensor of shape {shape_text})")
    expected = np.fromfile(path, dtype="<f4")
    actual = value.astype(np.float32).reshape(-1)
    if expected.size != actual.size:
        raise ExecutionError(
            f"diff: file {path!r} holds {expected.size} float32 values, but the tensor of "
            f"shape {shape_text} has {actual.size} elements"
        )
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
        gaps = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bad = np.flatnonzero(~close)
    finite = gaps[np.isfinite(gaps)]
    max_gap = float(finite.max()) if finite.size else 0.0
    head = f"diff {path}: shape {value.shape}, {actual.size} elements"
    if bad.size == 0:
        return f"{head}: match (max abs diff {max_gap:.3g}, atol {atol}, rtol {rtol})"
    lines = [
        f"{head}: {bad.size} MISMATCHES (max abs diff {max_gap:.3g}, atol {atol}, rtol {rtol})"
    ]
    for flat in bad[:8]:
        index = np.unravel_index(flat, value.shape) if value.shape else ()
        lines.append(
            f"  at {tuple(int(i) for i in index)}: tensor {float(actual[flat]):.7g} "
            f"file {float(expected[flat]):.7g}"
        )
    if bad.size > 8:
        lines.append(f"  ... {bad.size - 8} more")
    return "\n".join(lines)

"""Reading a view of a contiguous numpy buffer without copying what need not be copied.

Broadcast dims stay stride-0 numpy views (never materialised); padding is the only
case that allocates, and then only the padded result, never a broadcast product.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.lib.stride_tricks import as_strided

from luminal.errors import ExecutionError
from luminal.shape.tracker import ConcreteView, ShapeTracker


def read_view(buffer: np.ndarray, view: ShapeTracker, dims: Mapping[str, int]) -> np.ndarray:
    """The logical array `view` describes over the row-major `buffer` (read-only)."""
    return read_concrete(buffer, view.evaluate(dict(dims)))


def read_concrete(buffer: np.ndarray, view: ConcreteView) -> np.ndarray:
    flat = buffer.reshape(-1)
    shape, strides, offset, mask = view.shape, view.strides, view.offset, view.mask
    if mask is None:
        return _strided(flat, shape, strides, offset)
    if any(hi <= lo for lo, hi in mask):
        return np.zeros(shape, dtype=buffer.dtype)
    # read the valid box, then place it into zeros; broadcast dims stay broadcast
    box_offset = offset + sum(lo * s for (lo, _), s in zip(mask, strides, strict=True))
    box_shape = tuple(hi - lo for lo, hi in mask)
    box = _strided(flat, box_shape, strides, box_offset)
    keep = [i for i, s in enumerate(strides) if not (s == 0 and mask[i] == (0, shape[i]))]
    out_shape = tuple(shape[i] if i in keep else 1 for i in range(len(shape)))
    out = np.zeros(out_shape, dtype=buffer.dtype)
    region = tuple(
        slice(mask[i][0], mask[i][1]) if i in keep else slice(0, 1) for i in range(len(shape))
    )
    source = tuple(slice(None) if i in keep else slice(0, 1) for i in range(len(shape)))
    out[region] = box[source]
    return np.broadcast_to(out, shape)


def _strided(
    flat: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> np.ndarray:
    if any(d == 0 for d in shape):
        return np.zeros(shape, dtype=flat.dtype)
    lowest = offset + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if s < 0)
    highest = offset + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if s > 0)
    if lowest < 0 or highest >= flat.size:
        raise ExecutionError(
            f"view reads elements {lowest}..{highest} of a buffer of {flat.size} "
            f"(shape {shape}, strides {strides}, offset {offset}): the view is out of bounds"
        )
    item = flat.itemsize
    base = flat[offset:]
    return as_strided(base, shape, tuple(s * item for s in strides), writeable=False)

"""SumReduce of a broadcast Mul, evaluated as a contraction (how matmul is spelled).

The product of two broadcast operands over (batch, m, n, k) would cost memory of order
m*n*k; here each axis is classified by which operand really varies along it, the
operands are reshaped to (batch, m, k) and (batch, k, n), and numpy's BLAS matmul does
the work, so memory stays of the order of the operands and the output.
"""

from __future__ import annotations

import numpy as np


def contract(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    """sum(a * b, axis) for equally shaped (possibly stride-0 broadcast) arrays."""
    ndim = a.ndim
    shape = a.shape
    if 0 in shape:  # an empty operand: every sum is over nothing (or there is none)
        out_shape = shape[:axis] + shape[axis + 1 :]
        return np.zeros(out_shape, np.result_type(a.dtype, b.dtype))

    def broadcast_in(x: np.ndarray, d: int) -> bool:
        return x.strides[d] == 0 or shape[d] == 1

    a_bc = [broadcast_in(a, d) for d in range(ndim)]
    b_bc = [broadcast_in(b, d) for d in range(ndim)]
    scale = 1
    if a_bc[axis] and b_bc[axis]:
        scale = shape[axis]
        k_axes: list[int] = []
    elif a_bc[axis]:
        b = b.sum(axis=axis, keepdims=True)
        b_bc[axis] = True
        k_axes = []
    elif b_bc[axis]:
        a = a.sum(axis=axis, keepdims=True)
        a_bc[axis] = True
        k_axes = []
    else:
        k_axes = [axis]
    out_axes = [d for d in range(ndim) if d != axis]
    batch = [d for d in out_axes if not a_bc[d] and not b_bc[d]]
    m_axes = [d for d in out_axes if not a_bc[d] and b_bc[d]]
    n_axes = [d for d in out_axes if a_bc[d] and not b_bc[d]]
    size = lambda axes: int(np.prod([shape[d] for d in axes])) if axes else 1  # noqa: E731
    a_sel = tuple(slice(None) if d in batch + m_axes + k_axes else 0 for d in range(ndim))
    b_sel = tuple(slice(None) if d in batch + n_axes + k_axes else 0 for d in range(ndim))
    a_kept = [d for d in range(ndim) if d in batch + m_axes + k_axes]
    b_kept = [d for d in range(ndim) if d in batch + n_axes + k_axes]
    a_core = np.transpose(a[a_sel], [a_kept.index(d) for d in batch + m_axes + k_axes])
    b_core = np.transpose(b[b_sel], [b_kept.index(d) for d in batch + k_axes + n_axes])
    a_mat = a_core.reshape(size(batch), size(m_axes), size(k_axes))
    b_mat = b_core.reshape(size(batch), size(k_axes), size(n_axes))
    with np.errstate(all="ignore"):  # inf * 0 is NaN, as in every other reference kernel
        product = np.matmul(a_mat, b_mat)
        if scale != 1:
            product = product * product.dtype.type(scale)
    grouped = product.reshape([shape[d] for d in batch + m_axes + n_axes])
    order = batch + m_axes + n_axes
    result = np.transpose(grouped, [order.index(d) for d in out_axes if d in order])
    full = [shape[d] for d in out_axes]
    expanded = result.reshape([shape[d] if d in order else 1 for d in out_axes])
    return np.broadcast_to(expanded, full)

"""What the packed-weight kernels compute, in numpy: the reference runtime's oracle.

`QuantMatmul` and `PackedRows` are the numpy sides of the C kernels in
luminal/quant/kernels (see common.h): frozen, so they hash and pickle with the graph
node they belong to. The matmul multiplies in float64 by the dequantised weights; with
quantized activations it first rounds them to 8 bits per block of 32 exactly as the C
does (same float32 operations, `rint` ties to even). The compiled kernels differ from
it only by float32 summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal.quant.formats import QK, block_format, dequantize

# Activation rows at or above which the float path (dequantise, then FMA) runs
PREFILL_ROWS = 8


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 q, float32 d) of float32 rows `x` (..., k): per block of 32,
    d = max|x| / 127 and q = rint(x / d), computed as the C kernels do."""
    blocks = np.asarray(x, np.float32).reshape(*x.shape[:-1], -1, QK)
    d = np.abs(blocks).max(axis=-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inverse[..., None]).astype(np.int8)
    return q.reshape(x.shape), d


def rounded_activations(x: np.ndarray) -> np.ndarray:
    """The float64 values the integer path multiplies with: d * q per block."""
    q, d = quantize_activations(x)
    blocks = q.reshape(*q.shape[:-1], -1, QK).astype(np.float64) * d[..., None]
    return blocks.reshape(x.shape)


@dataclass(frozen=True)
class QuantMatmul:
    """x (..., k) @ W.T for W (n, k) packed in `format` -> float32 (..., n)."""

    format: str
    n: int
    k: int
    quantized_activations: bool = False
    prefill_rows: int = PREFILL_ROWS

    def __call__(self, x: np.ndarray, packed: np.ndarray) -> np.ndarray:
        weight = dequantize(packed.reshape(-1).view(np.uint8), self.format, (self.n, self.k))
        rows = np.asarray(x, np.float32).reshape(-1, self.k)
        if self.quantized_activations and 0 < rows.shape[0] < self.prefill_rows:
            activations = rounded_activations(rows)
        else:
            activations = rows.astype(np.float64)
        out = activations @ weight.astype(np.float64).T
        return out.astype(np.float32).reshape(*x.shape[:-1], self.n)


@dataclass(frozen=True)
class PackedRows:
    """Packed rows (..., row_bytes) -> their float32 values (..., k)."""

    format: str
    k: int

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        fmt = block_format(self.format)
        lead = rows.shape[:-1]
        raw = rows.reshape(-1).view(np.uint8)
        values = dequantize(raw, fmt, (*lead, self.k) if lead else (1, self.k))
        return values.reshape(*lead, self.k)

"""What the packed-weight kernels compute, in numpy: the reference runtime's oracle.

`QuantMatmul` and `PackedRows` are the numpy sides of the C kernels in
luminal/quant/kernels (see common.h): frozen, so they hash and pickle with the graph
node they belong to. The matmul multiplies in float64 by the dequantised weights; on
the few-row (decode) path with integer activations (`activation_bits` 8 or 16), and on
the prefill path with `prefill_bits` 8 (Q8_0, Q4_0), it first rounds them per
block of 32 exactly as the C does (same float32 operations, `rint` ties to even, the
residual as one fused multiply-add). The compiled kernels differ from it
only by float32 summation order.
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
    q, d, _ = _levels(x, 8)
    return q.reshape(x.shape), d


def _levels(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(q1, d1, q2 or None) per block (..., blocks, 32): q1 = rint(x / d1); with 16 bits
    also q2 = rint(fma(-d1, q1, x) * (256 / d1)) clamped to [-127, 127] (common.h)."""
    blocks = np.asarray(x, np.float32).reshape(*x.shape[:-1], -1, QK)
    d = np.abs(blocks).max(axis=-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q1 = np.rint(blocks * inverse[..., None])
    if bits == 8:
        return q1.astype(np.int8), d, None
    # x - d1 q1 rounded once, as a fused multiply-add (exact in float64, then rounded)
    residual = (blocks.astype(np.float64) - d[..., None].astype(np.float64) * q1).astype(np.float32)
    scaled = residual * (inverse * np.float32(256))[..., None]
    q2 = np.clip(np.rint(scaled), -127, 127).astype(np.int8)
    return q1.astype(np.int8), d, q2


def rounded_activations(x: np.ndarray, bits: int = 8) -> np.ndarray:
    """The float64 values the integer path multiplies with: d1 q1 (+ d1 / 256 q2) per
    block; `bits` 32 gives x itself."""
    if bits == 32:
        return np.asarray(x, np.float64)
    q1, d, q2 = _levels(x, bits)
    values = q1.astype(np.float64) * d[..., None]
    if q2 is not None:
        values += q2.astype(np.float64) * (d.astype(np.float64) / 256)[..., None]
    return values.reshape(x.shape)


@dataclass(frozen=True)
class QuantMatmul:
    """x (..., k) @ W.T for W (n, k) packed in `format` -> float32 (..., n); fewer than
    `prefill_rows` rows use activations of `activation_bits` (8, 16 or 32: float), more
    those of `prefill_bits`."""

    format: str
    n: int
    k: int
    activation_bits: int = 32
    prefill_rows: int = PREFILL_ROWS
    prefill_bits: int = 32

    def __call__(self, x: np.ndarray, packed: np.ndarray) -> np.ndarray:
        weight = dequantize(packed.reshape(-1).view(np.uint8), self.format, (self.n, self.k))
        rows = np.asarray(x, np.float32).reshape(-1, self.k)
        few = rows.shape[0] < self.prefill_rows
        bits = self.activation_bits if few else self.prefill_bits
        out = rounded_activations(rows, bits) @ weight.astype(np.float64).T
        return out.astype(np.float32).reshape(*x.shape[:-1], self.n)

    @property
    def step_function(self) -> bool:
        """8-bit activations (llama.cpp's Q8 rounding) on either path: a one-ulp float
        difference in x can flip a rounding and move an output by ~1/127 of a block's
        largest term, so CPUCompiler's check runs this reference on the compiled
        program's own x (luminal/backends/cpu/verify.py). 16-bit rounding moves it by
        ~1/32512, inside the check's tolerance: compared end to end like any node."""
        return 8 in (self.activation_bits, self.prefill_bits)


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

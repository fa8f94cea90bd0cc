"""GGUF block formats (Q8_0, Q4_0, Q4_K, Q6_K): byte layouts, numpy dequantisation and
quantisation.

A quantized tensor is a sequence of fixed-size blocks in llama.cpp's byte layout, rows
of whole blocks, so a GGUF file's bytes are used in place. Dequantisation follows
`gguf.quants.dequantize` operation by operation in float32, so the two agree bit for
bit (tests/quant check it); what each byte means is written down here, next to it.

Quantisation: Q8_0 and Q4_0 match `gguf.quants.quantize` (llama.cpp's reference
quantisers) bit for bit. Q4_K and Q6_K, which the `gguf` package cannot write, use a
plain min/max fit per sub-block: valid blocks that llama.cpp reads, though its own
quantiser searches for slightly better scales.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from luminal.errors import DTypeError, ShapeError

QK = 32  # values per Q8_0 / Q4_0 block
QK_K = 256  # values per K-quant super-block
K_SCALE_BYTES = 12  # Q4_K's packed 6-bit scales and mins


@dataclass(frozen=True)
class BlockFormat:
    """One block format: `block_values` values stored in `block_bytes` bytes."""

    name: str
    ggml_type: GGMLQuantizationType
    block_values: int
    block_bytes: int
    dequantize_blocks: Callable[[np.ndarray], np.ndarray]  # (n, bytes) u8 -> (n, values) f32
    quantize_blocks: Callable[[np.ndarray], np.ndarray]  # (n, values) f32 -> (n, bytes) u8

    def row_bytes(self, length: int) -> int:
        """Bytes of one row of `length` values (ShapeError unless whole blocks)."""
        if length <= 0 or length % self.block_values:
            raise ShapeError(
                f"{self.name}: rows must be a positive multiple of {self.block_values} "
                f"values, got {length}"
            )
        return length // self.block_values * self.block_bytes

    def storage(self, length: int) -> tuple[str, int]:
        """(graph dtype, width) of a packed row of `length` values as a graph input:
        int32 words when the row is a whole number of them (gathers copy them exactly),
        else bool bytes."""
        size = self.row_bytes(length)
        return ("int32", size // 4) if size % 4 == 0 else ("bool", size)

    def as_storage(self, packed: np.ndarray, length: int) -> np.ndarray:
        """Packed bytes (rows, row_bytes) viewed in `storage`'s dtype, without a copy."""
        dtype, width = self.storage(length)
        rows = np.ascontiguousarray(packed).view(np.uint8).reshape(-1, self.row_bytes(length))
        return rows.view(np.int32 if dtype == "int32" else np.bool_).reshape(-1, width)

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.block_bytes / self.block_values


def _half(raw: np.ndarray) -> np.ndarray:
    """Two bytes per row as a float16 read into float32, shape (n, 1)."""
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _as_half_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).reshape(-1, 1).view(np.uint8)


# ---------------------------------------------------------------- Q8_0
def dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    """[d: f16][q: 32 x i8]; x = d * q."""
    d, q = _half(blocks[:, :2]), blocks[:, 2:].view(np.int8).astype(np.float32)
    return q * d


def _round_half_away(values: np.ndarray) -> np.ndarray:
    """C's roundf (ties away from zero), which llama.cpp's reference quantisers use."""
    magnitude = np.abs(values)
    floored = np.floor(magnitude)
    return np.sign(values) * (floored + np.floor(2 * (magnitude - floored)))


def _inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)


def quantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    q = _round_half_away(blocks * _inverse(d)).astype(np.int8).view(np.uint8)
    return np.concatenate([_as_half_bytes(d), q], axis=1)


# ---------------------------------------------------------------- Q4_0
def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """[d: f16][16 bytes]; the low nibbles are values 0..15, the high ones 16..31;
    x = d * (q - 8)."""
    d, packed = _half(blocks[:, :2]), blocks[:, 2:]
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def quantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    extreme = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None], axis=1)
    d = extreme / np.float32(-8)
    q = np.trunc(blocks * _inverse(d) + np.float32(8.5)).astype(np.uint8).clip(0, 15)
    packed = q[:, : QK // 2] | (q[:, QK // 2 :] << np.uint8(4))
    return np.concatenate([_as_half_bytes(d), packed], axis=1)


# ---------------------------------------------------------------- Q4_K
def q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit (scale, min) pairs of a Q4_K block from its 12 bytes: bytes 0..3
    hold scales 0..3 (low 6 bits), 4..7 mins 0..3, 8..11 the low nibbles of scales and
    mins 4..7, whose top two bits sit in the spare high bits of bytes 0..7."""
    low, mid, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & 0x3F, (high & 0x0F) | ((low >> 2) & 0x30)], axis=1)
    mins = np.concatenate([mid & 0x3F, (high >> 4) | ((mid >> 2) & 0x30)], axis=1)
    return scales, mins


def dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    """[d: f16][dmin: f16][12 bytes of scales/mins][128 bytes]: 8 sub-blocks of 32;
    byte chunk c holds sub-block 2c in its low nibbles and 2c+1 in its high ones;
    x = (d * scale_j) * q - dmin * min_j."""
    n = blocks.shape[0]
    d, dmin = _half(blocks[:, 0:2]), _half(blocks[:, 2:4])
    scales, mins = q4_k_scales(blocks[:, 4:16])
    scale = (d * scales.astype(np.float32)).reshape(n, 8, 1)
    offset = (dmin * mins.astype(np.float32)).reshape(n, 8, 1)
    chunks = blocks[:, 16:].reshape(n, 4, 1, 32)
    q = np.concatenate([chunks & 0x0F, chunks >> 4], axis=2).reshape(n, 8, 32)
    return (scale * q.astype(np.float32) - offset).reshape(n, QK_K)


def quantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sub = blocks.reshape(n, 8, 32)
    low = np.minimum(sub.min(axis=2), 0)  # llama.cpp's mins are never above zero
    step, lift = (sub.max(axis=2) - low) / 15, -low
    d = _f16_round(step.max(axis=1, keepdims=True) / 63)
    dmin = _f16_round(lift.max(axis=1, keepdims=True) / 63)
    scales = np.clip(np.rint(step * _inverse(d)), 0, 63).astype(np.uint8)
    mins = np.clip(np.rint(lift * _inverse(dmin)), 0, 63).astype(np.uint8)
    scale = (d * scales).reshape(n, 8, 1)
    offset = (dmin * mins).reshape(n, 8, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0, np.rint((sub + offset) / scale), 0)
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(n, 4, 2, 32)
    packed_q = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(n, 128)
    packed_scales = np.concatenate(
        [
            (scales[:, :4] & 0x3F) | ((scales[:, 4:] >> 4) << 6),
            (mins[:, :4] & 0x3F) | ((mins[:, 4:] >> 4) << 6),
            (scales[:, 4:] & 0x0F) | ((mins[:, 4:] & 0x0F) << 4),
        ],
        axis=1,
    ).astype(np.uint8)
    return np.concatenate([_as_half_bytes(d), _as_half_bytes(dmin), packed_scales, packed_q], 1)


def _f16_round(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).astype(np.float32)


# ---------------------------------------------------------------- Q6_K
def dequantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    """[ql: 128 bytes][qh: 64 bytes][16 x i8 scales][d: f16]: two halves of 128 values;
    in half h, value 32g + l (g = 0..3) has its low 4 bits in byte ql[64h + l + 32(g&1)]
    (low nibble for g < 2), its high 2 bits at bits 2g of qh[32h + l]; 16 sub-blocks of
    16 share an int8 scale; x = (d * scale) * (q - 32)."""
    n = blocks.shape[0]
    ql, qh = blocks[:, :128], blocks[:, 128:192]
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = _half(blocks[:, 208:210])
    scale = (d * scales).reshape(n, 16, 1)
    low = ql.reshape(n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    low = (low & 0x0F).reshape(n, 2, 4, 32)
    high = qh.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    high = (high & 0x03).reshape(n, 2, 4, 32)
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)
    return (scale * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, QK_K)


def quantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    step = np.abs(sub).max(axis=2) / 31
    d = _f16_round(step.max(axis=1, keepdims=True) / 127)
    scales = np.clip(np.rint(step * _inverse(d)), 0, 127).astype(np.int8)
    scale = (d * scales).reshape(n, 16, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0, np.rint(sub / scale), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(n, 2, 4, 32)
    ql = ((q[:, :, 0:2] & 0x0F) | (q[:, :, 2:4] << 4)).reshape(n, 128)
    qh = q[:, :, 0] >> 4
    for g in range(1, 4):
        qh = qh | ((q[:, :, g] >> 4) << (2 * g))
    return np.concatenate([ql, qh.reshape(n, 64), scales.view(np.uint8), _as_half_bytes(d)], axis=1)


# ---------------------------------------------------------------- the table
Q = GGMLQuantizationType
FORMATS: dict[str, BlockFormat] = {
    "q8_0": BlockFormat("Q8_0", Q.Q8_0, QK, 2 + QK, dequantize_q8_0, quantize_q8_0),
    "q4_0": BlockFormat("Q4_0", Q.Q4_0, QK, 2 + QK // 2, dequantize_q4_0, quantize_q4_0),
    "q4_k": BlockFormat("Q4_K", Q.Q4_K, QK_K, 144, dequantize_q4_k, quantize_q4_k),
    "q6_k": BlockFormat("Q6_K", Q.Q6_K, QK_K, 210, dequantize_q6_k, quantize_q6_k),
}
SUPPORTED = ", ".join(f.name for f in FORMATS.values())


def block_format(kind: str | int | GGMLQuantizationType | BlockFormat) -> BlockFormat:
    """The format named `kind` ("q4_0", "Q4_0") or of a ggml type; DTypeError naming the
    supported ones otherwise."""
    if isinstance(kind, BlockFormat):
        return kind
    if isinstance(kind, str) and kind.lower() in FORMATS:
        return FORMATS[kind.lower()]
    if isinstance(kind, int) and not isinstance(kind, bool):
        for fmt in FORMATS.values():
            if fmt.ggml_type == kind:
                return fmt
        kind = Q(kind).name if kind in Q._value2member_map_ else kind
    raise DTypeError(
        f"quantization type {kind!r} is not supported for packed weights; supported: {SUPPORTED}"
    )


def dequantize(
    raw: np.ndarray, kind: str | int | BlockFormat, shape: tuple[int, ...]
) -> np.ndarray:
    """float32 values of packed `raw` bytes holding a tensor of `shape` (rows last)."""
    fmt = block_format(kind)
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    expected = rows * fmt.row_bytes(int(shape[-1])) if shape else 0
    flat = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if flat.size != expected:
        raise ShapeError(
            f"{fmt.name} tensor of shape {tuple(shape)}: needs {expected} bytes, got {flat.size}"
        )
    blocks = flat.reshape(-1, fmt.block_bytes)
    return fmt.dequantize_blocks(blocks).reshape(shape)


def quantize(array: np.ndarray, kind: str | int | BlockFormat) -> np.ndarray:
    """Packed bytes (rows, row_bytes) of a float array whose last dim is whole blocks."""
    fmt = block_format(kind)
    values = np.asarray(array, dtype=np.float32)
    if values.ndim == 0 or not np.all(np.isfinite(values)):
        raise ShapeError(f"quantize to {fmt.name}: needs a finite array of at least 1 dim")
    row_bytes = fmt.row_bytes(values.shape[-1])
    blocks = fmt.quantize_blocks(values.reshape(-1, fmt.block_values))
    return blocks.reshape(*values.shape[:-1], row_bytes)

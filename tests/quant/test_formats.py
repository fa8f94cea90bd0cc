"""Block formats: numpy dequantisation bit-exact with gguf.quants, quantisers, errors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import luminal as lm
from luminal.quant import FORMATS, block_format, dequantize, quantize

KINDS = list(FORMATS)


def _random_blocks(kind: str, rows: int, length: int, seed: int) -> np.ndarray:
    """Random bytes with finite float16 scales (random bytes elsewhere are all valid)."""
    fmt = FORMATS[kind]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows * length // fmt.block_values, fmt.block_bytes), np.uint8)
    scales = rng.uniform(-2, 2, (raw.shape[0], 2)).astype(np.float16).view(np.uint8)
    offsets = {"q8_0": [0], "q4_0": [0], "q4_k": [0, 2], "q6_k": [208]}[kind]
    for i, offset in enumerate(offsets):
        raw[:, offset : offset + 2] = scales[:, 2 * i : 2 * i + 2] if i else scales[:, :2]
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("kind", KINDS)
def test_dequantize_is_bit_exact_with_gguf(kind: str) -> None:
    raw = _random_blocks(kind, 6, 512, seed=1)
    ours = dequantize(raw, kind, (6, 512))
    theirs = gguf.quants.dequantize(raw, FORMATS[kind].ggml_type)
    assert ours.dtype == np.float32 and ours.shape == (6, 512)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_quantize_is_bit_exact_with_gguf(kind: str) -> None:
    x = np.random.default_rng(2).standard_normal((5, 256)).astype(np.float32) * 3
    x[0, :32] = 0.0  # an all-zero block: scale 0
    np.testing.assert_array_equal(
        quantize(x, kind), gguf.quants.quantize(x, FORMATS[kind].ggml_type)
    )


@pytest.mark.parametrize(
    ("kind", "bound"), [("q8_0", 0.005), ("q4_0", 0.1), ("q4_k", 0.08), ("q6_k", 0.03)]
)
def test_quantize_round_trip(kind: str, bound: float) -> None:
    """Every format's quantiser writes blocks gguf reads back as ours does, close to x."""
    x = np.random.default_rng(3).standard_normal((16, 512)).astype(np.float32)
    packed = quantize(x, kind)
    assert packed.shape == (16, FORMATS[kind].row_bytes(512)) and packed.dtype == np.uint8
    back = dequantize(packed, kind, x.shape)
    np.testing.assert_array_equal(back, gguf.quants.dequantize(packed, FORMATS[kind].ggml_type))
    assert np.abs(back - x).max() < bound * np.abs(x).max()


def test_unsupported_types_name_the_supported_ones() -> None:
    for kind in ("q5_k", gguf.GGMLQuantizationType.Q5_0, "float8"):
        with pytest.raises(lm.DTypeError, match="supported: Q8_0, Q4_0, Q4_K, Q6_K"):
            block_format(kind)
    with pytest.raises(lm.ShapeError, match="multiple of 256"):
        quantize(np.ones((2, 128), np.float32), "q4_k")
    with pytest.raises(lm.ShapeError, match="needs 68 bytes, got 67"):
        dequantize(np.zeros(67, np.uint8), "q8_0", (1, 64))

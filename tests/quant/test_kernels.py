"""Packed-weight kernels: the compiled C against the numpy reference on the same packed
weights, both activation modes and both row paths, and packed embedding rows."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.quant import FORMATS, PREFILL_ROWS, QuantEmbedding, dequantize, quant_matmul, quantize
from luminal.quant.ops import SIXTEEN_BIT, TILED
from luminal.quant.reference import rounded_activations

N, K = 40, 768  # 24 blocks of 32: one 16-block step of the 512-bit kernels and a tail
MODES = [
    (kind, bits) for kind in FORMATS for bits in (8, 16, 32) if bits != 16 or kind in SIXTEEN_BIT
]


def _packed(kind: str, rows: int, length: int, seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((rows, length)).astype(np.float32)
    return FORMATS[kind].as_storage(quantize(w, kind), length)


def _rounding_bound(x: np.ndarray, weight: np.ndarray, bits: int) -> np.ndarray:
    """What rounding activations to `bits` may move each output by: per element at most
    half a step of its block for 8 bits (max|x| / 254), a step of the second level
    for 16 (max|x| / 32512: its values are clamped to 127), times |w|, plus float32
    rounding of the sums."""
    amax = np.abs(x.reshape(len(x), -1, 32)).max(axis=-1).repeat(32, axis=-1)
    step = {8: 1 / 254, 16: 1 / 32512}[bits] * 1.001 * amax
    return step @ np.abs(weight).T + 1e-6 * (np.abs(x) @ np.abs(weight).T)


@pytest.mark.parametrize(("kind", "bits"), MODES)
def test_matmul_compiled_equals_reference(kind: str, bits: int) -> None:
    packed = _packed(kind, N, K, seed=4)
    weight = dequantize(packed.view(np.uint8), kind, (N, K)).astype(np.float64)
    rng = np.random.default_rng(5)
    inputs = [
        rng.standard_normal((rows, K)).astype(np.float32) for rows in (1, 3, PREFILL_ROWS + 1)
    ]
    cx = lm.Graph()  # one graph with a symbolic row count: decode rows and the panel path
    xt = cx.tensor(("rows", K))
    wt = cx.tensor(packed.shape, dtype=str(packed.dtype)).set(packed)
    y = quant_matmul(xt, wt, kind, activation_bits=bits).retrieve()
    references = []
    for x in inputs:
        xt.set(x)
        cx.execute()
        references.append(y.numpy().copy())
        scale = np.abs(x) @ np.abs(weight).T  # what float32 rounding is relative to
        error = np.abs(references[-1] - x.astype(np.float64) @ weight.T)
        rounded = bits < 32 and len(x) < PREFILL_ROWS or bits == 8 and kind in TILED
        if rounded:  # activations rounded, within the bound
            assert np.all(error <= _rounding_bound(x, weight, bits))
            assert error.max() > 1e-6 * scale.max()  # and they are rounded
        else:
            assert np.all(error <= 1e-6 * scale)
    cx.compile(lm.CPUCompiler())
    for x, reference in zip(inputs, references, strict=True):
        xt.set(x)
        cx.execute()
        scale = np.abs(x) @ np.abs(weight).T
        assert np.all(np.abs(y.numpy() - reference) <= 1e-6 * scale), (kind, len(x))


def test_default_activation_bits() -> None:
    """Q8_0/Q4_0/Q4_K decode with 16-bit integer activations, Q6_K with float ones,
    quantized_activations with 8 bits; other values are refused."""
    cx = lm.Graph()
    x = cx.tensor((1, 256))
    chosen = {}
    for kind in FORMATS:
        packed = _packed(kind, 4, 256, seed=1)
        wt = cx.tensor(packed.shape, dtype=str(packed.dtype))
        for flag in (False, True):
            node = cx.nodes[quant_matmul(x, wt, kind, quantized_activations=flag).node_id]
            chosen[kind, flag] = node.op.reference.activation_bits
    assert chosen == {
        **{(kind, True): 8 for kind in FORMATS},
        ("q8_0", False): 16,
        ("q4_0", False): 16,
        ("q4_k", False): 16,
        ("q6_k", False): 32,
    }
    with pytest.raises(
        lm.DTypeError, match="activation_bits must be 8, 32 or, for Q8_0, Q4_0, Q4_K, 16; got 16"
    ):
        quant_matmul(x, wt, "q6_k", activation_bits=16)


def test_matmul_leading_dims_and_errors() -> None:
    packed = _packed("q4_0", 8, 64, seed=6)
    cx = lm.Graph()
    x = np.random.default_rng(7).standard_normal((2, 3, 64)).astype(np.float32)
    xt = cx.tensor((2, 3, 64)).set(x)
    wt = cx.tensor(packed.shape, dtype="int32").set(packed)
    y = quant_matmul(xt, wt, "q4_0").retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    rows = rounded_activations(x.reshape(6, 64), 16).reshape(x.shape)  # 6 rows: decode
    expected = rows @ dequantize(packed.view(np.uint8), "q4_0", (8, 64)).T
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(lm.ShapeError, match=r"int32 \(\.\.\., 17\)"):
        quant_matmul(cx.tensor((1, 64)), wt, "q8_0")
    with pytest.raises(lm.DTypeError, match="supported: Q8_0, Q4_0, Q4_K, Q6_K"):
        quant_matmul(xt, wt, "q2_k")


@pytest.mark.parametrize("kind", ["q8_0", "q6_k"])
def test_embedding_reads_packed_rows(kind: str) -> None:
    packed = _packed(kind, 20, 512, seed=8)
    table = dequantize(packed.view(np.uint8), kind, (20, 512))
    cx = lm.Graph()
    embedding = QuantEmbedding(cx, 20, 512, kind)
    embedding.weight.set(packed)
    ids = cx.tensor((2, 3), dtype="int32").set(np.array([[0, 19, 4], [4, 7, 1]], np.int32))
    out = embedding(ids).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), table[[[0, 19, 4], [4, 7, 1]]])
    cx.compile(lm.CPUCompiler())
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), table[[[0, 19, 4], [4, 7, 1]]])
    ids.set(np.array([[0, 20, 1], [1, 1, 1]], np.int32))
    with pytest.raises(lm.ExecutionError, match="20"):
        cx.execute()
    ids.set(np.array([[3, 3, 3], [2, 2, 2]], np.int32))
    cx.execute()  # the next run is correct again
    np.testing.assert_array_equal(out.numpy(), table[[[3, 3, 3], [2, 2, 2]]])

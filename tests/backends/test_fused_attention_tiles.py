"""The fused attention kernel's register tiles (`kernel/attention.py`: `_score_tile`,
`_value_tile`): scores and output rows accumulated in locals of a TILE_LANES-lane loop
across a serial loop, for key blocks and head widths that give 1 or more vectors per
tile, several tiles per row, and widths that take the plain value loops, against
torch's scaled_dot_product_attention; and the tiles' shape in the kernel IR."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from luminal.compiler import attention as attention_pass
from luminal.kernel import attention as kernel
from luminal.kernel import ir
from luminal.nn.attention import scaled_dot_product_attention

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def fuse_every_length(monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setattr(attention_pass, "UNFUSED_KEYS", range(0))


def compiled(length: int, keys: int, depth: int, heads: int = 2) -> None:
    """Padded attention (the last batch row sees half the keys) compiled for the CPU
    equals torch's."""
    rng = np.random.default_rng(length * 1000 + keys * 10 + depth)
    q = rng.standard_normal((2, length, heads * depth)).astype(np.float32)
    k, v = (rng.standard_normal((2, keys, heads * depth)).astype(np.float32) for _ in "kv")
    keep = np.ones((2, 1, 1, keys), np.bool_)
    keep[-1, ..., keys // 2 :] = False
    cx = lm.Graph()
    tensors = [cx.tensor(a.shape).set(a) for a in (q, k, v)]
    split = [t.reshape((2, t.shape[1], heads, depth)).permute((0, 2, 1, 3)) for t in tensors]
    mask = cx.tensor(keep.shape, lm.bool).set(keep)
    out = scaled_dot_product_attention(*split, attn_mask=mask).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert sum(isinstance(n.op, ops.FusedAttention) for n in cx.nodes.values()) == 1
    tq, tk, tv = (
        torch.from_numpy(a).reshape(2, -1, heads, depth).permute(0, 2, 1, 3) for a in (q, k, v)
    )
    expected = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(keep))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "length, keys, depth",
    [
        (kernel.GROUP * 2, 128, 32),  # MiniLM's head: a 128-key block, head width 32
        (kernel.GROUP * 2 + 1, 48, 16),  # a 48-key block (3 vectors: tiles of 1); a row left
        (13, 80, 64),  # an 80-key block (5 tiles of 1 vector); head width 64
        (kernel.GROUP, 200, 48),  # value tiles of 1 vector (48 = 3 x 16); a partial key block
        (kernel.GROUP * 3, 40, 128),  # head width 128: several value tiles per row
        (kernel.GROUP * 2, 37, 20),  # head width 20: the plain value loops
        (kernel.GROUP + 5, 33, 32),  # fewer rows than a group after the groups (the row path)
    ],
)
def test_register_tiles_equal_torch(length: int, keys: int, depth: int) -> None:
    compiled(length, keys, depth)


def test_register_tiles_with_a_symbolic_length() -> None:
    """A symbolic sequence (MiniLM's ONNX graph): 128-key blocks whose key count is only
    known at run time, so the value tiles run over zero-padded values and zeroed weights
    past the keys; one compiled graph, lengths of a partial block, a whole one and more,
    causal, equal to torch's."""
    heads, depth = 2, 32
    cx = lm.Graph()
    tensors = [cx.tensor((2, "seq", heads * depth)) for _ in "qkv"]
    split = [t.reshape((2, t.shape[1], heads, depth)).permute((0, 2, 1, 3)) for t in tensors]
    out = scaled_dot_product_attention(*split, is_causal=True).retrieve()
    rng = np.random.default_rng(3)
    for step, length in enumerate((kernel.GROUP * 3 + 5, 128, 150)):
        arrays = [rng.standard_normal((2, length, heads * depth)).astype(np.float32) for _ in "qkv"]
        for tensor, array in zip(tensors, arrays, strict=True):
            tensor.set(array)
        if step == 0:
            cx.compile(lm.CPUCompiler())
            assert sum(isinstance(n.op, ops.FusedAttention) for n in cx.nodes.values()) == 1
        cx.execute()
        tq, tk, tv = (
            torch.from_numpy(a).reshape(2, -1, heads, depth).permute(0, 2, 1, 3) for a in arrays
        )
        expected = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def _tile_loops(body: tuple[ir.Stmt, ...]) -> list[ir.Loop]:
    """Reduce loops of TILE_LANES iterations holding a serial loop (a register tile)."""
    return [
        s
        for s in ir.statements(body)
        if isinstance(s, ir.Loop)
        and s.kind == "reduce"
        and s.extent.as_int() == kernel.TILE_LANES
        and any(isinstance(x, ir.Loop) and x.kind == "serial" for x in s.body)
    ]


def test_tiles_hold_their_accumulators_across_the_serial_loop() -> None:
    """Both products are tiles: locals declared in the lane loop, updated in the serial
    loop (GROUP rows x vectors of them) and stored after it; the scratch is aligned."""
    from luminal.backends.cpu.lowering import assemble, lower_kernels
    from luminal.compiler.egraph import EGraphCompiler

    cx = lm.Graph()
    q, k, v = (cx.tensor((1, 2, 8, 32)).set(np.ones((1, 2, 8, 32), np.float32)) for _ in "qkv")
    scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
    cx.compile(lm.GenericCompiler())
    cx.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
    sources = [k for s in assemble(lower_kernels(cx)).segments for k in s.kernels]
    (fused,) = [k.kernel for k in sources if "fused_attention" in k.name]
    assert fused is not None
    tiles = _tile_loops(fused.body)
    assert len(tiles) == 2
    # 8 keys: one 16-lane block, tiles of 1 vector; head width 32: value tiles of 2
    for tile, vectors in zip(tiles, (1, 2), strict=True):
        declared = [s.name for s in tile.body if isinstance(s, ir.Declare)]
        serial = next(s for s in tile.body if isinstance(s, ir.Loop))
        updated = {s.name for s in serial.body if isinstance(s, ir.Accumulate)}
        assert len(declared) == kernel.GROUP * vectors and set(declared) == updated
        assert sum(isinstance(s, ir.Store) for s in tile.body) == len(declared)
    allocs = [s for s in fused.body if isinstance(s, ir.Alloc)]
    assert allocs and all(a.align == kernel.CACHE_LINE for a in allocs)

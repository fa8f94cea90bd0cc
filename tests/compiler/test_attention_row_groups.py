"""The fused attention kernel's row groups (GROUP query rows sharing each key and value
load): whole groups, the rows left over, head dims the group's unroll does not divide,
fewer keys than one unrolled step, and heads read as strided views of (B, L, H*D) rows
(BERT's layout) under a padding mask, against torch's scaled_dot_product_attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from luminal.compiler import attention as attention_pass
from luminal.kernel import attention as kernel
from luminal.nn.attention import scaled_dot_product_attention

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def fuse_every_length(monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setattr(attention_pass, "UNFUSED_KEYS", range(0))


def run(batch: int, heads: int, length: int, keys: int, depth: int, causal: bool) -> None:
    rng = np.random.default_rng(batch * 1000 + length * 10 + keys + depth)
    q = rng.standard_normal((batch, length, heads * depth)).astype(np.float32)
    k, v = (rng.standard_normal((batch, keys, heads * depth)).astype(np.float32) for _ in "kv")
    keep = np.ones((batch, 1, 1, keys), np.bool_)
    keep[-1, ..., keys // 2 :] = False  # a padded batch row
    cx = lm.Graph()
    tensors = [cx.tensor(a.shape).set(a) for a in (q, k, v)]
    split = [t.reshape((batch, t.shape[1], heads, depth)).permute((0, 2, 1, 3)) for t in tensors]
    mask = cx.tensor(keep.shape, lm.bool).set(keep)
    out = scaled_dot_product_attention(*split, attn_mask=mask, is_causal=causal).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert sum(isinstance(n.op, ops.FusedAttention) for n in cx.nodes.values()) == 1
    tq, tk, tv = (
        torch.from_numpy(a).reshape(batch, -1, heads, depth).permute(0, 2, 1, 3) for a in (q, k, v)
    )
    allowed = torch.from_numpy(keep)
    if causal:
        allowed = allowed & torch.ones(length, keys, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=allowed)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "length, keys, depth",
    [
        (kernel.GROUP * 3, 70, 32),  # whole groups, a partial second key block
        (kernel.GROUP * 2 + 3, 19, 6),  # rows left over; head dim 6: unroll 1
        (kernel.GROUP + 1, kernel.GROUP_UNROLL - 1, 8),  # fewer keys than one step
        (69, 128, 32),  # a full block of rows and 5 more (one group + one row)
        (9, kernel.WIDE_KEYS + 72, 32),  # a wide key block (head dim 32) and a partial one
    ],
)
def test_grouped_rows_equal_torch(length: int, keys: int, depth: int) -> None:
    run(2, 3, length, keys, depth, causal=False)


def test_grouped_rows_with_a_causal_mask() -> None:
    run(2, 2, 37, 37, 16, causal=True)

"""Bucket Functions on the CPU runtime (luminal/backends/cpu/buckets.py): inputs that the
kernels write straight into the bucket, and the ones that must be copied in, give what
joining the inputs and reducing the copy gives (numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import ops
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.dtype import float32


class Halving:
    """A bucket callable: joined inputs, halved in place (stands in for an all-reduce)."""

    bucket = True

    def __init__(self) -> None:
        self.calls = 0

    def buffer(self, size: int) -> np.ndarray:
        return np.full(size, np.nan, np.float32)  # nothing may rely on its contents

    def reduce(self, flat: np.ndarray) -> None:
        self.calls += 1
        flat *= np.float32(0.5)

    def __call__(self, *pieces: np.ndarray) -> np.ndarray:
        flat = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in pieces])
        self.reduce(flat)
        return flat


def test_bucket_places_what_only_it_reads_and_copies_the_rest() -> None:
    rng = np.random.default_rng(0)
    a_data = rng.standard_normal((3, 5)).astype(np.float32)
    b_data = rng.standard_normal(4).astype(np.float32)
    cx = lm.Graph()
    a, b = cx.tensor((3, 5), name="a"), cx.tensor((4,), name="b")
    a.set(a_data)
    b.set(b_data)
    placed = a * 2.0  # a kernel's output read by the bucket alone
    reshaped = (a * 3.0 + 1.0).reshape(5, 3)  # read in its buffer's order: placed too
    shared = a.sum(0)  # also read after the bucket: copied, so that reader sees it unreduced
    permuted = (a - 1.0).permute(1, 0)  # read transposed: copied
    pieces = [placed, reshaped, shared, permuted, b]  # b: a graph input, copied
    halving = Halving()
    size = 15 + 15 + 5 + 15 + 4
    bucket = cx.add_node(ops.Function("halve", halving), pieces, (size,), float32)
    out = (bucket * 3.0).retrieve()
    later = (shared + bucket[0:5]).retrieve()  # after the bucket: reads `shared` then

    cx.compile(CPUCompiler())
    compiled = cx.compiled
    (layout,) = compiled._buckets(cx).values()
    assert len(layout.placed) == 2 and len(layout.copied) == 3
    halving.calls = 0
    cx.execute()

    joined = [a_data * 2, (a_data * 3 + 1).reshape(5, 3), a_data.sum(0), (a_data - 1).T, b_data]
    halved = np.concatenate([p.reshape(-1) for p in joined]) * np.float32(0.5)
    np.testing.assert_allclose(out.numpy(), halved * 3, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(later.numpy(), a_data.sum(0) + halved[:5], rtol=1e-6, atol=1e-6)
    assert halving.calls == 1


def test_inputs_are_sized_by_what_the_bucket_reads_not_by_their_buffers() -> None:
    """A broadcast input (a buffer of 1 read as 4) and a sliced one (a buffer of 7 read
    as 4): their buffers' sizes add up to the bucket's length by chance (1 + 7 == 4 + 4),
    which once passed for a layout with offsets by buffer size (a ValueError copying in)."""
    x = np.arange(7, dtype=np.float32)
    cx = lm.Graph()
    a = cx.tensor((7,), name="a").set(x)
    s = cx.tensor((1,), name="s").set(np.array([5.0], np.float32))
    pieces = [(s * 1.0).reshape(()).expand((4,)), (a * 2.0)[0:4]]
    bucket = cx.add_node(ops.Function("halve", Halving()), pieces, (8,), float32)
    out = (bucket * 3.0).retrieve()
    cx.compile(CPUCompiler())
    cx.execute()
    expected = np.concatenate([np.full(4, 5.0, np.float32), x[:4] * 2]) * np.float32(1.5)
    np.testing.assert_array_equal(out.numpy(), expected)


class ShortBuffer(Halving):
    """A bucket callable whose buffer is one element short."""

    def buffer(self, size: int) -> np.ndarray:
        return np.zeros(size - 1, np.float32)


def test_a_bucket_buffer_of_the_wrong_size_is_refused_by_name() -> None:
    cx = lm.Graph()
    a = cx.tensor((6,), name="a").set(np.ones(6, np.float32))
    bucket = cx.add_node(ops.Function("short", ShortBuffer()), [a * 2.0], (6,), float32)
    (bucket * 3.0).retrieve()
    with pytest.raises(lm.ExecutionError, match=r"'short'.*buffer\(6\) returned float32 \(5,\)"):
        cx.compile(CPUCompiler())
        cx.execute()

"""The reference runtime (which verification runs beside every compiled program) frees an
intermediate once its last reader has run, so a reference run holds a few buffers of a
deep graph at a time, not all of them."""

from __future__ import annotations

import weakref

import numpy as np

import luminal as lm
from luminal import ops
from luminal.reference.kernels import KERNELS


def test_an_intermediate_dies_after_its_last_reader(monkeypatch) -> None:
    results: list[weakref.ref] = []
    stale_at_call: list[int] = []

    def recording(kernel):  # noqa: ANN001, ANN202 - wraps a reference kernel
        def run(op, arrays, ctx):  # noqa: ANN001, ANN202
            # every result but the last was read by its one reader already: all dead
            stale_at_call.append(sum(ref() is not None for ref in results[:-1]))
            result = kernel(op, arrays, ctx)
            results.append(weakref.ref(result))
            return result

        return run

    for op in (ops.Mul, ops.Sin):
        monkeypatch.setitem(KERNELS, op, recording(KERNELS[op]))
    cx = lm.Graph()
    data = np.linspace(-1, 1, 4096, dtype=np.float32)
    h = cx.tensor((4096,)).set(data) * 2.0
    for _ in range(8):
        h = h.sin()
    out = h.retrieve()
    cx.execute()
    expected = data * 2.0
    for _ in range(8):
        expected = np.sin(expected)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    assert len(stale_at_call) == 9 and stale_at_call == [0] * 9, stale_at_call

"""Any identifier names a symbolic dim: names of generated loop indices (`i0_`, `r0_`,
`j0_`, `g0_`), C keywords and the kernels' own locals compile and compute what the
reference runtime computes (loop indices and dims live in separate namespaces,
luminal/kernel/indexing.py)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.training.autograd import gradients

HOSTILE = ["r0_", "i0_", "j0_", "g0_", "i", "n", "d", "z", "dims", "int", "for", "double"]
HOSTILE += ["b0", "acc", "v", "lm_fault", "dim_n", "维度"]


def _graph(name: str) -> tuple[lm.Graph, list[lm.GraphTensor]]:
    """A row softmax, a matmul (sgemm over the dim), a reduction along the dim, a
    gather and its gradient's scatter, all with `name` as the symbolic size."""
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor((name, 8)).set(rng.uniform(-1, 1, (5, 8)).astype(np.float32))
    w = cx.tensor((8, name)).set(rng.uniform(-1, 1, (8, 5)).astype(np.float32))
    ids = cx.tensor((name,), dtype=lm.int32).set(np.array([4, 0, 2, 2, 1], np.int32))
    table = cx.tensor((name, 3)).set(rng.uniform(-1, 1, (5, 3)).astype(np.float32))
    rows = table.gather(ids)
    (scattered,) = gradients(cx, [table], (rows * rows).sum())
    outs = [
        (x.softmax(-1) @ w).retrieve(),
        x.sum(0).retrieve(),
        rows.retrieve(),
        scattered.retrieve(),
    ]
    return cx, outs


@pytest.mark.parametrize("name", HOSTILE)
def test_a_dim_may_have_any_identifier_as_its_name(name: str) -> None:
    cx, outs = _graph(name)
    cx.execute()
    expected = [o.numpy() for o in outs]
    cx.compile(CPUCompiler())  # verify=True: CompileError if it differed
    cx.execute()
    for out, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)

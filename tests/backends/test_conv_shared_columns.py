"""Two convolutions of one input with the same window (YOLOv8's box and class branches)
share one im2col copy after common-subexpression elimination; both products read their
columns from the padded input instead (`schedule/contraction.gathered_operand`), so the
copy is never made. Values against torch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.nn.conv import conv
from tests.conftest import uniform


def test_two_convolutions_of_one_input_gather_their_columns(rng) -> None:  # noqa: ANN001
    x = uniform(rng, (1, 6, 12, 12))
    w1, w2 = uniform(rng, (8, 6, 3, 3)), uniform(rng, (5, 6, 3, 3))
    cx = lm.Graph()
    image = cx.tensor(x.shape).set(x)
    first = conv(image, cx.tensor(w1.shape).set(w1), None, 1, 1, 1, 1).retrieve()
    second = conv(image, cx.tensor(w2.shape).set(w2), None, 1, 1, 1, 1).retrieve()
    compiled = cx.compile(CPUCompiler())
    sources = [k.source for s in compiled.segments for k in s.kernels]
    calls = [line for s in sources for line in s.splitlines() if "lm_sgemm_gather(11" in line]
    assert len(calls) == 2
    # the padded input is the only copy: no (taps x positions) im2col buffer
    assert sum(s.startswith("\n/* contiguous */") for s in sources) <= 1
    cx.execute()
    for out, w in ((first, w1), (second, w2)):
        expected = F.conv2d(torch.tensor(x), torch.tensor(w), padding=1)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)

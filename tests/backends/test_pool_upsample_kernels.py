"""The kernels YOLOv8's SPPF and neck compile to on the CPU backend, against torch: a
max pool is separable (a row max, then a column max over the row maxima: no reduction
writes one value per window row), and a nearest upsample read by a concatenation is
indexed in place (no copy of the upsampled tensor)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.hl.combine import concat
from tests.conftest import uniform


def test_chained_max_pools_are_separable(rng) -> None:  # noqa: ANN001
    x = uniform(rng, (1, 6, 11, 13))
    x[0, 2, 4, 5] = np.nan  # NaN propagates through both passes, as in torch
    cx = lm.Graph()
    y1 = lm.nn.MaxPool2d(5, stride=1, padding=2)(cx.tensor(x.shape).set(x))
    y2 = lm.nn.MaxPool2d(5, stride=1, padding=2)(y1)
    y3 = lm.nn.MaxPool2d((3, 5), stride=(2, 1), padding=(1, 2))(y2)
    outs = [y.retrieve() for y in (y1, y2, y3)]
    cx.compile(CPUCompiler())
    # each reduction writes at most one value per padded row position: the row maxima
    # (6 x 15 x 13) or the pool itself, never one per (output, window row) as 5 x 11 x 13
    sizes = [
        int(np.prod([d.as_int() for d in n.inputs[0].view.shape]))
        // n.inputs[0].view.shape[n.op.axis].as_int()
        for n in cx.nodes.values()
        if isinstance(n.op, ops.MaxReduce)
    ]
    assert sizes and max(sizes) <= 6 * 15 * 13
    cx.execute()
    t = torch.tensor(x)
    t1 = F.max_pool2d(t, 5, 1, 2)
    t2 = F.max_pool2d(t1, 5, 1, 2)
    t3 = F.max_pool2d(t2, (3, 5), (2, 1), (1, 2))
    for ours, theirs in zip(outs, (t1, t2, t3), strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_upsample_read_by_concat_is_not_copied(rng) -> None:  # noqa: ANN001
    a, b = uniform(rng, (1, 8, 5, 6)), uniform(rng, (1, 4, 10, 12))
    cx = lm.Graph()
    x = cx.tensor(a.shape).set(a) * 2.0
    up = lm.nn.Upsample(scale_factor=2, mode="nearest")(x)
    out = (concat([up, cx.tensor(b.shape).set(b)], 1) * 3.0).retrieve()
    compiled = cx.compile(CPUCompiler())
    kernels = [k for s in compiled.segments for k in s.kernels]
    # x * 2 (read twice per row and column of the upsample), then the concatenation
    assert len(kernels) == 2
    cx.execute()
    expected = torch.cat([F.interpolate(torch.tensor(a) * 2, scale_factor=2), torch.tensor(b)], 1)
    np.testing.assert_allclose(out.numpy(), expected.numpy() * 3, rtol=1e-6, atol=0)


def test_max_pool_output_is_stored_in_its_own_axis_order(rng) -> None:  # noqa: ANN001
    """Each pass's reduction is stored in the input's axis order (the windows axis back in
    place, the kernel axis reduced), so the pooled map is not stored transposed for the
    next layer to read across (3x3/2 pools of 9x7 maps: (2, 3, 4, 3), not (2, 3, 3, 4))."""
    x = uniform(rng, (2, 3, 9, 7))
    cx = lm.Graph()
    y = lm.nn.MaxPool2d(3, stride=2)(cx.tensor(x.shape).set(x)).retrieve()
    shapes = [
        tuple(d.as_int() for d in n.shape)
        for n in cx.nodes.values()
        if isinstance(n.op, ops.MaxReduce)
    ]
    assert shapes == [(2, 3, 9, 3), (2, 3, 4, 3)], shapes
    cx.compile(CPUCompiler())
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), F.max_pool2d(torch.tensor(x), 3, 2).numpy())


def test_two_by_two_max_pool_reduces_each_window_in_place(rng) -> None:  # noqa: ANN001
    """A 2x2 window costs 4 comparisons either way, so it is reduced over its kernel dims
    (window rows, then the window) with no pass over whole image rows; values vs torch."""
    x = uniform(rng, (2, 3, 8, 6))
    cx = lm.Graph()
    y = lm.nn.MaxPool2d(2)(cx.tensor(x.shape).set(x)).retrieve()
    shapes = [
        tuple(d.as_int() for d in n.shape)
        for n in cx.nodes.values()
        if isinstance(n.op, ops.MaxReduce)
    ]
    assert shapes == [(2, 3, 4, 3, 2), (2, 3, 4, 3)], shapes
    cx.compile(CPUCompiler())
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), F.max_pool2d(torch.tensor(x), 2).numpy())

"""The kernels a convolution of several images compiles to on the CPU backend: one
`lm_sgemm` call per group writing NCHW in place (the images' blocks of columns), no loop
over images or output positions, and the next convolution's padded input read without
divisions; values against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler
from luminal.nn.conv import conv
from tests.conftest import uniform


def sources(compiled) -> list[str]:  # noqa: ANN001 - a CompiledGraph
    return [k.source for s in compiled.segments for k in s.kernels]


def sgemm_calls(compiled) -> list[str]:  # noqa: ANN001
    return [
        line.strip()
        for source in sources(compiled)
        for line in source.splitlines()
        if "lm_sgemm(11" in line or "lm_sgemm_gather(11" in line
    ]


@pytest.mark.parametrize(("groups", "stride"), [(1, 1), (2, 2)])
def test_images_are_blocks_of_one_product(rng, groups, stride) -> None:  # noqa: ANN001
    """3 images, 8 -> 12 channels, 3x3: one product per group whose columns are (image,
    position), its output (image, channel, position) written in place, its columns read
    from the padded input (no im2col copy: the only copy left is the padding); no kernel
    loops over the images."""
    x, w = uniform(rng, (3, 8, 9, 9)), uniform(rng, (12, 8 // groups, 3, 3))
    cx = lm.Graph()
    out = conv(cx.tensor(x.shape).set(x), cx.tensor(w.shape).set(w), None, stride, 1, 1, groups)
    out = out.retrieve()
    compiled = cx.compile(CPUCompiler())
    positions = (9 // stride + (9 % stride > 0)) ** 2
    (call,) = sgemm_calls(compiled)
    args = [a.strip() for a in call.split("(", 1)[1].rstrip(");").split(",")]
    assert call.startswith("const long long failed_ = lm_sgemm_gather(")
    assert args[1:4] == [str(12 // groups), str(3 * positions), str(8 // groups * 9)]
    assert args[-2:] == [str(positions), str(12 * positions)]  # block width, block stride
    assert not any("lm_contract" in s for s in sources(compiled))
    assert sum(s.startswith("\n/* contiguous */") for s in sources(compiled)) <= 1
    cx.execute()
    expected = F.conv2d(torch.tensor(x), torch.tensor(w), stride=stride, padding=1, groups=groups)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_padded_input_of_the_next_convolution_has_no_divisions(rng) -> None:  # noqa: ANN001
    """conv -> +bias -> relu -> conv: the kernel writing the second convolution's padded
    input reads the first product at affine indices (a pad's offset unravelled by
    divisions cost ResNet-18 a third of its elementwise time)."""
    x, w1, w2 = uniform(rng, (2, 4, 6, 6)), uniform(rng, (8, 4, 3, 3)), uniform(rng, (5, 8, 3, 3))
    b1 = uniform(rng, (8,))
    cx = lm.Graph()
    h = conv(cx.tensor(x.shape).set(x), cx.tensor(w1.shape).set(w1), cx.tensor((8,)).set(b1), 1, 1)
    out = conv(h.relu(), cx.tensor(w2.shape).set(w2), None, 1, 1).retrieve()
    compiled = cx.compile(CPUCompiler())
    padded = [s for s in sources(compiled) if "lm_max_nan(" in s and "i3_ >= 1" in s]
    assert padded and all(
        "/" not in line for s in padded for line in s.splitlines() if "b0[" in line
    )
    cx.execute()
    first = F.conv2d(torch.tensor(x), torch.tensor(w1), torch.tensor(b1), padding=1)
    expected = F.conv2d(torch.relu(first), torch.tensor(w2), padding=1)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_one_image_is_not_the_parallel_loop(rng) -> None:  # noqa: ANN001
    """A kernel over (1, channels, h, w) (one image, as in YOLO at batch 1) runs its
    parallel loop over the channels: a first loop of one iteration would leave every
    elementwise kernel on one thread."""
    x = uniform(rng, (1, 16, 40, 40))
    cx = lm.Graph()
    t = cx.tensor(x.shape).set(x)
    sigmoid = ((t * -1.4426950408889634).exp2() + 1.0).reciprocal()
    out = (t * sigmoid).retrieve()  # SiLU
    compiled = cx.compile(CPUCompiler())
    (source,) = sources(compiled)
    lines = source.splitlines()
    loop = lines[next(i for i, line in enumerate(lines) if "omp parallel for" in line) + 1]
    assert "< 16;" in loop
    cx.execute()
    np.testing.assert_allclose(out.numpy(), x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)

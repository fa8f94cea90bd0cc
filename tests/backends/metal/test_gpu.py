"""`lm.MetalCompiler` on an Apple GPU (marked `gpu`: these skip off Apple hardware):
compiled graphs against numpy, half precision included, a symbolic dim at two sizes."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.metal import runtime

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def gpu() -> None:
    reason = runtime.missing()
    if reason is not None:
        pytest.skip(f"needs a Metal GPU: {reason}")


def test_layer_norm_of_a_product_matches_numpy(rng: np.random.Generator) -> None:
    cx = lm.Graph()
    x = cx.tensor(("rows", 24))
    weight = rng.standard_normal((24, 40)).astype(np.float32)
    out = (x @ cx.tensor((24, 40)).set(weight)).layer_norm(-1, eps=1e-5).retrieve()
    cx.compile(lm.MetalCompiler())
    for rows in (3, 33):
        data = rng.standard_normal((rows, 24)).astype(np.float32)
        x.set(data)
        cx.execute()
        y = data @ weight
        expected = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-4)


def test_half_precision_matches_numpy(rng: np.random.Generator) -> None:
    cx = lm.Graph()
    data = rng.uniform(-2, 2, (16, 8)).astype(np.float16)
    x = cx.tensor((16, 8), dtype=lm.float16).set(data)
    out = (x.exp() * 2.0).sum(-1).retrieve()
    cx.compile(lm.MetalCompiler(rtol=1e-2, atol=1e-2))
    cx.execute()
    expected = (np.exp(data.astype(np.float32)) * 2).sum(-1)
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_a_custom_metal_kernel_runs_between_generated_ones(rng: np.random.Generator) -> None:
    from tests.backends.cuda.test_custom import METAL, ScaledAdd, graph

    cx, a, b, out = graph(rng, METAL, reference=ScaledAdd(), backend="metal")
    cx.compile(lm.MetalCompiler())  # verified against the numpy reference
    cx.execute()
    expected = (2 * np.exp(a.numpy()) + b.numpy() + 1).sum(-1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)

"""`lm.CUDACompiler` on a real GPU (marked `gpu`: these skip where no NVIDIA driver sees
one): compiled graphs against numpy, the tensor-core matmul included, inputs set again
between runs, a symbolic dim at two sizes."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import runtime

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def gpu() -> None:
    reason = runtime.missing(0)
    if reason is not None:
        pytest.skip(f"needs a CUDA GPU: {reason}")


def test_softmax_of_a_product_matches_numpy(rng: np.random.Generator) -> None:
    cx = lm.Graph()
    x = cx.tensor(("rows", 32))
    weight = rng.standard_normal((32, 48)).astype(np.float32)
    w = cx.tensor((32, 48)).set(weight)
    out = (x @ w).softmax(-1).retrieve()
    cx.compile(lm.CUDACompiler())
    for rows in (5, 67):  # two sizes of the symbolic dim, the weight uploaded once
        data = rng.standard_normal((rows, 32)).astype(np.float32)
        x.set(data)
        cx.execute()
        logits = data @ weight
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [lm.float16, lm.bfloat16])
def test_tensor_core_matmul_matches_numpy(dtype: lm.DType, rng: np.random.Generator) -> None:
    cx = lm.Graph()
    a_data = rng.uniform(-1, 1, (2, 70, 40)).astype(np.float32)
    b_data = rng.uniform(-1, 1, (50, 40)).astype(np.float32)
    a = cx.tensor((2, 70, 40), dtype=dtype).set(a_data.astype(dtype.numpy))
    b = cx.tensor((50, 40), dtype=dtype).set(b_data.astype(dtype.numpy))
    out = (a @ b.transpose(0, 1)).retrieve()
    compiler = lm.CUDACompiler(rtol=1e-2, atol=1e-2)
    assert "lm_wmma_" in compiler.render(cx)
    cx.compile(compiler)
    cx.execute()
    rounded_a, rounded_b = (d.astype(dtype.numpy).astype(np.float32) for d in (a_data, b_data))
    exact = rounded_a @ rounded_b.T
    np.testing.assert_allclose(out.numpy().astype(np.float32), exact, rtol=1e-2, atol=1e-2)


def test_gather_out_of_range_is_an_execution_error() -> None:
    cx = lm.Graph()
    table = cx.tensor((5, 3)).set(np.arange(15, dtype=np.float32).reshape(5, 3))
    index = cx.tensor((2,), dtype=lm.int32).set(np.array([1, 4], np.int32))
    rows = table.gather(index).retrieve()
    cx.compile(lm.CUDACompiler())
    cx.execute()
    expected = np.arange(15, dtype=np.float32).reshape(5, 3)[[1, 4]]
    np.testing.assert_array_equal(rows.numpy(), expected)
    index.set(np.array([1, 9], np.int32))
    with pytest.raises(lm.ExecutionError, match="index 9 is out of range"):
        cx.execute()


def test_a_custom_cuda_kernel_runs_between_generated_ones(rng: np.random.Generator) -> None:
    from tests.backends.cuda.test_custom import CUDA, ScaledAdd, graph

    cx, a, b, out = graph(rng, CUDA, reference=ScaledAdd(), backend="cuda")
    cx.compile(lm.CUDACompiler())  # verified against the numpy reference
    for rows in (70, 3):
        data = rng.uniform(-2, 2, (rows, 5)).astype(np.float32)
        a.set(data)
        cx.execute()
        expected = (2 * np.exp(data) + b.numpy() + 1).sum(-1)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_grids_past_65535_blocks_on_y_and_z(rng: np.random.Generator) -> None:
    """An elementwise kernel with 70000 on axis 2, a row softmax with 70000 rows on axis
    1 and a tensor-core product of 70000 batches: the grid is capped, the kernels loop."""
    cx = lm.Graph()
    x_data = rng.standard_normal((70000, 2, 8)).astype(np.float32)
    r_data = rng.standard_normal((70000, 256)).astype(np.float32)
    a_data = rng.uniform(-1, 1, (70000, 16, 16)).astype(np.float16)
    b_data = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    x, r = cx.tensor((70000, 2, 8)).set(x_data), cx.tensor((70000, 256)).set(r_data)
    a = cx.tensor((70000, 16, 16), dtype=lm.float16).set(a_data)
    b = cx.tensor((16, 16), dtype=lm.float16).set(b_data)
    scaled, soft, product = (x * 2.0 + 1.0).retrieve(), r.softmax(-1).retrieve(), (a @ b).retrieve()
    cx.compile(lm.CUDACompiler(rtol=1e-2, atol=1e-2))
    cx.execute()
    np.testing.assert_allclose(scaled.numpy(), x_data * 2 + 1, rtol=1e-6)
    e = np.exp(r_data - r_data.max(-1, keepdims=True))
    np.testing.assert_allclose(soft.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    exact = a_data.astype(np.float32) @ b_data.astype(np.float32)
    np.testing.assert_allclose(product.numpy().astype(np.float32), exact, rtol=1e-2, atol=1e-2)


def test_measured_search_times_options_on_the_gpu(rng: np.random.Generator, tmp_path, monkeypatch):
    """The shared search through the CUDA runtime: options verified against the reference
    and timed on the GPU, the chosen program correct, the second compile from the cache."""
    from tests.backends.cuda.test_search import mlp

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    cx, out, expected = mlp(rng)
    compiler = lm.CUDACompiler(mode="optimal")
    cx.compile(compiler)
    record = compiler.search_record
    assert record is not None and record.backend.startswith("cuda/") and not compiler.cache_hit
    ok = [t for t in record.trials if t.status == "ok"]
    assert ok and all(t.seconds is not None and t.seconds > 0 for t in ok)
    assert all(record.chosen[site] in options for site, options in record.sites.items())
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)
    again, out, expected = mlp(rng)
    second = lm.CUDACompiler(mode="optimal")
    again.compile(second)
    assert second.cache_hit and second.search_record.chosen == record.chosen
    again.execute()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)

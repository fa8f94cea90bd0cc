"""Reductions over a strided axis with contiguous output columns (`lower._column_reduction`):
the reduce loop runs outside and the columns inside, accumulating in the output row.
Values against numpy and torch: sums and maxima (NaN and -inf included), int32 sums
that wrap, symbolic dims, the columns cut into parallel blocks, and a bias gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler, static_program
from luminal.training.autograd import gradients
from tests.kernel.ir_walk import nested_loops


def _run(cx: lm.Graph, *outs: lm.GraphTensor) -> list[np.ndarray]:
    for out in outs:
        out.retrieve()
    cx.compile(CPUCompiler())
    cx.execute()
    return [out.numpy() for out in outs]


def test_strided_sum_puts_the_reduce_loop_outside_the_columns() -> None:
    cx = lm.Graph()
    x = cx.tensor((6, 40, 12)).set(np.ones((6, 40, 12), np.float32))
    x.sum(1).retrieve()
    cx.compile(lm.GenericCompiler())
    (kernel,) = [k.kernel for s in static_program(cx).segments for k in s.kernels]
    loops = [(loop.kind, loop.var) for loop in nested_loops(kernel.body)]
    # rows on threads; per row: the columns set to 0, then per key, every column
    assert loops == [("parallel", "i0_"), ("serial", "i1_"), ("serial", "r0_"), ("serial", "i1_")]
    assert not any(loop.kind == "reduce" for loop in nested_loops(kernel.body))


@pytest.mark.parametrize("shape, axis", [((4, 50, 32), 1), ((3, 20, 5, 33), 1), ((70, 24), 0)])
def test_strided_sum_and_max_match_numpy(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal(shape).astype(np.float32)
    flat = data.reshape(-1)
    flat[3] = np.nan  # NaN propagates through both
    flat[-1] = -np.inf
    cx = lm.Graph()
    x = cx.tensor(shape).set(data)
    total, largest = _run(cx, x.sum(axis), x.max(axis))
    np.testing.assert_allclose(total, data.sum(axis), rtol=1e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(largest, data.max(axis))


def test_keys_at_a_stride_as_in_minilm_with_symbolic_dims() -> None:
    """(V * 0).sum(-2) over keys of V = (x @ w) as heads: the ONNX NaN-row rewrite."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 40, 16)).astype(np.float32)
    w = rng.standard_normal((16, 96)).astype(np.float32)
    w[3, 5] = np.inf  # 0 * inf: a NaN column, as the rewrite relies on

    def want(a: np.ndarray) -> np.ndarray:
        b, s = a.shape[:2]
        with np.errstate(all="ignore"):
            return ((a @ w).reshape(b, s, 3, 32).transpose(0, 2, 1, 3) * 0.0).sum(-2)

    cx = lm.Graph()
    at = cx.tensor(("b", "s", 16)).set(a)
    v = (at @ cx.tensor((16, 96)).set(w)).reshape(("b", "s", 3, 32)).permute((0, 2, 1, 3))
    zeros = (v * 0.0).sum(-2)
    with np.errstate(all="ignore"):  # the verifying reference run makes the NaN too
        (got,) = _run(cx, zeros)
    np.testing.assert_array_equal(got, want(a))
    at.set(a[:1, :7])  # other dims, the same program
    cx.execute()
    np.testing.assert_array_equal(zeros.numpy(), want(a[:1, :7]))


def test_int32_sums_wrap_and_int32_maxima() -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(-(2**31), 2**31 - 1, (5, 30, 16), dtype=np.int64).astype(np.int32)
    cx = lm.Graph()
    x = cx.tensor((5, 30, 16), dtype=lm.int32).set(data)
    total, largest = _run(cx, x.sum(1), x.max(1))
    np.testing.assert_array_equal(total, data.sum(1, dtype=np.int32))  # wraps, as numpy
    np.testing.assert_array_equal(largest, data.max(1))


def test_columns_in_parallel_blocks_when_no_other_axis_is_left() -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((300, 256)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor((300, 256)).set(data)
    total = x.sum(0)
    (got,) = _run(cx, total)
    np.testing.assert_allclose(got, data.sum(0), rtol=1e-5, atol=1e-4)
    cx = lm.Graph()
    cx.tensor((300, 256)).set(data).sum(0).retrieve()
    cx.compile(lm.GenericCompiler())
    (kernel,) = [k.kernel for s in static_program(cx).segments for k in s.kernels]
    loops = [(loop.kind, str(loop.extent)) for loop in nested_loops(kernel.body)]
    # 4 blocks of 64 columns on threads; per block, every key over its 64 columns
    assert loops == [("parallel", "4"), ("serial", "64"), ("serial", "300"), ("serial", "64")]


def test_bias_gradient_matches_torch() -> None:
    """A linear layer's bias gradient: the loss's gradient summed over the batch."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((96, 48)).astype(np.float32)
    w = rng.standard_normal((48, 128)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    cx = lm.Graph()
    xt, wt, bt = (
        cx.tensor(("batch", 48)).set(x),
        cx.tensor((48, 128)).set(w),
        cx.tensor((128,)).set(b),
    )
    loss = (xt @ wt + bt).relu().square().sum()
    grads = _run(cx, *gradients(cx, [wt, bt], loss))
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.relu(torch.tensor(x) @ tw + tb) ** 2).sum().backward()
    np.testing.assert_allclose(grads[0], tw.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads[1], tb.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_per_row_weights_keep_the_column_form() -> None:
    """A weight read per reduced row, w[r] (contiguous along the reduced axis but not
    read by the columns), does not stop the column form: int32, so no BLAS takes it."""
    rng = np.random.default_rng(5)
    data = rng.integers(-1000, 1000, (4, 30, 16)).astype(np.int32)
    weights = rng.integers(-1000, 1000, 30).astype(np.int32)

    def build(cx: lm.Graph) -> lm.GraphTensor:
        x = cx.tensor((4, 30, 16), dtype=lm.int32).set(data)
        w = cx.tensor((30,), dtype=lm.int32).set(weights)
        return (x * w.reshape((1, 30, 1))).sum(1)

    cx = lm.Graph()
    build(cx).retrieve()
    cx.compile(lm.GenericCompiler())
    (kernel,) = [k.kernel for s in static_program(cx).segments for k in s.kernels]
    loops = [(loop.kind, loop.var) for loop in nested_loops(kernel.body)]
    assert loops == [("parallel", "i0_"), ("serial", "i1_"), ("serial", "r0_"), ("serial", "i1_")]
    cx = lm.Graph()
    (got,) = _run(cx, build(cx))
    want = (data * weights.reshape(1, 30, 1)).sum(1, dtype=np.int32)
    np.testing.assert_array_equal(got, want)

"""Padded max pools as one kernel (`compiler/max_pool.py`): the CPU compiler replaces the
zero-padded copy, the window maxima and the ReLU of `max_pool` over a ReLU's output by
one C kernel reading the unpadded input. Checked against torch's max_pool2d (ResNet's
3x3 / 2, stride 1, 2x2 windows, dilation, ceil_mode's extra padding, a symbolic batch,
NaN), through gradients of a compiled graph, the pools it leaves unfused (a copy the
backward reads, padding that reads -inf, rows past the kernel's buffer), the reference
runtime and `unfuse_max_pools`, the OpenCL lowering of a fused graph and the program
cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.compiler import max_pool as fusion
from luminal.custom import CustomKernel
from tests.compiler.cached_runs import two_processes
from tests.conftest import uniform

ATOL, RTOL = 1e-5, 1e-5

CASES = [  # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 8, 16, 16), 3, 2, 1, 1, False),  # ResNet's stem pool
    ((1, 3, 9, 7), 3, 1, 1, 1, False),
    ((2, 4, 8, 10), 2, 2, 1, 1, False),
    ((1, 5, 12, 11), 3, 2, 1, 2, False),  # dilated
    ((2, 3, 9, 8), 3, 2, 1, 1, True),  # ceil_mode: one more padded column and row
    ((1, 2, 7, 13), 5, 3, 2, 1, True),
]


def _fused(graph: lm.Graph) -> int:
    return sum(
        isinstance(n.op, CustomKernel) and isinstance(n.op.reference, fusion.PaddedMaxPool)
        for n in graph.nodes.values()
    )


def _torch_pool(x: np.ndarray | torch.Tensor, bias: np.ndarray, case: tuple) -> torch.Tensor:
    _, kernel, stride, padding, dilation, ceil_mode = case
    t = torch.relu(torch.as_tensor(x) + torch.from_numpy(bias))
    return torch.nn.functional.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode)


def _pooled(cx: lm.Graph, x: lm.GraphTensor, bias: np.ndarray, case: tuple) -> lm.GraphTensor:
    _, kernel, stride, padding, dilation, ceil_mode = case
    shifted = x + cx.tensor(bias.shape).set(bias)
    return lm.nn.MaxPool2d(kernel, stride, padding, dilation, ceil_mode=ceil_mode)(shifted.relu())


def _compiled(rng: np.random.Generator, case: tuple, fused: int = 1) -> tuple:
    """(graph, output, x, bias) of `case`'s pool compiled for the CPU, which fused
    `fused` pools."""
    shape = case[0]
    x, bias = uniform(rng, shape), uniform(rng, (shape[1], 1, 1))
    cx = lm.Graph()
    y = _pooled(cx, cx.tensor(shape).set(x), bias, case).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == fused
    return cx, y, x, bias


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fused_pool_matches_torch(rng, case) -> None:
    cx, y, x, bias = _compiled(rng, case)
    cx.execute()
    np.testing.assert_allclose(y.numpy(), _torch_pool(x, bias, case).numpy(), ATOL, RTOL)


def test_a_symbolic_batch_and_nan_match_torch(rng) -> None:
    """The kernel counts its planes from the input's size (a batch known only at run
    time) and propagates NaN as torch does; an all-negative window with padding gives 0."""
    case = CASES[0]
    cx = lm.Graph()
    x = cx.tensor(("batch", 8, 16, 16))
    bias = uniform(rng, (8, 1, 1))
    y = _pooled(cx, x, bias, case).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    for batch in (1, 3):
        data = uniform(rng, (batch, 8, 16, 16))
        data[0, 0, 5, 7] = np.nan
        data[0, 1, :3, :3] = -5.0
        x.set(data)
        cx.execute()
        expected = _torch_pool(data, bias, case).numpy()
        assert np.isnan(expected).any() and np.isnan(y.numpy()).any()
        np.testing.assert_allclose(y.numpy(), expected, ATOL, RTOL)


def _gradient(x: np.ndarray, bias: np.ndarray, weights: np.ndarray, fuse: bool) -> np.ndarray:
    """d sum(pool(relu(x + bias)) * weights) / dx, differentiated after a CPU compile
    (which fuses the pool) or before any (the replaced nodes' own rules)."""
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x).keep()
    loss = (_pooled(cx, xt, bias, CASES[0]) * cx.tensor(weights.shape).set(weights)).sum()
    loss.retrieve()
    if fuse:
        cx.compile(lm.CPUCompiler())
        assert _fused(cx) == 1
    (grad,) = cx.compile(lm.training.Autograd([xt], loss))
    grad.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    return grad.numpy()


def test_gradients_through_a_fused_pool_match_torch(rng) -> None:
    """A compiled graph holding the fused pool differentiates (its reference's `vjp`
    rebuilds the windows) to torch's gradient: none where the ReLU clips."""
    shape = CASES[0][0]
    x, bias = uniform(rng, shape), uniform(rng, (shape[1], 1, 1))
    weights = uniform(rng, (shape[0], shape[1], 8, 8))
    tx = torch.from_numpy(x).requires_grad_()
    out = _torch_pool(tx, bias, CASES[0])
    (expected,) = torch.autograd.grad((out * torch.from_numpy(weights)).sum(), [tx])
    grad = _gradient(x, bias, weights, fuse=True)
    np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_tied_maxima_share_the_gradient_as_unfused(rng) -> None:
    """Whole numbers tie often (within a window, with the padding's zeros, at the ReLU's
    0): the fused pool's gradient equals the one the unfused nodes' rules give (each tie
    shares evenly; torch gives all to one)."""
    shape = CASES[0][0]
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    bias = np.zeros((shape[1], 1, 1), np.float32)
    weights = uniform(rng, (shape[0], shape[1], 8, 8))
    fused = _gradient(x, bias, weights, fuse=True)
    unfused = _gradient(x, bias, weights, fuse=False)
    np.testing.assert_allclose(fused, unfused, rtol=1e-6, atol=1e-6)
    tx = torch.from_numpy(x).requires_grad_()
    out = _torch_pool(tx, bias, CASES[0])
    (first_index,) = torch.autograd.grad((out * torch.from_numpy(weights)).sum(), [tx])
    assert not np.allclose(fused, first_index.numpy(), atol=1e-3)  # ties were split


def test_a_pool_whose_padded_copy_the_gradient_reads_stays_unfused(rng) -> None:
    """Differentiated before compiling, the backward reads the padded copy, so nothing
    is fused; the gradient still equals torch's."""
    case = CASES[2]
    shape = case[0]
    x, bias = uniform(rng, shape), uniform(rng, (shape[1], 1, 1))
    cx = lm.Graph()
    xt = cx.tensor(shape).set(x)
    loss = _pooled(cx, xt, bias, case).sum().retrieve()
    (grad,) = cx.compile(lm.training.Autograd([xt], loss))
    grad.retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 0
    cx.execute()
    tx = torch.from_numpy(x).requires_grad_()
    (expected,) = torch.autograd.grad(_torch_pool(tx, bias, case).sum(), [tx])
    np.testing.assert_allclose(grad.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_a_pool_without_relu_keeps_its_copy(rng) -> None:
    """Padding that reads -inf (a pool over values that may be negative) is not a view
    of zeros: left as it was, and still equal to torch."""
    x = uniform(rng, (2, 3, 9, 9))
    cx = lm.Graph()
    y = lm.nn.MaxPool2d(3, 2, 1)(cx.tensor(x.shape).set(x)).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 0
    cx.execute()
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1)
    np.testing.assert_allclose(y.numpy(), expected.numpy(), ATOL, RTOL)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[4]], ids=str)
def test_the_reference_runtime_and_unfuse_keep_the_semantics(rng, case) -> None:
    """The fused graph run by the reference runtime (the node's numpy reference), and
    again after `unfuse_max_pools` gives back the copy and the maxima, equals torch."""
    from luminal.reference.executor import execute

    cx, y, x, bias = _compiled(rng, case)
    expected = _torch_pool(x, bias, case).numpy()
    cx.compiled = None
    execute(cx)
    np.testing.assert_allclose(y.numpy(), expected, ATOL, RTOL)
    assert fusion.unfuse_max_pools(cx) == 1 and _fused(cx) == 0
    execute(cx)
    np.testing.assert_allclose(y.numpy(), expected, ATOL, RTOL)


def test_a_fused_graph_runs_on_opencl(rng) -> None:
    """The GPU lowering has no C kernels: it unfuses first, so a graph the CPU compiler
    fused compiles for OpenCL (PoCL here) and still equals torch."""
    case = CASES[1]
    cx, y, x, bias = _compiled(rng, case)
    cx.compile(lm.OpenCLCompiler())
    cx.execute()
    np.testing.assert_allclose(y.numpy(), _torch_pool(x, bias, case).numpy(), ATOL, RTOL)


def test_rows_wider_than_the_kernels_buffer_keep_their_copy(rng) -> None:
    """The kernel holds one padded row on the stack: a row past `MAX_ROW` floats stays
    unfused (and equal to torch), one just inside fuses."""
    for width, fused in ((fusion.MAX_ROW - 2, 1), (fusion.MAX_ROW - 1, 0)):
        case = ((1, 2, 3, width), 3, 2, 1, 1, False)
        cx, y, x, bias = _compiled(rng, case, fused)
        cx.execute()
        np.testing.assert_allclose(y.numpy(), _torch_pool(x, bias, case).numpy(), ATOL, RTOL)


CACHED = """
import json, sys, numpy as np, torch, luminal as lm
from luminal.compiler.max_pool import PaddedMaxPool
from luminal.custom import CustomKernel
x = np.random.default_rng(int(sys.argv[1])).uniform(-1, 1, (2, 4, 10, 9)).astype(np.float32)
cx = lm.Graph()
y = lm.nn.MaxPool2d(3, 2, 1)(cx.tensor(x.shape).set(x).relu()).retrieve()
compiler = lm.CPUCompiler()
cx.compile(compiler)
cx.execute()
expected = torch.nn.functional.max_pool2d(torch.relu(torch.from_numpy(x)), 3, 2, 1).numpy()
fused = sum(
    isinstance(n.op, CustomKernel) and isinstance(n.op.reference, PaddedMaxPool)
    for n in cx.nodes.values()
)
error = float(np.abs(y.numpy() - expected).max())
print(json.dumps({"hit": compiler.program_cache_hit, "fused": fused, "error": error}))
"""


def test_a_fused_program_is_loaded_by_a_second_process(tmp_path) -> None:
    """The program cache pickles the lowered graph: a second process (another input)
    loads the fused pool's node, reference and kernel, and still equals torch."""
    runs = two_processes(CACHED, tmp_path)
    assert [(r["hit"], r["fused"]) for r in runs] == [(False, 1), (True, 1)]
    assert all(r["error"] < ATOL for r in runs)

"""The graphs whose generated kernels are kept as golden sources (tests/backends/golden/).

Each case builds a small graph that exercises one decision of fusion or code generation:
views folded into index arithmetic, row groups, BLAS with and without packing, the K
split, convolutions and their gradients, pooling, gather/scatter, symbolic dims, the
generated matmul with a fused epilogue, int32 arithmetic, reductions over inner axes,
concat/pad and scans. Cases use only tensor methods (no `nn` modules), so a golden
source changes when the compiler changes, not when a layer is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import luminal as lm
from luminal.training.autograd import gradients

Case = Callable[[], tuple[lm.Graph, dict[str, str]]]
CASES: dict[str, Case] = {}
NO_SEARCH: dict[str, str] = {}  # the static program: what mode="fast" compiles


def case(function: Callable[[], lm.Graph | tuple[lm.Graph, dict[str, str]]]) -> Case:
    """Register a builder under its name; a builder may also return a search choice
    (site key prefix -> option prefix) to render a searched kernel."""

    def build() -> tuple[lm.Graph, dict[str, str]]:
        built = function()
        return built if isinstance(built, tuple) else (built, NO_SEARCH)

    CASES[function.__name__] = build
    return build


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _input(cx: lm.Graph, *shape: int, seed: int = 0) -> lm.GraphTensor:
    return cx.tensor(shape).set(_data(*shape, seed=seed))


def _conv2d(x: lm.GraphTensor, w: lm.GraphTensor, k: int) -> lm.GraphTensor:
    """(N, C, H, W) * (O, C, k, k), stride 1, no padding: windows as views, one matmul
    (the shape of the frontend's convolution without its module)."""
    n, c, h, wd = (int(d) for d in x.shape)
    o = int(w.shape[0])
    rows = x.pool_last_dim(k).permute((0, 1, 3, 4, 2)).pool_last_dim(k)  # N,C,Wo,kw,Ho,kh
    rows = rows.permute((0, 4, 2, 1, 5, 3)).reshape((n, (h - k + 1) * (wd - k + 1), c * k * k))
    out = rows @ w.reshape((o, c * k * k)).transpose(0, 1)  # N, positions, O
    return out.transpose(1, 2).reshape((n, o, h - k + 1, wd - k + 1))


@case
def elementwise_views() -> lm.Graph:
    cx = lm.Graph()
    x, y = _input(cx, 6, 4), _input(cx, 5, seed=1)
    ((x.transpose(0, 1)[:, 1:].transpose(0, 1) * y.expand_dim(1, 4)).exp() + 1.0).sqrt().retrieve()
    return cx


@case
def softmax_rows() -> lm.Graph:
    cx = lm.Graph()
    _input(cx, 8, 64).softmax(-1).retrieve()
    return cx


@case
def layer_norm() -> lm.Graph:
    cx = lm.Graph()
    x, w, b = _input(cx, 8, 48), _input(cx, 48, seed=1), _input(cx, 48, seed=2)
    (x.layer_norm(-1, eps=1e-5) * w + b).retrieve()
    return cx


@case
def sgemm_in_place() -> lm.Graph:
    cx = lm.Graph()
    (_input(cx, 32, 48) @ _input(cx, 16, 48, seed=1).transpose(0, 1)).retrieve()
    return cx


@case
def sgemm_packed_operand() -> lm.Graph:
    """An operand computed inline (exp of a transposed view) is packed into scratch."""
    cx = lm.Graph()
    a, b = _input(cx, 32, 48), _input(cx, 24, 48, seed=1)
    (a @ b.exp().transpose(0, 1)).retrieve()
    return cx


@case
def sgemm_batched() -> lm.Graph:
    cx = lm.Graph()
    (_input(cx, 3, 16, 32) @ _input(cx, 3, 32, 8, seed=1)).retrieve()
    return cx


@case
def sgemm_k_split() -> lm.Graph:
    """A small output over a long K: the kernel splits K across threads at run time."""
    cx = lm.Graph()
    (_input(cx, 6, 8192) @ _input(cx, 8192, 5, seed=1)).retrieve()
    return cx


@case
def conv_forward() -> lm.Graph:
    cx = lm.Graph()
    x, w = _input(cx, 2, 3, 10, 10), _input(cx, 4, 3, 3, 3, seed=1)
    _conv2d(x, w, 3).relu().retrieve()
    return cx


@case
def conv_backward() -> lm.Graph:
    """Gradients of a convolution: the weight's sums over the batch (a ContractSum) and
    the input's (col2im)."""
    cx = lm.Graph()
    x, w = _input(cx, 2, 3, 8, 8), _input(cx, 4, 3, 3, 3, seed=1)
    loss = _conv2d(x, w, 3).square().sum()
    for grad in gradients(cx, [x, w], loss):
        grad.retrieve()
    return cx


@case
def pooling() -> lm.Graph:
    """2x2 max pooling (windows of four: short reductions) and a 3-wide average."""
    cx = lm.Graph()
    x = _input(cx, 2, 8, 8)
    pooled = x.pool_last_dim(2, 2).max(-1).transpose(1, 2).pool_last_dim(2, 2).max(-1)
    pooled.retrieve()
    x.pool_last_dim(3).mean(-1).retrieve()
    return cx


@case
def gather_scatter() -> lm.Graph:
    """An embedding lookup and its gradient (a Scatter of the rows back)."""
    cx = lm.Graph()
    table = _input(cx, 10, 6)
    ids = cx.tensor((4,), dtype=lm.int32).set(np.array([3, 0, 9, 3], np.int32))
    loss = (table.gather(ids) * 2.0).sum()
    (grad,) = gradients(cx, [table], loss)
    grad.retrieve()
    return cx


@case
def symbolic_dims() -> lm.Graph:
    cx = lm.Graph()
    x = cx.tensor(("batch", 16)).set(_data(3, 16))
    w = _input(cx, 16, 8, seed=1)
    (x @ w).softmax(-1).retrieve()
    (x.sum(0) * 0.5).retrieve()
    return cx


@case
def matmul_epilogue() -> tuple[lm.Graph, dict[str, str]]:
    """relu(x @ w.T + b) as the generated matmul with the epilogue fused (a searched
    option: the first schedule of the generated matmuls)."""
    cx = lm.Graph()
    x, w, b = _input(cx, 24, 40), _input(cx, 16, 40, seed=1), _input(cx, 16, seed=2)
    (x @ w.transpose(0, 1) + b).relu().retrieve()
    return cx, {"": "gen+epilogue:"}


@case
def integer_ops() -> lm.Graph:
    cx = lm.Graph()
    a = cx.tensor((4, 8), dtype=lm.int32).set(np.arange(32, dtype=np.int32).reshape(4, 8) - 9)
    b = cx.tensor((4, 8), dtype=lm.int32).set(np.full((4, 8), 3, np.int32))
    ((a * b + a) % b).retrieve()
    (a // b).retrieve()
    a.sum(-1).retrieve()
    return cx


@case
def reduce_inner_axis() -> lm.Graph:
    cx = lm.Graph()
    x = _input(cx, 6, 40, 12)
    x.sum(1).retrieve()
    x.max(0).retrieve()
    return cx


@case
def concat_pad() -> lm.Graph:
    cx = lm.Graph()
    x, y = _input(cx, 4, 6), _input(cx, 4, 3, seed=1)
    lm.concat([x, y.pad(((0, 0), (1, 2)), value=-1.0)], axis=1).exp2().retrieve()
    return cx


@case
def cumsum() -> lm.Graph:
    cx = lm.Graph()
    _input(cx, 4, 33).cumsum(-1).retrieve()
    return cx


@case
def row_dot() -> lm.Graph:
    """A product summed along rows: a loop contraction, not BLAS."""
    cx = lm.Graph()
    x, y = _input(cx, 16, 96), _input(cx, 16, 96, seed=1)
    (x * y).sum(-1).retrieve()
    return cx


@case
def half_precision() -> lm.Graph:
    cx = lm.Graph()
    x = _input(cx, 8, 16)
    (x.cast(lm.float16).exp() * 2.0).cast(lm.bfloat16).sum(-1).retrieve()
    return cx


@case
def iota_where() -> lm.Graph:
    """Iota, comparisons and a causal mask: constants and index expressions inline."""
    cx = lm.Graph()
    x = _input(cx, 8, 8)
    (x.tril() + cx.arange(8).cast(lm.float32).expand_dim(0, 8)).retrieve()
    return cx


@case
def python_function() -> lm.Graph:
    """A Python function op splits the runner into two segments."""
    cx = lm.Graph()
    x = _input(cx, 4, 4)
    y = (x * 2.0).print("golden")
    (y.exp() + 1.0).retrieve()
    return cx

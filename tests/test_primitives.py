"""Every primitive, forward, through the reference runtime, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from tests.conftest import assert_matches_torch, uniform

FLOAT_DTYPES = [lm.float32, lm.float16, lm.bfloat16]
TOLERANCE = {lm.float32: (1e-6, 1e-3), lm.float16: (1e-3, 1e-3), lm.bfloat16: (1e-2, 1e-2)}


def _input(cx: lm.Graph, array: np.ndarray, dtype: lm.DType) -> lm.GraphTensor:
    return cx.tensor(array.shape, dtype=dtype).set(array.astype(dtype.numpy))


def _torch(array: np.ndarray, dtype: lm.DType) -> torch.Tensor:
    from tests.conftest import TORCH_DTYPES

    return torch.tensor(array.astype(np.float32)).to(TORCH_DTYPES[dtype])


UNARY = [
    (ops.Log2, torch.log2, (0.1, 4.0)),
    (ops.Exp2, torch.exp2, (-2.0, 2.0)),
    (ops.Sin, torch.sin, (-6.0, 6.0)),
    (ops.Sqrt, torch.sqrt, (0.0, 4.0)),
    (ops.Recip, torch.reciprocal, (0.25, 2.0)),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("op, reference, domain", UNARY, ids=lambda v: getattr(v, "__name__", ""))
def test_unary_primitive(rng, op, reference, domain, dtype):
    data = uniform(rng, (3, 5), *domain)
    cx = lm.Graph()
    out = cx.add_node(op(), [_input(cx, data, dtype)]).retrieve()
    cx.execute()
    atol, rtol = TOLERANCE[dtype]
    assert_matches_torch(out.numpy(), reference(_torch(data, dtype)), atol=atol, rtol=rtol)


BINARY = [
    (ops.Add, torch.add),
    (ops.Mul, torch.mul),
    (ops.Mod, torch.remainder),
    (ops.LessThan, lambda a, b: (a < b).to(a.dtype)),
]


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, lm.int32], ids=lambda d: d.value)
@pytest.mark.parametrize("op, reference", BINARY, ids=lambda v: getattr(v, "__name__", ""))
def test_binary_primitive(rng, op, reference, dtype):
    a = uniform(rng, (4, 3), -5, 5)
    b = uniform(rng, (4, 3), 0.5, 3)
    if dtype == lm.int32:
        a, b = np.trunc(a), np.ceil(b)
    cx = lm.Graph()
    out = cx.add_node(op(), [_input(cx, a, dtype), _input(cx, b, dtype)]).retrieve()
    cx.execute()
    atol, rtol = TOLERANCE.get(dtype, (0, 0))
    assert_matches_torch(
        out.numpy(), reference(_torch(a, dtype), _torch(b, dtype)), atol=atol, rtol=rtol
    )


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [lm.float32, lm.float16, lm.int32], ids=lambda d: d.value)
def test_reduce_primitives(rng, axis, dtype):
    data = uniform(rng, (3, 4, 5))
    if dtype == lm.int32:
        data = np.round(data * 10)
    cx = lm.Graph()
    x = _input(cx, data, dtype)
    total = cx.add_node(ops.SumReduce(axis), [x]).retrieve()
    biggest = cx.add_node(ops.MaxReduce(axis), [x]).retrieve()
    cx.execute()
    atol, rtol = TOLERANCE.get(dtype, (0, 0))
    assert_matches_torch(
        total.numpy(),
        _torch(data, dtype).sum(axis, dtype=_torch(data, dtype).dtype),
        atol=atol,
        rtol=rtol,
    )
    assert_matches_torch(biggest.numpy(), _torch(data, dtype).amax(axis), atol=0, rtol=0)


def test_max_reduce_keeps_infinities_and_nan():
    data = np.array([[-np.inf, -np.inf], [1.0, np.nan], [np.inf, 2.0]], np.float32)
    cx = lm.Graph()
    out = cx.add_node(ops.MaxReduce(1), [_input(cx, data, lm.float32)]).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), torch.tensor(data).amax(1).numpy())


def test_constant_iota_and_symbolic_constant():
    cx = lm.Graph()
    c = cx.constant(2.5).retrieve()
    n = cx.constant("n").retrieve()
    iota = cx.iota(lm.shape.var("z") * 3 % 7, (2, 4)).retrieve()
    cx.set_dim("n", 11)
    cx.execute()
    assert c.numpy().shape == () and c.numpy() == np.float32(2.5)
    assert n.numpy() == 11
    assert_matches_torch(iota.numpy(), (torch.arange(8, dtype=torch.int32) * 3 % 7).reshape(2, 4))


def test_gather_and_scatter_primitives(rng):
    table = uniform(rng, (6, 3))
    indices = np.array([[0, 5], [2, 2]], np.int32)
    updates = uniform(rng, (2, 2, 3))
    cx = lm.Graph()
    t = _input(cx, table, lm.float32)
    idx = cx.tensor((2, 2), dtype=lm.int32).set(indices)
    u = _input(cx, updates, lm.float32)
    gathered = cx.add_node(ops.Gather(), [t, idx]).retrieve()
    scattered = cx.add_node(ops.Scatter(), [t, idx, u]).retrieve()
    cx.execute()
    tt = torch.tensor(table)
    ti = torch.tensor(indices).long()
    assert_matches_torch(gathered.numpy(), torch.nn.functional.embedding(ti, tt))
    expected = tt.index_add(0, ti.reshape(-1), torch.tensor(updates).reshape(-1, 3))
    assert_matches_torch(scattered.numpy(), expected)


@pytest.mark.parametrize(
    "source, target",
    [
        (lm.float32, lm.int32),
        (lm.float32, lm.float16),
        (lm.float32, lm.bfloat16),
        (lm.int32, lm.float32),
        (lm.float32, lm.bool),
        (lm.bool, lm.float32),
    ],
    ids=lambda d: d.value,
)
def test_cast_primitive(source, target):
    data = np.array([-2.7, -0.5, 0.0, 0.49, 1.5, 3.99], np.float32)
    if source == lm.int32:
        data = np.trunc(data)
    if source == lm.bool:
        data = data > 0
    cx = lm.Graph()
    x = cx.tensor(data.shape, dtype=source).set(data.astype(source.numpy))
    out = x.cast(target).retrieve()
    cx.execute()
    from tests.conftest import TORCH_DTYPES

    expected = torch.tensor(data.astype(source.numpy) if source != lm.bfloat16 else data).to(
        TORCH_DTYPES[target]
    )
    assert_matches_torch(out.numpy(), expected, atol=0, rtol=0)


def test_contiguous_function_and_graph_break(rng):
    data = uniform(rng, (3, 4))
    cx = lm.Graph()
    x = _input(cx, data, lm.float32)
    copied = x.permute(1, 0).contiguous().retrieve()
    doubled = cx.add_node(
        ops.Function("double", lambda a: a * 2), [x], shape=(3, 4), dtype=lm.float32
    ).retrieve()
    broken = cx.add_node(ops.GraphBreak(), [x]).retrieve()
    cx.execute()
    assert isinstance(copied.node.op, ops.Contiguous)
    assert_matches_torch(copied.numpy(), torch.tensor(data).T)
    assert_matches_torch(doubled.numpy(), torch.tensor(data) * 2)
    assert_matches_torch(broken.numpy(), torch.tensor(data))

"""Loads that cannot fault are read unconditionally and hoisted out of the loops they do
not depend on (`luminal/kernel/hoist.py`): the padded bias + ReLU of a convolution block
reads its per-channel bias once per channel, outside the pad's select, and computes
what numpy computes; loads the pad really guards stay in the select."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.compiler import CPUCompiler, static_program
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.hoist import hoist_loads, in_bounds
from luminal.kernel.indexing import loop_index
from luminal.kernel.transforms import walk
from luminal.shape.expr import less_than, sym, var


def _padded_bias_relu(cx: lm.Graph, x: np.ndarray, b: np.ndarray, pads, batch="n"):  # noqa: ANN001, ANN201
    """relu(x + b per channel) padded as `pads`, materialised (read twice)."""
    n, c, h, w = x.shape
    xt = cx.tensor((batch, c, h, w)).set(x)
    bt = cx.tensor((c,)).set(b)
    padded = (xt + bt.reshape((1, c, 1, 1))).relu().pad(pads, 0.0).contiguous()
    return padded, padded.sum(-1) + padded.max(-1)


def _reference(x: np.ndarray, b: np.ndarray, pads) -> np.ndarray:  # noqa: ANN001
    y = np.maximum(x + b.reshape(1, -1, 1, 1), 0.0)
    return np.pad(y, [(0, 0) if p is None else p for p in pads])


def _kernels(cx: lm.Graph) -> list[ir.Kernel]:
    return [k.kernel for s in static_program(cx).segments for k in s.kernels]


def _selects(node: object) -> list[ir.Select]:
    if isinstance(node, ir.Select):
        return [node, *_selects(node.a), *_selects(node.b)]
    if isinstance(node, tuple):
        return [s for x in node for s in _selects(x)]
    if isinstance(node, ir.Value | ir.Stmt) and hasattr(node, "__dataclass_fields__"):
        return [s for f in node.__dataclass_fields__ for s in _selects(getattr(node, f))]
    return []


def _loads(node: object) -> list[ir.Load]:
    return [x for x in walk(node) if isinstance(x, ir.Load)]


def test_bias_load_leaves_the_pad_select_and_the_inner_loops() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    cx = lm.Graph()
    _, reduced = _padded_bias_relu(cx, x, b, [None, None, (1, 1), (1, 1)], batch=2)
    reduced.retrieve()
    cx.compile(lm.GenericCompiler())
    (hoisted,) = [k for k in _kernels(cx) if _selects(k.body)]  # rendered: hoisted
    bias = next(i for i, p in enumerate(hoisted.params) if p.elements == sym(8))
    assert hoist_loads(hoisted) == hoisted  # nothing left to hoist
    # the bias is declared once per channel, at the top of the channel loop's body, and
    # read outside the pad's select
    (select,) = _selects(hoisted.body)
    assert all(load.param != bias for load in _loads(select))
    assert [load.param for load in _loads(select)] != []  # the padded input stays guarded
    channel = hoisted.body[0].body[0]
    assert isinstance(channel, ir.Loop) and channel.extent == sym(8)
    first = channel.body[0]
    assert isinstance(first, ir.Declare) and first.const
    assert isinstance(first.value, ir.Load) and first.value.param == bias


@pytest.mark.parametrize(
    "pads",
    [
        [None, None, (1, 1), (1, 1)],  # the convolution's padded input
        [None, (2, 1), (0, 0), (3, 0)],  # the channel axis padded too: the bias is guarded
    ],
)
def test_padded_bias_relu_matches_numpy(pads) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 7, 6)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    b[4] = -np.inf
    cx = lm.Graph()
    padded, reduced = _padded_bias_relu(cx, x, b, pads)
    padded.retrieve()
    reduced.retrieve()
    cx.compile(CPUCompiler())
    cx.execute()
    want = _reference(x, b, pads)
    np.testing.assert_array_equal(padded.numpy(), want)
    np.testing.assert_allclose(reduced.numpy(), want.sum(-1) + want.max(-1), rtol=1e-5)


def test_in_bounds_proves_only_what_holds() -> None:
    i = loop_index("i0_", sym(8))
    j = loop_index("i1_", sym(58))
    extents = {"i0_#": sym(8), "i1_#": sym(58)}
    assert in_bounds(i, sym(8), extents)
    assert not in_bounds(i, sym(7), extents)
    assert not in_bounds(56 * i + j - 57, sym(448), extents)  # a pad's offset
    # symbolic: rows of a (b, s, 384) buffer read at (i0_ < b, r0_ < s)
    b, s = var("b"), var("s")
    rows, keys = loop_index("i2_", b), loop_index("r0_", s)
    symbolic = {"i2_#": b, "r0_#": s, "i1_#": sym(58)}
    assert in_bounds(384 * s * rows + 384 * keys + 5, b * s * 384, symbolic)
    assert not in_bounds(384 * s * rows + 384 * keys + 384, b * s * 384, symbolic)
    # a load hoisted out of a loop over s must not run when s may be 0
    assert not in_bounds(j, 58 * s, symbolic)


def test_a_value_shared_many_times_is_rewritten_once() -> None:
    """Row groups share one value object among all its readers; hoisting rewrites each
    object once per statement (the tree of x -> x * x, 48 levels deep, has 2^48 leaves),
    and the load under the select's branch is hoisted, read by every level."""
    i = loop_index("i0_", sym(8))
    guarded = ir.Load(1, i, DType.float32)  # in bounds: 8 elements
    value: ir.Value = guarded
    for _ in range(48):
        value = ir.Alu("mul", (value, value), DType.float32)
    mask = less_than(i, 4)
    store = ir.Store(0, i, ir.Select(mask, value, ir.Const(0.0, DType.float32)), DType.float32)
    params = (ir.Param(0, DType.float32, True, sym(8)), ir.Param(1, DType.float32, False, sym(8)))
    loop = ir.Loop("i0_", sym(8), "serial", (store,))
    hoisted = hoist_loads(ir.Kernel("k", params, (), (loop,), (0,)))
    declare, rewritten = hoisted.body[0].body
    assert declare == ir.Declare("h1", DType.float32, guarded, const=True)
    level = rewritten.value.a
    for _ in range(48):  # still one object per level, the load replaced at the bottom
        assert level.args[0] is level.args[1]
        level = level.args[0]
    assert level == ir.Var("h1", DType.float32)

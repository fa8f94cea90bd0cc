"""Views: a random chain of movements applied to a ShapeTracker reads exactly what the
same movements give in numpy, through the index/valid expressions and through the
reference runtime's `read_view`; symbolic views agree with concrete ones."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from luminal.reference.views import read_view
from luminal.shape import ConcreteView, Expr, ShapeTracker, sym, var
from luminal.shape import tracker as tr

MAX_ELEMENTS = 400  # keeps the per-element expression checks fast

# A movement is (kind, params); params hold ints or Exprs (symbolic tests).
Op = tuple


@dataclass
class State:
    """A view over `buffer` and the numpy array it must read (`expected`)."""

    view: ShapeTracker
    buffer: np.ndarray
    expected: np.ndarray
    copies: int = 0  # how many times a movement needed a materialising copy


def start(shape: tuple, env: Mapping[str, int]) -> State:
    dims = tuple(sym(d).evaluate(env) for d in shape)
    n = math.prod(dims)
    # values 1..n, so that a real element never looks like padding (0)
    buffer = np.arange(1, n + 1, dtype=np.int64)
    return State(ShapeTracker.contiguous(shape), buffer, buffer.reshape(dims))


def _ints(values, env: Mapping[str, int]) -> tuple:
    return tuple(sym(v).evaluate(env) for v in values)


def numpy_move(array: np.ndarray, op: Op, env: Mapping[str, int]) -> np.ndarray:
    kind, params = op
    if kind == "permute":
        return array.transpose(params)
    if kind == "expand":
        axis, size = params
        expanded = np.expand_dims(array, axis)
        shape = expanded.shape[:axis] + (sym(size).evaluate(env),) + expanded.shape[axis + 1 :]
        return np.broadcast_to(expanded, shape)
    if kind == "slice":
        return array[tuple(slice(*_ints((a, b), env), step) for a, b, step in params)]
    if kind == "pad":
        return np.pad(array, [_ints(p, env) for p in params])
    if kind == "reshape":
        return array.reshape(_ints(params, env))
    kernel, stride, dilation = params
    window = (kernel - 1) * dilation + 1
    return sliding_window_view(array, window, axis=-1)[..., ::stride, ::dilation]


def view_move(view: ShapeTracker, op: Op) -> ShapeTracker | None:
    kind, params = op
    if kind == "permute":
        return view.permute(params)
    if kind == "expand":
        return view.expand(*params)
    if kind == "slice":
        return view.slice(params)
    if kind == "pad":
        return view.pad(params)
    if kind == "reshape":
        return view.reshape(params)
    return view.pool_last_dim(*params)


def expected_record(view: ShapeTracker, op: Op) -> tr.Movement:
    kind, params = op
    if kind == "permute":
        return tr.Permute(tuple(params))
    if kind == "expand":
        return tr.Expand(params[0], sym(params[1]))
    if kind == "slice":
        return tr.Slice(tuple((sym(a), sym(b), step) for a, b, step in params))
    if kind == "pad":
        return tr.Pad(tuple((sym(a), sym(b)) for a, b in params))
    if kind == "reshape":
        return tr.Reshape(view.shape, tuple(sym(d) for d in params))
    return tr.Pool(view.shape[-1], *params)


def apply(state: State, op: Op, env: Mapping[str, int]) -> State:
    """Move the view; where a single view cannot express it, copy (as a Contiguous node
    would) and move the contiguous view of the copy instead."""
    expected = numpy_move(state.expected, op, env)
    moved = view_move(state.view, op)
    if moved is not None:
        assert moved.history == state.view.history + (expected_record(state.view, op),)
        return State(moved, state.buffer, expected, state.copies)
    copy = ShapeTracker.contiguous(state.view.shape)
    moved = view_move(copy, op)
    assert moved is not None, f"{op} must be expressible on a contiguous view"
    assert moved.history == (expected_record(copy, op),)
    buffer = np.ascontiguousarray(state.expected).reshape(-1)
    return State(moved, buffer, expected, state.copies + 1)


# ---------------------------------------------------------------------------
# checking one view against numpy
# ---------------------------------------------------------------------------


def check(state: State, env: Mapping[str, int]) -> None:
    view, buffer, expected = state.view, state.buffer, state.expected
    assert _ints(view.shape, env) == expected.shape
    assert view.n_elements().evaluate(env) == expected.size
    assert view.n_physical_elements().evaluate(env) == buffer.size
    np.testing.assert_array_equal(read_view(buffer, view, env), expected)
    indices, valids = _read_by_expressions(view, env, expected.shape)
    np.testing.assert_array_equal(np.where(valids, buffer[indices * valids], 0), expected)
    # contiguous exactly when reading in logical order walks the whole buffer in order;
    # a symbolic view must be so for every size, so for one size it may only be sound
    in_order = bool(valids.all()) and np.array_equal(indices.reshape(-1), np.arange(buffer.size))
    if env:
        assert in_order or not view.is_contiguous(), view
    else:
        assert view.is_contiguous() == in_order, view


def _read_by_expressions(view: ShapeTracker, env: Mapping[str, int], shape: tuple):
    """Physical index and validity of every logical element, computed three ways
    (per-dim index variables, the flat variable z, literal indices) which must agree."""
    names = [f"i{d}" for d in range(len(shape))]
    per_dim = [var(name, upper=size - 1) for name, size in zip(names, shape, strict=True)]
    index_expr, valid_expr = view.index_expression(per_dim), view.valid_expression(per_dim)
    flat_index, flat_valid = view.index_expression(), view.valid_expression()
    indices = np.zeros(shape, dtype=np.int64)
    valids = np.zeros(shape, dtype=bool)
    for z, position in enumerate(np.ndindex(*shape)):
        local = {**env, **dict(zip(names, position, strict=True))}
        indices[position] = index_expr.evaluate(local)
        valid = valid_expr.evaluate(local)
        assert valid in (0, 1)
        valids[position] = bool(valid)
        assert flat_index.evaluate({**env, "z": z}) == indices[position] or not valid
        assert flat_valid.evaluate({**env, "z": z}) == valid
    for position in _corners(shape):
        assert view.valid_expression(position).evaluate(env) == valids[position]
        if valids[position]:
            assert view.index_expression(position).evaluate(env) == indices[position]
    return indices, valids


def _corners(shape: tuple) -> list[tuple[int, ...]]:
    if 0 in shape:
        return []
    return [tuple(0 for _ in shape), tuple(d - 1 for d in shape), tuple(d // 2 for d in shape)]


# ---------------------------------------------------------------------------
# random movements on concrete shapes
# ---------------------------------------------------------------------------

SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def movement(draw: st.DrawFn, shape: tuple[int, ...]) -> Op:
    """A random valid movement for a concrete `shape`."""
    ndim, size = len(shape), math.prod(shape)
    kinds = ["permute", "slice", "pad", "reshape", "pool"]
    if size * 3 <= MAX_ELEMENTS and ndim < 6:
        kinds.append("expand")
    kind = draw(st.sampled_from(kinds))
    if kind == "permute":
        return kind, tuple(draw(st.permutations(range(ndim))))
    if kind == "expand":
        return kind, (draw(st.integers(0, ndim)), draw(st.integers(1, 3)))
    if kind == "slice":
        ranges = []
        for dim in shape:
            begin = draw(st.integers(0, dim - 1))
            ranges.append((begin, draw(st.integers(begin + 1, dim)), draw(st.integers(1, 3))))
        return kind, tuple(ranges)
    if kind == "pad":
        padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        if math.prod(d + a + b for d, (a, b) in zip(shape, padding, strict=True)) > MAX_ELEMENTS:
            padding = tuple((0, 0) for _ in shape)
        return kind, padding
    if kind == "reshape":
        return kind, draw(_regrouped(shape))
    dilation = draw(st.integers(1, 2))
    kernel = draw(st.integers(1, max(1, (shape[-1] - 1) // dilation + 1)))
    stride = draw(st.integers(1, 3))
    window = (kernel - 1) * dilation + 1
    windows = (shape[-1] - window) // stride + 1
    if size // shape[-1] * windows * kernel > MAX_ELEMENTS:
        kernel, dilation = 1, 1
    return "pool", (kernel, stride, dilation)


@st.composite
def _regrouped(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A new shape with the same elements: the prime factors of the dims, in order,
    regrouped at random (merges, splits and misaligned regroupings), plus 1s."""
    primes = [p for dim in shape for p in _factors(dim)]
    cuts = [i for i in range(1, len(primes)) if draw(st.booleans())]
    bounds = [0, *cuts, len(primes)]
    dims = [math.prod(primes[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims) if dims else (1,)


@given(SHAPES, st.data())
def test_random_movements_read_like_numpy(shape, data):
    state = start(shape, {})
    check(state, {})
    for _ in range(data.draw(st.integers(1, 6), label="length")):
        op = data.draw(movement(state.expected.shape), label="op")
        state = apply(state, op, {})
        check(state, {})


@given(SHAPES, st.data())
def test_movements_of_padded_views_read_like_numpy(shape, data):
    """Masks are where views go wrong: start every chain with padding."""
    padding = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
    state = apply(start(shape, {}), ("pad", padding), {})
    for _ in range(data.draw(st.integers(1, 4), label="length")):
        op = data.draw(movement(state.expected.shape), label="op")
        state = apply(state, op, {})
        check(state, {})


# ---------------------------------------------------------------------------
# symbolic dims: one view, evaluated for several sizes
# ---------------------------------------------------------------------------

N = var("n")
N_VALUES = (9, 13)
SYMBOLIC_STARTS = [(N,), (N, 3), (2, N), (3, N, 2), (N, 1, 4)]


def _at_each_n(dim: Expr) -> list[int]:
    return [dim.evaluate({"n": k}) for k in N_VALUES]


@st.composite
def symbolic_movement(draw: st.DrawFn, shape: tuple[Expr, ...]) -> Op:
    """A movement whose parameters may mention n, valid for every n in N_VALUES."""
    ndim = len(shape)
    kind = draw(st.sampled_from(["permute", "expand", "slice", "pad", "reshape", "pool"]))
    if kind == "permute":
        return kind, tuple(draw(st.permutations(range(ndim))))
    if kind == "expand":
        return kind, (draw(st.integers(0, ndim)), draw(st.sampled_from([1, 2, N])))
    if kind == "slice":
        ranges = []
        for dim in shape:
            begin = draw(st.integers(0, 1)) if min(_at_each_n(dim)) >= 2 else 0
            end = dim - draw(st.integers(0, 1)) if min(_at_each_n(dim)) >= 3 else dim
            ranges.append((begin, end, draw(st.integers(1, 2))))
        return kind, tuple(ranges)
    if kind == "pad":
        return kind, tuple((draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in shape)
    if kind == "reshape":
        return kind, draw(_symbolic_regroup(shape))
    if min(_at_each_n(shape[-1])) < 3:
        return "pool", (1, 1, 1)
    return "pool", (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2)))


@st.composite
def _symbolic_regroup(draw: st.DrawFn, shape: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """Merge two adjacent dims, split one by a constant that divides it, or add a 1."""
    dims = list(shape)
    choice = draw(st.sampled_from(["merge", "split", "unsqueeze"]))
    if choice == "merge" and len(dims) > 1:
        i = draw(st.integers(0, len(dims) - 2))
        dims[i : i + 2] = [dims[i] * dims[i + 1]]
    elif choice == "split":
        i = draw(st.integers(0, len(dims) - 1))
        factor = draw(st.sampled_from([2, 3]))
        if dims[i] % factor == 0:
            dims[i : i + 1] = [dims[i] // factor, sym(factor)]
    else:
        dims.insert(draw(st.integers(0, len(dims))), sym(1))
    return tuple(dims)


def _concrete_op(op: Op, env: Mapping[str, int]) -> Op:
    """The same movement with n replaced by its value."""
    kind, params = op
    if kind == "expand":
        return kind, (params[0], sym(params[1]).evaluate(env))
    if kind == "slice":
        return kind, tuple((*_ints((a, b), env), step) for a, b, step in params)
    if kind == "pad":
        return kind, tuple(_ints(p, env) for p in params)
    if kind == "reshape":
        return kind, _ints(params, env)
    return op


def _same_reads(symbolic: State, concrete: State, env: Mapping[str, int]) -> None:
    resolved = symbolic.view.evaluate(env)
    assert isinstance(resolved, ConcreteView)
    assert resolved == concrete.view.evaluate({}) or np.array_equal(
        read_view(symbolic.buffer, symbolic.view, env),
        read_view(concrete.buffer, concrete.view, {}),
    )


@given(st.sampled_from(SYMBOLIC_STARTS), st.data())
def test_symbolic_views_agree_with_concrete_ones(shape, data):
    ops, current = [], ShapeTracker.contiguous(shape)
    for _ in range(data.draw(st.integers(1, 4), label="length")):
        op = data.draw(symbolic_movement(current.shape), label="op")
        ops.append(op)
        current = view_move(current, op) or view_move(ShapeTracker.contiguous(current.shape), op)
    for n in N_VALUES:
        env = {"n": n}
        symbolic, concrete = start(shape, env), start(_ints(shape, env), {})
        for op in ops:
            symbolic = apply(symbolic, op, env)
            concrete = apply(concrete, _concrete_op(op, env), {})
            check(symbolic, env)
            if symbolic.copies == concrete.copies == 0:
                _same_reads(symbolic, concrete, env)


# ---------------------------------------------------------------------------
# unit tests
# ---------------------------------------------------------------------------


def test_contiguous_reshapes_need_no_copy():
    view = ShapeTracker.contiguous((2, 3, 4))
    assert view.is_contiguous() and view.is_identity()
    for shape in [(6, 4), (24,), (2, 12), (4, 3, 2), (1, 24, 1)]:
        moved = view.reshape(shape)
        assert moved is not None and moved.is_contiguous()
    assert not view.permute((0, 2, 1)).is_contiguous()
    assert view.permute((0, 2, 1)).permute((0, 2, 1)).is_contiguous()
    assert not view.slice([(0, 2, 1), (0, 3, 1), (1, 4, 1)]).is_contiguous()
    assert not view.slice([(0, 1, 1), (0, 3, 1), (0, 4, 1)]).is_contiguous()  # a part
    assert view.slice([(0, 2, 1), (0, 3, 1), (0, 4, 1)]).reshape((24,)).is_contiguous()
    assert not view.expand(0, 2).is_contiguous()
    assert view.expand(1, 1).is_contiguous()
    assert view.pad([(0, 0), (0, 0), (0, 0)]).is_contiguous()
    assert not view.pad([(0, 0), (1, 0), (0, 0)]).is_contiguous()


def test_reshape_of_a_transposed_view_needs_a_copy():
    view = ShapeTracker.contiguous((3, 4)).permute((1, 0))
    assert view.reshape((12,)) is None
    assert view.reshape((2, 2, 3)) is not None  # splitting a permuted dim is a view


def test_n_elements_and_history_are_symbolic():
    n = var("n")
    view = ShapeTracker.contiguous((n, 4)).reshape((n * 2, 2)).pad([(1, 0), (0, 0)])
    assert view.n_elements() == (n * 2 + 1) * 2
    assert view.n_physical_elements() == n * 4
    assert [type(m).__name__ for m in view.history] == ["Reshape", "Pad"]
    assert view.history[0] == tr.Reshape((n, sym(4)), (n * 2, sym(2)))


def test_symbolic_index_expression_is_simplified():
    n = var("n")
    view = ShapeTracker.contiguous((n, 4)).reshape((n * 4,))
    assert view.index_expression() == var("z")
    pooled = ShapeTracker.contiguous((n,)).pool_last_dim(3, 2, 1)
    assert pooled.shape == ((n - 3) // 2 + 1, sym(3))
    assert pooled.index_expression([var("w"), var("k")]) == var("w") * 2 + var("k")


@pytest.mark.parametrize("n", [1, 2, 5])
def test_padding_all_around_reads_zeros(n):
    state = start((n,), {})
    state = apply(state, ("pad", ((2, 3),)), {})
    state = apply(state, ("slice", ((0, 2, 1),)), {})
    check(state, {})
    assert not state.expected.any()

"""Inputs are checked, not wrapped (issue 11, item 5): int32 inputs refuse wider data that
does not fit, gather refuses float/bool indices, set_dim refuses non-integers, reductions
over an empty axis follow PyTorch in both runtimes (known sizes fail while building,
symbolic ones when the graph runs), a symbolic 0 in matmul/layer_norm/var runs in the
reference runtime as compiled, and pad follows numpy.pad. Every error leaves the graph
as it was: the next run is checked against numpy or PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import luminal as lm

EMPTY_VALUE_OPS = ["sum", "mean", "prod", "var", "std"]
EMPTY_RAISING_OPS = ["max", "min", "argmax", "argmin"]


def _torch_reduce(name: str, data: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():  # var/std of too few elements warn, then give NaN
        warnings.simplefilter("ignore")
        result = getattr(torch.from_numpy(data), name)(axis)
    return (result[0] if isinstance(result, tuple) else result).numpy()  # max: (values, ids)


# ---------------------------------------------------------------- int32 data range
def test_int64_data_that_does_not_fit_int32_raises_and_keeps_the_last_data():
    cx = lm.Graph()
    table = cx.tensor((10, 2)).set(np.arange(20, dtype=np.float32).reshape(10, 2))
    ids = cx.tensor((3,), dtype=lm.int32)
    rows = table.gather(ids).retrieve()
    ids.set(np.array([1, 2, 3], np.int64))  # wide but in range: accepted
    for bad in (
        np.array([1, 2**32 + 7, 3], np.int64),  # would wrap to 7: another token
        np.array([-(2**31) - 1, 0, 0], np.int64),
        np.array([2**31, 0, 0], np.uint64),
        np.array([2**31, 0, 0], np.uint32),
    ):
        with pytest.raises(lm.DTypeError, match="outside int32's range"):
            ids.set(bad)
    cx.execute()
    np.testing.assert_array_equal(rows.numpy(), [[2, 3], [4, 5], [6, 7]])
    ids.set(np.array([9, 0, 2**31 - 2**31 + 4], np.uint64))
    cx.execute()
    np.testing.assert_array_equal(rows.numpy(), [[18, 19], [0, 1], [8, 9]])


# ---------------------------------------------------------------- gather indices
@pytest.mark.parametrize("dtype", [lm.float32, lm.float16, lm.bool])
def test_gather_rejects_float_and_bool_indices(dtype):
    rng = np.random.default_rng(0)
    table_data = rng.standard_normal((5, 3)).astype(np.float32)
    cx = lm.Graph()
    table = cx.tensor((5, 3)).set(table_data)
    bad = cx.tensor((2,), dtype=dtype)
    before = cx.num_nodes
    with pytest.raises(lm.DTypeError, match="gather: indices must be int32"):
        table.gather(bad)
    with pytest.raises(lm.DTypeError, match="ids must be int32"):
        lm.nn.Embedding(cx, 5, 3)(bad)
    assert cx.num_nodes == before + 1  # only the Embedding's weight was added
    ids = np.array([[4, 0], [2, 2]], np.int32)
    rows = table.gather(cx.tensor((2, 2), dtype=lm.int32).set(ids)).retrieve()
    cx.execute()
    expected = torch.nn.functional.embedding(
        torch.from_numpy(ids).long(), torch.from_numpy(table_data)
    )
    np.testing.assert_array_equal(rows.numpy(), expected.numpy())


# ---------------------------------------------------------------- set_dim
@pytest.mark.parametrize("size", [2.5, 3.0, "3", True, np.float32(2), None, -1, 2**63])
def test_set_dim_rejects_what_is_not_a_size(size):
    cx = lm.Graph()
    x = cx.tensor(("n",))
    y = (cx.arange("n").cast(lm.float32) * 2).retrieve()
    x.set(np.zeros(3, np.float32))
    with pytest.raises(lm.ShapeError, match="set_dim"):
        cx.set_dim("n", size)
    assert cx.dims == {"n": 3}
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), [0, 2, 4])
    cx.set_dim("n", np.int64(4))  # numpy integers are sizes
    x.set(np.zeros(4, np.float32))
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), [0, 2, 4, 6])


def test_set_dim_rejects_a_name_that_is_not_a_str():
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="name"):
        cx.set_dim(3, 4)
    assert cx.dims == {}


# ---------------------------------------------------------------- empty axes
def _value_reductions(compiled: bool, dim: int | str):
    cx = lm.Graph()
    x = cx.tensor((3, dim))
    outputs = {name: getattr(x, name)(1).retrieve() for name in EMPTY_VALUE_OPS}
    if compiled:
        x.set(np.ones((3, 2 if dim == "n" else dim), np.float32))
        cx.compile(lm.CPUCompiler())
    return cx, x, outputs


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_reductions_over_a_symbolic_empty_axis_follow_pytorch(compiled):
    """sum 0, prod 1, mean/var/std NaN; then the same graph with n > 0."""
    cx, x, outputs = _value_reductions(compiled, "n")
    for n in (0, 1, 4):
        data = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
        x.set(data)
        cx.execute()
        for name, tensor in outputs.items():
            np.testing.assert_allclose(
                tensor.numpy(), _torch_reduce(name, data, 1), rtol=1e-5, atol=1e-6, err_msg=name
            )


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_reductions_over_a_known_empty_axis_follow_pytorch(compiled):
    cx, x, outputs = _value_reductions(compiled, 0)
    data = np.zeros((3, 0), np.float32)
    x.set(data)
    cx.execute()
    for name, tensor in outputs.items():
        np.testing.assert_array_equal(tensor.numpy(), _torch_reduce(name, data, 1), err_msg=name)


@pytest.mark.parametrize("name", EMPTY_RAISING_OPS)
def test_max_and_argmax_of_a_known_empty_axis_raise_while_building(name):
    cx = lm.Graph()
    x = cx.tensor((3, 0))
    before = cx.num_nodes
    with pytest.raises(IndexError):  # PyTorch's own behaviour, for reference
        getattr(torch.zeros(3, 0), name)(1)
    with pytest.raises(lm.ShapeError, match=f"{name} over dim.*needs at least one element"):
        getattr(x, name)(1)
    with pytest.raises(lm.ShapeError, match="needs at least one element"):
        getattr(x, name)()  # every axis
    assert cx.num_nodes == before and cx.dim_checks == []
    total = x.sum(1).retrieve()
    x.set(np.zeros((3, 0), np.float32))
    cx.execute()
    np.testing.assert_array_equal(total.numpy(), np.zeros(3, np.float32))


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_max_and_argmax_of_a_symbolic_empty_axis_raise_when_run(compiled):
    cx = lm.Graph()
    x = cx.tensor((2, "n"))
    outputs = {name: getattr(x, name)(1).retrieve() for name in EMPTY_RAISING_OPS}
    if compiled:
        x.set(np.ones((2, 3), np.float32))
        cx.compile(lm.CPUCompiler())
    x.set(np.zeros((2, 0), np.float32))
    with pytest.raises(lm.ShapeError, match=r"max over dim\(s\) \[1\] of \(2, n\).* n = 0"):
        cx.execute()
    data = np.array([[3.0, -1.0, 3.0, 7.0], [0.5, np.nan, -2.0, -2.0]], np.float32)
    x.set(data)
    cx.execute()
    for name, tensor in outputs.items():
        np.testing.assert_array_equal(tensor.numpy(), _torch_reduce(name, data, 1), err_msg=name)


def test_a_failed_op_takes_its_run_time_check_with_it():
    cx = lm.Graph()
    x = cx.tensor((2, "n"))
    total = x.sum(1).retrieve()
    with pytest.raises(RuntimeError, match="after argmax"), cx.atomic():
        x.argmax(1)
        raise RuntimeError("an op failing after argmax")
    assert cx.dim_checks == []
    x.set(np.zeros((2, 0), np.float32))
    cx.execute()  # n = 0 is fine for what is left: a sum
    np.testing.assert_array_equal(total.numpy(), np.zeros(2, np.float32))


# ---------------------------------------------------------------- symbolic 0 in matmul & co
CASES = {
    "matmul k=0": (lambda a, b: a @ b, [(2, "n"), ("n", 3)], [(2, 0), (0, 3)]),
    "matmul m=0": (lambda a, b: a @ b, [("n", 4), (4, 3)], [(0, 4), (4, 3)]),
    "matmul n=0": (lambda a, b: a @ b, [(2, 4), (4, "n")], [(2, 4), (4, 0)]),
    "batched b=0": (lambda a, b: a @ b, [("n", 2, 4), ("n", 4, 3)], [(0, 2, 4), (0, 4, 3)]),
    "layer_norm rows=0": (lambda a: a.layer_norm(-1), [("n", 4)], [(0, 4)]),
    "layer_norm cols=0": (lambda a: a.layer_norm(-1), [(2, "n")], [(2, 0)]),
    "var rows=0": (lambda a: a.var(1), [("n", 4)], [(0, 4)]),
}
TORCH = {
    "matmul k=0": lambda a, b: a @ b,
    "matmul m=0": lambda a, b: a @ b,
    "matmul n=0": lambda a, b: a @ b,
    "batched b=0": lambda a, b: a @ b,
    "layer_norm rows=0": lambda a: torch.nn.functional.layer_norm(a, a.shape[-1:]),
    "layer_norm cols=0": lambda a: torch.nn.functional.layer_norm(a, a.shape[-1:]),
    "var rows=0": lambda a: a.var(1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_symbolic_zero_runs_in_the_reference_runtime_as_compiled(case):
    build, shapes, data_shapes = CASES[case]
    arrays = [np.ones(s, np.float32) for s in data_shapes]
    with warnings.catch_warnings():  # var over no elements warns
        warnings.simplefilter("ignore")
        expected = TORCH[case](*[torch.from_numpy(a) for a in arrays]).numpy()
    cx = lm.Graph()
    inputs = [cx.tensor(s) for s in shapes]
    out = build(*inputs).retrieve()
    for tensor, array in zip(inputs, arrays, strict=True):
        tensor.set(array)
    cx.execute()
    reference = out.numpy()
    assert reference.shape == expected.shape
    np.testing.assert_array_equal(reference, expected)


def test_a_symbolic_zero_contraction_compiled_writes_zeros():
    """sgemm with K = 0 must still write C (its leading dims are clamped to 1)."""
    cx = lm.Graph()
    a, b = cx.tensor((2, "n")), cx.tensor(("n", 3))
    out = (a @ b).retrieve()
    a.set(np.ones((2, 2), np.float32))
    b.set(np.ones((2, 3), np.float32))
    cx.compile(lm.CPUCompiler())
    for n in (0, 5):
        a.set(np.full((2, n), 2.0, np.float32))
        b.set(np.ones((n, 3), np.float32))
        cx.execute()
        np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 2.0 * n, np.float32))


# ---------------------------------------------------------------- pad
@pytest.mark.parametrize(
    "padding",
    [2, (1, 2), ((1, 2),), ((0, 1), (2, 0)), [(1, 1), None], ((3,), (1,)), ((0, 0), (0, 0))],
    ids=["int", "pair", "one pair", "per dim", "None", "(n,)", "zeros"],
)
@pytest.mark.parametrize("value", [0.0, -1.5, np.nan])
def test_pad_follows_numpy_pad(padding, value):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    width = (
        [p if p is not None else (0, 0) for p in padding] if isinstance(padding, list) else padding
    )
    expected = np.pad(data, width, constant_values=value)
    cx = lm.Graph()
    out = cx.tensor((2, 3)).set(data).pad(padding, value).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize(
    ("padding", "value", "error", "match"),
    [
        (((-1, 0), (0, 0)), 0.0, lm.ShapeError, "negative padding"),
        (-1, 0.0, lm.ShapeError, "negative padding"),
        (((2.5, 0), (0, 0)), 0.0, lm.ShapeError, "pair of ints"),
        (2.5, 0.0, lm.ShapeError, "not an int or a sequence"),
        (((True, 0), (0, 0)), 0.0, lm.ShapeError, "pair of ints"),
        (((1, 1), (1, 1), (1, 1)), 0.0, lm.ShapeError, "3 pad pairs for \\(2, 3\\)"),
        (((1, 2, 3), (0, 0)), 0.0, lm.ShapeError, "pair of ints"),
        ((1, 1), "zero", lm.DTypeError, "real number"),
    ],
)
def test_invalid_pads_raise_and_leave_the_graph_as_it_was(padding, value, error, match):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    cx = lm.Graph()
    x = cx.tensor((2, 3)).set(data)
    before = cx.num_nodes
    with pytest.raises(error, match=match):
        x.pad(padding, value)
    assert cx.num_nodes == before
    out = x.pad(((1, 0), (0, 1)), 7.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), np.pad(data, ((1, 0), (0, 1)), constant_values=7))


def test_pad_of_int32_with_nan_is_a_dtype_error():
    cx = lm.Graph()
    x = cx.tensor((2,), dtype=lm.int32).set(np.array([4, 5], np.int32))
    with pytest.raises(lm.DTypeError, match="NaN"):
        x.pad(1, np.nan)
    out = x.pad(1, 9).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), np.pad([4, 5], 1, constant_values=9))

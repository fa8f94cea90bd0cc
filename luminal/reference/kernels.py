"""One numpy implementation per primitive type (the reference semantics).

Inputs arrive as logical arrays (views applied, broadcast dims stride-0). Floating
ops compute in float32 and round to the node's dtype, as PyTorch does on CPU for
float16/bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from luminal import ops
from luminal.dtype import DType
from luminal.errors import ExecutionError
from luminal.reference.attention import fused_attention
from luminal.reference.contraction import contract
from luminal.reference.winograd import winograd_conv
from luminal.shape.expr import Atom, Expr

Kernel = Callable[[Any, list[np.ndarray], "KernelContext"], np.ndarray]


class KernelContext:
    """What a kernel may need beyond its inputs: the node and the dimension map."""

    def __init__(
        self, node: Any, dims: Mapping[str, int], input_dtypes: list | None = None
    ) -> None:
        self.node = node
        self.dims = dims
        self.input_dtypes = input_dtypes or []

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.evaluate(self.dims) for d in self.node.shape)

    @property
    def dtype(self) -> DType:
        return self.node.dtype


def compute_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype arithmetic is done in."""
    return np.dtype(np.float32) if dtype.is_float else dtype.numpy


def _input(op: ops.Input, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    raise AssertionError("inputs are provided by the executor")


def _constant(op: ops.Constant, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    value = op.value
    if isinstance(value, Expr):  # numpy's integer semantics, as in C: x // 0 == x % 0 == 0
        value = evaluate_array(value, ctx.dims, np.zeros((), dtype=np.int64))
    return np.array(value, dtype=compute_dtype(ctx.dtype))


def _iota(op: ops.Iota, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    shape = ctx.shape
    z = np.arange(int(np.prod(shape)), dtype=np.int64)
    values = evaluate_array(op.expr, ctx.dims, z)
    return np.broadcast_to(values, z.shape).reshape(shape).astype(compute_dtype(ctx.dtype))


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def kernel(op: Any, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(inputs[0])

    return kernel


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(op: Any, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(inputs[0], inputs[1])

    return kernel


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's floor modulo, warnings silenced: integer x % 0 == 0 and INT_MIN % -1 == 0
    (the compiled runtime computes the same without a trap)."""
    return np.mod(a, b)


_SHORT_AXIS = 8


def _fold(ufunc: np.ufunc, x: np.ndarray, axis: int) -> np.ndarray:
    """Reduce a short axis slice by slice: numpy's reduce over a short strided axis is
    several times slower than a few elementwise passes (relu is a max over 2)."""
    lead = (slice(None),) * axis
    result = np.array(x[lead + (0,)], copy=True)
    for i in range(1, x.shape[axis]):
        ufunc(result, x[lead + (i,)], out=result)
    return result


def _sum(op: ops.SumReduce, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    x = inputs[0]
    with np.errstate(all="ignore"):
        if 0 < x.shape[op.axis] <= _SHORT_AXIS and x.ndim > 1:
            return _fold(np.add, x, op.axis)
        return np.sum(x, axis=op.axis, dtype=x.dtype)


def _max(op: ops.MaxReduce, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    x = inputs[0]
    if x.shape[op.axis] == 0:
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        shape = x.shape[: op.axis] + x.shape[op.axis + 1 :]
        return np.full(shape, fill, dtype=x.dtype)
    with np.errstate(all="ignore"):
        if x.shape[op.axis] <= _SHORT_AXIS and x.ndim > 1:
            return _fold(np.maximum, x, op.axis)
        return np.max(x, axis=op.axis)


def _check_indices(name: str, indices: np.ndarray, rows: int) -> np.ndarray:
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        raise ExecutionError(
            f"{name}: index out of range: indices span [{indices.min()}, {indices.max()}] "
            f"but the table has {rows} rows"
        )
    return indices


def _gather(op: ops.Gather, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    table, indices = inputs
    _check_indices("Gather", indices, table.shape[0])
    return np.take(table, indices, axis=0)


def _scatter(op: ops.Scatter, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    base, indices, updates = inputs
    _check_indices("Scatter", indices, base.shape[0])
    out = np.array(base, copy=True)
    np.add.at(out, indices.reshape(-1), updates.reshape((-1,) + base.shape[1:]))
    return out


def _cast(op: ops.Cast, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    x = inputs[0]
    if op.dtype == DType.bool:
        return x != 0
    if op.dtype == DType.int32 and x.dtype.kind == "f":
        return float_to_int32(x)
    return x.astype(op.dtype.numpy).astype(compute_dtype(op.dtype))


INT32_MIN = np.iinfo(np.int32).min


def float_to_int32(x: np.ndarray) -> np.ndarray:
    """Truncation toward zero; NaN, infinities and values outside int32 give INT_MIN on
    every platform (numpy's own cast leaves them to the CPU: INT_MIN on x86, saturated on
    ARM), as the compiled runtime does."""
    truncated = np.trunc(x.astype(np.float64))
    inside = (truncated >= INT32_MIN) & (truncated <= np.iinfo(np.int32).max)
    return np.where(inside, truncated, INT32_MIN).astype(np.int32)


def _function(op: ops.Function, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    try:
        result = op.fn(*inputs)
    except Exception as error:  # a user callable: report which op failed
        raise ExecutionError(
            f"Function '{op.label}' raised {type(error).__name__}: {error}"
        ) from error
    result = np.asarray(result)
    if result.shape != ctx.shape:
        raise ExecutionError(
            f"Function '{op.label}' returned shape {result.shape}, expected {ctx.shape}"
        )
    return result


def _identity(op: Any, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    return inputs[0]


def _contract(op: ops.Contract, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    return contract(inputs[0], inputs[1], op.axis)


def _contract_sum(op: ops.ContractSum, inputs: list[np.ndarray], ctx: KernelContext) -> np.ndarray:
    product = contract(inputs[0], inputs[1], op.axis)
    return product.sum(axis=op.outer - (op.outer > op.axis), dtype=product.dtype)


def _recip(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(x) if x.dtype.kind == "f" else 1 / x


KERNELS: dict[type, Kernel] = {
    ops.Input: _input,
    ops.Constant: _constant,
    ops.Iota: _iota,
    ops.Log2: _unary(np.log2),
    ops.Exp2: _unary(np.exp2),
    ops.Sin: _unary(np.sin),
    ops.Sqrt: _unary(np.sqrt),
    ops.Recip: _unary(_recip),
    ops.Add: _binary(np.add),
    ops.Mul: _binary(np.multiply),
    ops.Mod: _binary(_mod),
    ops.LessThan: _binary(np.less),
    ops.SumReduce: _sum,
    ops.MaxReduce: _max,
    ops.Contiguous: _identity,
    ops.Gather: _gather,
    ops.Scatter: _scatter,
    ops.Cast: _cast,
    ops.Function: _function,
    ops.GraphBreak: _identity,
    ops.Contract: _contract,
    ops.ContractSum: _contract_sum,
    ops.FusedAttention: fused_attention,
    ops.WinogradConv: winograd_conv,
}


def evaluate_array(expr: Expr, dims: Mapping[str, int], z: np.ndarray) -> np.ndarray:
    """Evaluate `expr` elementwise, with variable "z" bound to an index array."""
    total: Any = np.zeros_like(z)
    for mono, coef in expr.terms:
        product: Any = np.full_like(z, coef)
        for atom in mono:
            product = product * _atom_array(atom, dims, z)
        total = total + product
    return total


def _atom_array(atom: Atom, dims: Mapping[str, int], z: np.ndarray) -> Any:
    if atom.op == "var":
        name = atom.args[0]
        return z if name == "z" else Expr((((atom,), 1),)).evaluate(dims)
    a = evaluate_array(atom.args[0], dims, z)
    b = evaluate_array(atom.args[1], dims, z)
    table = {
        "floordiv": np.floor_divide,
        "mod": np.mod,
        "min": np.minimum,
        "max": np.maximum,
        "lt": lambda x, y: (x < y).astype(z.dtype),
        "ge": lambda x, y: (x >= y).astype(z.dtype),
        "and": lambda x, y: ((x != 0) & (y != 0)).astype(z.dtype),
        "or": lambda x, y: ((x != 0) | (y != 0)).astype(z.dtype),
    }
    with np.errstate(divide="ignore"):  # a dim of 0 as divisor gives 0, never raises
        return table[atom.op](a, b)

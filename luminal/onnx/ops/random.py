"""Seeded random ops (RandomUniform, RandomNormal, their *Like forms, Bernoulli), drawn
exactly as ONNX's reference evaluator draws them.

ONNX leaves a random op's values to the implementation ("may not produce the same values
in different implementations, even if a seed is specified"). Its reference evaluator
draws from a fresh `numpy.random.RandomState(int(seed))` at every run, so a seeded op's
output is a function of the seed, the shape and (Bernoulli) the probabilities; luminal
computes that same function, bit for bit. RandomUniform/RandomNormal(+Like) are
constants fixed at load; Bernoulli on run-time probabilities is a `Function` op that
draws on the host at every run. Unseeded ops (fresh values per run) are rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal import ops
from luminal.dtype import float32
from luminal.onnx import dtypes
from luminal.onnx.context import NodeContext, is_static
from luminal.shape.expr import Expr
from luminal.tensor import GraphTensor


def _seed(ctx: NodeContext) -> int:
    seed = ctx.attr("seed")
    if seed is None or np.isnan(seed):
        raise ctx.unsupported(
            "an unseeded random op (fresh values at every run); give it a `seed` attribute"
        )
    return int(seed)


def _like(ctx: NodeContext) -> tuple[tuple[int, ...], np.dtype]:
    """The shape of input 0 (known at load) and the numpy type of the output: the
    `dtype` attribute, else the input's declared ONNX type."""
    x = ctx.inputs[0]
    if is_static(x):
        shape, elem = x.shape, dtypes.from_numpy(x.dtype)
    else:
        dims = [d.as_int() if isinstance(d, Expr) else int(d) for d in x.view.shape]
        if None in dims:
            raise ctx.unsupported("a random *Like op needs its input's shape known at load")
        shape, elem = tuple(dims), ctx.elem_type(0) or dtypes.from_numpy(x.dtype.numpy)
    return shape, dtypes.numpy_dtype(ctx.attr("dtype") or elem)


def _draw(ctx: NodeContext, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The reference's values, in its order of operations: from a fresh
    RandomState(seed), `rand` scaled to [low, high) or `randn` scaled and shifted,
    rounded to the output type before the scaling and after it."""
    state = np.random.RandomState(_seed(ctx))
    if ctx.node.op_type.startswith("RandomUniform"):
        res = state.rand(*shape).astype(dtype)
        res *= ctx.attr("high", 1.0) - ctx.attr("low", 0.0)
        res += ctx.attr("low", 0.0)
    else:
        res = state.randn(*shape).astype(dtype)
        res *= ctx.attr("scale", 1.0)
        res += ctx.attr("mean", 0.0)
    return res.astype(dtype)


def _generator(ctx: NodeContext) -> np.ndarray:
    """RandomUniform/RandomNormal: the `shape` attribute, float32 unless `dtype` says."""
    shape = tuple(int(d) for d in ctx.attr("shape"))
    return _draw(ctx, shape, dtypes.numpy_dtype(ctx.attr("dtype", 1)))


def _generator_like(ctx: NodeContext) -> np.ndarray:
    return _draw(ctx, *_like(ctx))


@dataclass(frozen=True)
class SeededBernoulli:
    """The reference's draw: `RandomState(seed).binomial(1, p)`, reseeded at every call,
    so equal probabilities give equal outputs (one uniform per element; none where
    p == 0). ONNX defines p in [0, 1] only, where the reference raises: here p is
    clamped into it and NaN draws 0, so the op is total (CPUCompiler's check feeds
    values in [-1, 1])."""

    seed: int

    def __call__(self, p: np.ndarray) -> np.ndarray:
        probabilities = np.clip(np.nan_to_num(np.asarray(p, dtype=np.float64), nan=0.0), 0, 1)
        return np.random.RandomState(self.seed).binomial(1, probabilities).astype(np.float32)


def _bernoulli(ctx: NodeContext) -> np.ndarray | GraphTensor:
    draw = SeededBernoulli(_seed(ctx))
    elem = ctx.attr("dtype") or ctx.elem_type(0)
    p = ctx.inputs[0]
    if is_static(p):
        return draw(p).astype(dtypes.numpy_dtype(elem or dtypes.from_numpy(p.dtype)))
    label = f"onnx Bernoulli seed={draw.seed}"
    ones = p.graph.add_node(ops.Function(label, draw), [p], p.view.shape, float32)
    return ones.cast(dtypes.luminal_dtype(elem)) if elem else ones.cast(p.dtype)


RULES = {
    "RandomUniform": _generator,
    "RandomUniformLike": _generator_like,
    "RandomNormal": _generator,
    "RandomNormalLike": _generator_like,
    "Bernoulli": _bernoulli,
}

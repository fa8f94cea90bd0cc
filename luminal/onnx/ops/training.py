"""ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum): one update step,
elementwise, for every tensor the node lists. The step count T is a run-time scalar,
so its `T > 0` branches are exact selects, not load-time choices."""

from __future__ import annotations

import math
from collections.abc import Callable

from luminal.dtype import float32
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import select
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _groups(ctx: NodeContext, per: int) -> list[list[GraphTensor]]:
    """The node's tensors after (R, T): `per` lists of n each (X..., G..., V..., H...)."""
    n = (len(ctx) - 2) // per
    if n < 1 or 2 + n * per != len(ctx):
        raise ctx.invalid(f"expects 2 + {per} * n inputs, got {len(ctx)}")
    return [[ctx.tensor(2 + k * n + i) for i in range(n)] for k in range(per)]


def _scalars(ctx: NodeContext) -> tuple[GraphTensor, GraphTensor]:
    """(R, T) as float32 scalars."""
    return ctx.tensor(0).cast(float32).reshape(()), ctx.tensor(1).cast(float32).reshape(())


def _adagrad(ctx: NodeContext) -> list[GraphTensor]:
    r, t = _scalars(ctx)
    decay, eps = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0)
    norm = ctx.attr("norm_coefficient", 0.0)
    xs, gs, hs = _groups(ctx, 3)
    rate = r / (t * decay + 1.0)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        g = x * norm + g
        h = h + g * g
        new_x.append(x - rate * g / (h.sqrt() + eps))
        new_h.append(h)
    return new_x + new_h


def _adam(ctx: NodeContext) -> list[GraphTensor]:
    r, t = _scalars(ctx)
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    eps, norm = ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
    post = ctx.attr("norm_coefficient_post", 0.0)
    xs, gs, vs, hs = _groups(ctx, 4)
    corrected = r * (1.0 - (t * _log(beta)).exp()).sqrt() / (1.0 - (t * _log(alpha)).exp())
    rate = select(t.gt(0.0), corrected, r)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        g = x * norm + g
        v = v * alpha + g * (1.0 - alpha)
        h = h * beta + g * g * (1.0 - beta)
        new_x.append((x - rate * (v / (h.sqrt() + eps))) * (1.0 - post))
        new_v.append(v)
        new_h.append(h)
    return new_x + new_v + new_h


def _log(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf


def _momentum(ctx: NodeContext) -> list[GraphTensor]:
    r, t = _scalars(ctx)
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    norm, mode = ctx.attr("norm_coefficient"), ctx.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise ctx.unsupported(f"mode={mode!r}")
    xs, gs, vs = _groups(ctx, 3)
    one = ctx.graph.constant(1.0, float32)
    step = select(t.gt(0.0), ctx.graph.constant(float(beta), float32), one)
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        g = x * norm + g
        v = v * alpha + step * g
        new_x.append(x - r * (v if mode == "standard" else g + v * alpha))
        new_v.append(v)
    return new_x + new_v


RULES: dict[str, Rule] = {"Adagrad": _adagrad, "Adam": _adam, "Momentum": _momentum}

"""Optional values (opset 15+): an optional holding a tensor is that tensor, an empty
one is None (as an omitted input is); it may hold a sequence (a list, see sequence.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from luminal.onnx.context import NodeContext, Value

Rule = Callable[[NodeContext], object]


def _optional(ctx: NodeContext) -> list[Value]:
    return [ctx.inputs[0] if ctx.has(0) else None]  # a list: the value may be a sequence


def _get_element(ctx: NodeContext) -> list[Value]:
    if not ctx.has(0):
        raise ctx.invalid("the optional input is empty (OptionalGetElement needs a value)")
    return [ctx.inputs[0]]


def _has_element(ctx: NodeContext) -> np.ndarray:
    """Known at load: whether the input is there does not depend on data."""
    return np.array(ctx.has(0))


RULES: dict[str, Rule] = {
    "Optional": _optional,
    "OptionalGetElement": _get_element,
    "OptionalHasElement": _has_element,
}

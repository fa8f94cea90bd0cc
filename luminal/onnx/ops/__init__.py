"""The op table: ONNX op type (default domain) -> rule, assembled here in one visible
place from one module per op family. A rule takes a `NodeContext` and returns the
node's output value(s)."""

from __future__ import annotations

from collections.abc import Callable

from luminal.onnx.ops import (
    activations,
    bitwise,
    control_flow,
    elementwise,
    indexing,
    matmul,
    nn_ops,
    recurrent,
    reductions,
    resize,
    shape_ops,
)

Rule = Callable[..., object]

RULES: dict[str, Rule] = {
    **elementwise.RULES,
    **activations.RULES,
    **bitwise.RULES,
    **control_flow.RULES,
    **reductions.RULES,
    **shape_ops.RULES,
    **indexing.RULES,
    **matmul.RULES,
    **nn_ops.RULES,
    **recurrent.RULES,
    **resize.RULES,
}

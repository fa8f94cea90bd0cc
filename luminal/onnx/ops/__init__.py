"""The op tables: ONNX op type (default domain) -> rule, and (domain, op type) -> rule
for the other domains, assembled here in one visible place from one module per op
family. A rule takes a `NodeContext` and returns the node's output value(s)."""

from __future__ import annotations

from collections.abc import Callable

from luminal.onnx.ops import (
    activations,
    bitcast,
    bitwise,
    control_flow,
    elementwise,
    indexing,
    internal,
    matmul,
    ml,
    nn_ops,
    optional,
    pool_index,
    quantize,
    random,
    recurrent,
    reductions,
    resize,
    sampling,
    sequence,
    shape_ops,
    signal,
    text,
    training,
    value_shaped,
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
    **optional.RULES,
    **sampling.RULES,
    **signal.RULES,
    **text.RULES,
    **pool_index.RULES,
    **bitcast.RULES,
    **quantize.RULES,
    **sequence.RULES,
    **value_shaped.RULES,
    **random.RULES,
}

DOMAIN_RULES: dict[tuple[str, str], Rule] = {
    **{("ai.onnx.ml", op): rule for op, rule in ml.RULES.items()},
    **{("ai.onnx.preview.training", op): rule for op, rule in training.RULES.items()},
    **{("luminal.internal", op): rule for op, rule in internal.RULES.items()},
}

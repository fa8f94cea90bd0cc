"""If, Loop and Scan, imported by running their bodies inline.

A luminal graph has no control flow, so these become straight-line graphs: an If whose
condition is known at load runs one branch; an If decided at run time runs both and
selects between their outputs elementwise (exact), which needs equal output shapes.
Loop and Scan are unrolled: a Loop's trip count (and every iteration's condition) must
be known at load, a Scan's length is its input's dim. Each iteration runs the body on
the previous iteration's values, so shape arithmetic inside the body still folds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext, Value, is_static
from luminal.onnx.ops.common import axis_of, select
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]
MAX_ITERATIONS = 4096  # an unrolled loop longer than this is rejected, not imported


def _flag(value: Value) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


def _shape(value: Value) -> tuple:
    return tuple(value.view.shape) if isinstance(value, GraphTensor) else np.shape(value)


def _if(ctx: NodeContext) -> list[Value]:
    then_branch, else_branch = ctx.attr("then_branch"), ctx.attr("else_branch")
    if is_static(ctx.inputs[0]):
        branch = then_branch if _flag(ctx.inputs[0]) else else_branch
        return ctx.run_subgraph(branch, {})
    taken = ctx.run_subgraph(then_branch, {})
    other = ctx.run_subgraph(else_branch, {})
    pairs = list(zip(taken, other, strict=True))
    if any(isinstance(v, list) or v is None for pair in pairs for v in pair) or any(
        _shape(a) != _shape(b) for a, b in pairs
    ):  # sequences, optionals or different shapes: the condition must be known
        ctx.static(0, "cond")
    condition = ctx.tensor(0).reshape(())
    results = []
    for index, (a, b) in enumerate(zip(taken, other, strict=True)):
        name = f"{ctx.node.output[index]}_branch"
        a = a if isinstance(a, GraphTensor) else ctx.lift(np.asarray(a), name + "_then")
        b = b if isinstance(b, GraphTensor) else ctx.lift(np.asarray(b), name + "_else")
        results.append(select(condition, a, b))
    return results


def _stack(ctx: NodeContext, values: list[Value], axis: int, name: str) -> Value:
    """Per-iteration values stacked along a new `axis` (numpy when all are known)."""
    if all(is_static(v) for v in values):
        return np.stack([np.asarray(v) for v in values], axis)
    tensors = [
        v if isinstance(v, GraphTensor) else ctx.lift(np.asarray(v), f"{name}_{i}")
        for i, v in enumerate(values)
    ]
    return concat([t.unsqueeze(axis) for t in tensors], axis)


def _at(value: Value, index: int, axis: int) -> Value:
    """value[..., index, ...] along `axis`, that axis dropped."""
    if is_static(value):
        return np.take(np.asarray(value), index, axis)
    ranges: list[Any] = [None] * value.ndim
    ranges[axis] = (index, index + 1)
    return value.slice(ranges).squeeze(axis)


def _loop(ctx: NodeContext) -> list[Value]:
    body: onnx.GraphProto = ctx.attr("body")
    trip = int(np.asarray(ctx.static(0, "M")).reshape(-1)[0]) if ctx.has(0) else None
    running = _flag(ctx.static(1, "cond")) if ctx.has(1) else True
    carried = list(ctx.inputs[2:])
    scans: list[list[Value]] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    names = [i.name for i in body.input]
    iteration = 0
    while running and (trip is None or iteration < trip):
        if iteration >= MAX_ITERATIONS:
            raise ctx.unsupported(f"a loop of more than {MAX_ITERATIONS} iterations (unrolled)")
        feeds = {names[0]: np.array(iteration, np.int64), names[1]: np.array(running)}
        feeds.update(zip(names[2:], carried, strict=True))
        outputs = ctx.run_subgraph(body, feeds)
        if not is_static(outputs[0]):
            raise ctx.unsupported(
                "a loop condition computed at run time (the trip count depends on data)"
            )
        running = _flag(outputs[0])
        carried = outputs[1 : 1 + len(carried)]
        for scan, value in zip(scans, outputs[1 + len(carried) :], strict=True):
            scan.append(value)
        iteration += 1
    if scans and iteration == 0:
        raise ctx.unsupported("a loop that runs no iteration but has scan outputs")
    stacked = [_stack(ctx, s, 0, f"{ctx.node.output[0]}_scan") for s in scans]
    return [*carried, *stacked]


def _scan_steps(
    ctx: NodeContext,
    states: list[Value],
    inputs: list[Value],
    input_axes: list[int],
    input_reverse: list[bool],
    output_axes: list[int],
    output_reverse: list[bool],
) -> list[Value]:
    """The unrolled Scan body: final states, then the stacked scan outputs."""
    body: onnx.GraphProto = ctx.attr("body")
    names = [i.name for i in body.input]
    length = int(_shape(inputs[0])[input_axes[0]]) if inputs else 0
    if length > MAX_ITERATIONS:
        raise ctx.unsupported(f"a scan of more than {MAX_ITERATIONS} steps (unrolled)")
    scans: list[list[Value]] = [[] for _ in range(len(body.output) - len(states))]
    for step in range(length):
        feeds = dict(zip(names, states, strict=False))
        for name, value, axis, backward in zip(
            names[len(states) :], inputs, input_axes, input_reverse, strict=True
        ):
            feeds[name] = _at(value, length - 1 - step if backward else step, axis)
        outputs = ctx.run_subgraph(body, feeds)
        states = outputs[: len(states)]
        for scan, value in zip(scans, outputs[len(states) :], strict=True):
            scan.append(value)
    if scans and length == 0:
        raise ctx.unsupported("a scan of length 0 with scan outputs")
    stacked = []
    for index, (scan, backward) in enumerate(zip(scans, output_reverse, strict=True)):
        rank = len(_shape(scan[0])) + 1
        axis = axis_of(output_axes[index], rank)
        ordered = scan[::-1] if backward else scan
        stacked.append(_stack(ctx, ordered, axis, f"{ctx.node.output[0]}_scan{index}"))
    return [*states, *stacked]


def _scan(ctx: NodeContext) -> list[Value]:
    if ctx.opset < 9:
        return _scan_batched(ctx)
    count = ctx.attr("num_scan_inputs")
    states, inputs = list(ctx.inputs[:-count]), list(ctx.inputs[-count:])
    outputs = len(ctx.attr("body").output) - len(states)
    input_axes = [
        axis_of(a, len(_shape(v)))
        for a, v in zip(ctx.attr("scan_input_axes", [0] * count), inputs, strict=True)
    ]
    return _scan_steps(
        ctx,
        states,
        inputs,
        input_axes,
        [bool(d) for d in ctx.attr("scan_input_directions", [0] * count)],
        list(ctx.attr("scan_output_axes", [0] * outputs)),
        [bool(d) for d in ctx.attr("scan_output_directions", [0] * outputs)],
    )


def _scan_batched(ctx: NodeContext) -> list[Value]:
    """Scan-8: axis 0 of every state and input is a batch, inputs scan along axis 1;
    each batch entry is scanned on its own and the results stacked."""
    if ctx.has(0):
        lengths = np.asarray(ctx.static(0, "sequence_lens")).reshape(-1)
        if len(set(lengths.tolist())) > 1:
            raise ctx.unsupported("Scan-8 with sequence_lens that differ between batch entries")
    count = ctx.attr("num_scan_inputs")
    values = list(ctx.inputs[1:])
    states, inputs = values[:-count], values[-count:]
    directions = [bool(d) for d in ctx.attr("directions", [0] * count)]
    outputs = len(ctx.attr("body").output) - len(states)
    batch = int(_shape(values[0])[0])
    per_batch = [
        _scan_steps(
            ctx,
            [_at(s, b, 0) for s in states],
            [_at(x, b, 0) for x in inputs],
            [0] * count,
            directions,
            [0] * outputs,
            [False] * outputs,
        )
        for b in range(batch)
    ]
    return [
        _stack(ctx, [r[i] for r in per_batch], 0, f"{ctx.node.output[i] or 'scan'}_batch")
        for i in range(len(per_batch[0]))
    ]


RULES: dict[str, Rule] = {"If": _if, "Loop": _loop, "Scan": _scan}

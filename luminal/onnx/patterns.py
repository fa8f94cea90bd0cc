"""Exporter patterns rewritten before import, each exactly equal to what it replaces.

PyTorch exports `scaled_dot_product_attention` as
`MatMul(Where(IsNaN(P), 0, P), V)` with `P = Softmax(scores, axis=-1)`: rows that are
masked everywhere (softmax 0/0 = NaN) give 0. luminal's Where is an exact select, a
gather per element, and on the (batch, heads, queries, keys) weights it cost more than
the products around it (MiniLM: a third of the run). A softmax row is NaN everywhere or
nowhere (a NaN or +inf score makes the row's sum NaN, a row of -inf shifts by -inf - -inf),
so the select moves after the product, on a (…, queries, width) tensor, its condition
read from the first weight of each row:

    NanRowsZeroMatMul(P, V) = Where(IsNaN(P[..., :1]), 0, P @ V)

which equals the original for every input, V's own NaNs included (a finite row of P
keeps P @ V; a NaN row gives 0 whatever V holds).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

# the private domain of the rewritten nodes (their rules: ops.internal)
DOMAIN = "luminal.internal"


def rewrite(graph: onnx.GraphProto, opset: int) -> list[onnx.NodeProto]:
    """The graph's nodes with every NaN-guarded attention product replaced."""
    nodes = list(graph.node)
    producer = {out: node for node in nodes for out in node.output if out}
    uses = Counter(name for node in nodes for name in node.input if name)
    uses.update(o.name for o in graph.output)
    zeros = _zero_scalars(graph, nodes)
    dropped: set[int] = set()
    replaced: dict[int, onnx.NodeProto] = {}
    for node in nodes:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        where = producer.get(node.input[0])
        match = _guarded_softmax(where, producer, uses, zeros, opset)
        if match is None:
            continue
        softmax_out, isnan = match
        replaced[id(node)] = helper.make_node(
            "NanRowsZeroMatMul",
            [softmax_out, node.input[1]],
            list(node.output),
            name=node.name,
            domain=DOMAIN,
        )
        dropped.add(id(where))
        if uses[isnan.output[0]] == 1:
            dropped.add(id(isnan))
    return [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]


def _guarded_softmax(where, producer, uses, zeros, opset) -> tuple[str, onnx.NodeProto] | None:
    """(P, the IsNaN node) when `where` is Where(IsNaN(P), 0, P) read only by the
    product, with P a Softmax over the last axis."""
    if where is None or where.op_type != "Where" or uses[where.output[0]] != 1:
        return None
    condition, zero, weights = where.input
    isnan = producer.get(condition)
    softmax = producer.get(weights)
    if isnan is None or isnan.op_type != "IsNaN" or isnan.input[0] != weights:
        return None
    if zero not in zeros or softmax is None or softmax.op_type != "Softmax":
        return None
    axes = {a.name: helper.get_attribute_value(a) for a in softmax.attribute}
    if axes.get("axis", -1 if opset >= 13 else 1) != -1:
        return None
    return weights, isnan


def _zero_scalars(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> set[str]:
    """Names of values that are one float 0 (a Constant node or an initializer)."""
    found = set()
    for init in graph.initializer:
        if _is_zero(init):
            found.add(init.name)
    for node in nodes:
        if node.op_type == "Constant" and len(node.attribute) == 1:
            attribute = node.attribute[0]
            if attribute.name == "value" and _is_zero(attribute.t):
                found.add(node.output[0])
    return found


def _is_zero(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type != onnx.TensorProto.FLOAT or np.prod(tensor.dims, dtype=int) != 1:
        return False
    value = numpy_helper.to_array(tensor).reshape(-1)[0]
    return bool(value == 0 and not np.signbit(value))  # +0: a -0 row would differ in sign

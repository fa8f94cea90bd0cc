"""Exporter patterns rewritten before import, so the CPU compiler sees attention as
luminal's own models spell it (and fuses it into one kernel).

1. PyTorch exports `scaled_dot_product_attention` as `MatMul(Where(IsNaN(P), 0, P), V)`
   with `P = Softmax(scores, axis=-1)`: rows masked everywhere (softmax 0/0 = NaN) give 0.
   luminal's Where is an exact select, a gather per element: on the (batch, heads,
   queries, keys) weights it cost a third of MiniLM's run, and as a second reader of P
   it kept the attention from fusing. A softmax row is NaN everywhere or nowhere (a NaN
   or +inf score makes the row's sum NaN; a row of -inf shifts by -inf - -inf), so the
   node becomes `NanRowsZeroMatMul(P, V)` (`ops/internal.py`): the product with V, whose
   rows that are NaN in every column (all of P's NaN rows among them) are then set to
   what a row of zeros times V gives. Exact for every input, V's own NaNs included.
2. The same export scales q and k by sqrt(scale) each before their product, so both
   scaled operands were copied; `MatMul(Mul(q, a), Mul(k, b))` becomes
   `Mul(MatMul(q, k), a * b)` for scalar constants a, b: the scale on the scores, as the
   fused attention takes it. This reassociates the float products (about one ulp of the
   scores), like onnxruntime's own attention fusion.
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
    uses = _uses(nodes, graph)
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
    rewritten = [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]
    return _scales_after_products(rewritten, graph, _uses(rewritten, graph))


def _uses(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> Counter:
    """How many nodes (and graph outputs) read each value, counting the nodes of nested
    graphs (If/Loop/Scan bodies read outer values by name): over-counting only keeps a
    pattern as it is."""
    uses = Counter(name for node in nodes for name in node.input if name)
    uses.update(o.name for o in graph.output)
    for node in nodes:
        for attribute in node.attribute:
            for body in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                uses.update(_uses(list(body.node), body))
    return uses


def _scales_after_products(
    nodes: list[onnx.NodeProto], graph: onnx.GraphProto, uses: Counter
) -> list[onnx.NodeProto]:
    """MatMul(Mul(q, a), Mul(k, b)) -> Mul(MatMul(q, k), a * b) for scalar constants a, b
    (either Mul may be absent): PyTorch's attention export scales q and k by sqrt(scale)
    each, which makes the compiler copy both scaled operands; on the product the scale
    is one multiply the fused attention takes in. Float rounding differs by
    reassociation only (about one ulp of the scores)."""
    producer = {out: node for node in nodes for out in node.output if out}
    scalars = _float_scalars(graph, nodes)
    dropped: set[int] = set()
    out: list[onnx.NodeProto] = []
    for node in nodes:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        operands, scale, rank = [], 1.0, 0
        for name in node.input:
            mul = producer.get(name)
            factor = _scaled(mul, scalars, uses)
            if factor is None:
                operands.append(name)
                continue
            source, (value, scalar_rank) = factor
            operands.append(source)
            scale *= value
            rank = max(rank, scalar_rank)  # a (1, 1, 1) factor broadcast q to rank 3
            dropped.add(id(mul))
        if operands == list(node.input):
            out.append(node)
            continue
        product, constant = f"{node.output[0]}__unscaled", f"{node.output[0]}__scale"
        value = numpy_helper.from_array(np.full((1,) * rank, scale, np.float32), constant)
        out += [
            helper.make_node("MatMul", operands, [product], name=node.name),
            helper.make_node("Constant", [], [constant], value=value),
            helper.make_node("Mul", [product, constant], list(node.output)),
        ]
    return [n for n in out if id(n) not in dropped]


def _scaled(
    mul, scalars: dict[str, tuple[float, int]], uses: Counter
) -> tuple[str, tuple[float, int]] | None:
    """(x, a) when `mul` is Mul(x, a) or Mul(a, x) with a float scalar constant, read
    by one node only."""
    if mul is None or mul.op_type != "Mul" or uses[mul.output[0]] != 1:
        return None
    a, b = mul.input
    if b in scalars and a not in scalars:
        return a, scalars[b]
    if a in scalars and b not in scalars:
        return b, scalars[a]
    return None


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
    """Names of values that are one float +0 (a -0 would give rows of -0) of rank 0 or 1
    (a higher rank would raise the Where's rank above P's)."""
    return {
        name
        for name, (value, rank) in _float_scalars(graph, nodes).items()
        if value == 0 and not np.signbit(value) and rank <= 1
    }


def _float_scalars(
    graph: onnx.GraphProto, nodes: list[onnx.NodeProto]
) -> dict[str, tuple[float, int]]:
    """Values that are one float32 number (a Constant node or an initializer): the
    number and the tensor's rank."""
    found = {}
    tensors = [(init.name, init) for init in graph.initializer]
    for node in nodes:
        attributes = node.attribute
        if node.op_type == "Constant" and len(attributes) == 1 and attributes[0].name == "value":
            tensors.append((node.output[0], attributes[0].t))
    for name, tensor in tensors:
        if tensor.data_type == onnx.TensorProto.FLOAT and np.prod(tensor.dims, dtype=int) == 1:
            found[name] = (float(numpy_helper.to_array(tensor).reshape(-1)[0]), len(tensor.dims))
    return found

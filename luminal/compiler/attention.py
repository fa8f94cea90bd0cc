"""Attention fusion: find softmax(q kᵀ * scale + mask) v in a lowered graph and replace
it by one `ops.FusedAttention` node (flash-style: the (L, S) scores are never stored).

A graph pass, not an e-graph rule, on purpose: the pattern spans a dozen nodes whose
*views* decide whether it is attention (q constant along the key axis, k and v along the
query axis, the weights broadcast along v's width, the softmax's max and sum broadcast
back along the key axis), and the e-graph holds views as opaque interned ids that rules
cannot inspect. Run after extraction, the pass sees the canonical form the e-graph
produced (products lowered to `ops.Contract`, softmax's normalisation decoded) with every
view concrete, and it checks every node it removes is read only inside the pattern.
The node keeps the user's semantics: `reference/attention.py` computes exactly the
replaced subgraph, and compiled graphs are verified against the original graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from luminal import ops
from luminal.compiler.pattern import live_nodes, private, replace_pattern
from luminal.dtype import DType, float32
from luminal.graph import Edge, Graph, Node
from luminal.shape.expr import Expr, var
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

LOG2_E = 1.0 / math.log(2.0)
# unmasked attention over a number of keys in this range, known at compile time, ran
# faster unfused (two sgemms at full speed, docs/attention.md, measured on AMD Zen 4);
# masked attention (causal, padding: the unfused softmax pays glibc's slow exp path for
# every masked score), short or long sequences, and symbolic lengths are fused
UNFUSED_KEYS = range(129, 2048)


@dataclass
class Match:
    """One attention found: the edges the fused node reads, its scale, and the nodes it
    replaces (the last one is the output product)."""

    q: Edge
    k: Edge
    v: Edge
    mask: Edge | None
    scale: float
    replaced: list[int]


class _Matcher:
    """Walks up from a product with v, one expected node at a time."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.seen: list[int] = []

    def node(self, edge: Edge, kind: type, identity: bool = True) -> Node | None:
        node = self.graph.nodes[edge.source]
        if type(node.op) is not kind or node.dtype != DType.float32:
            return None
        if identity and not edge.view.is_identity():
            return None
        self.seen.append(node.id)
        return node

    def constant(self, edge: Edge) -> float | None:
        node = self.graph.nodes[edge.source]
        if isinstance(node.op, ops.Constant) and isinstance(node.op.value, int | float):
            return float(node.op.value)
        return None

    def split(self, node: Node, kind: type, identity: bool = True) -> tuple[Node, Edge] | None:
        """(the operand of type `kind`, the other edge) of a binary node, either order."""
        for first, second in ((0, 1), (1, 0)):
            mark = len(self.seen)
            found = self.node(node.inputs[first], kind, identity)
            if found is not None:
                return found, node.inputs[second]
            del self.seen[mark:]
        return None


def _constant_along(view: ShapeTracker, axis: int) -> bool:
    """Whether reading `view` gives the same element at every index of `axis`."""
    if view.mask is not None and view.mask[axis] != (0, view.shape[axis]):
        return False
    return view.strides[axis] == 0 or view.shape[axis] == 1


def _spread_row(view: ShapeTracker, source: tuple, axis: int) -> bool:
    """Whether `view` is the contiguous `source` with one broadcast axis inserted at
    `axis` (a per-row value read along the row, or weights read along v's width)."""
    expected = ShapeTracker.contiguous(source).expand(axis, view.shape[axis])
    return (
        tuple(view.source_shape) == tuple(source)
        and view.mask is None
        and view.offset == 0
        and view.strides == expected.strides
        and view.shape == expected.shape
    )


def _stretched_row(view: ShapeTracker, source: tuple, axis: int) -> bool:
    """`source` of shape (*rows, 1) stretched along its last axis (keepdim, broadcast)."""
    return (
        tuple(view.source_shape) == tuple(source)
        and view.mask is None
        and view.offset == 0
        and view.strides[axis] == 0
        and view.strides[:axis] == ShapeTracker.contiguous(source).strides[:axis]
    )


def match_attention(graph: Graph, product: Node, readers: dict[int, set[int]]) -> Match | None:
    """The attention whose output is `product` (weights @ v as an `ops.Contract`)."""
    if type(product.op) is not ops.Contract or product.dtype != DType.float32:
        return None
    ndim = len(product.inputs[0].view.shape)
    if product.op.axis != ndim - 1 or ndim < 3:
        return None
    rows = ndim - 3  # the query axis; the scores are (*batch, L, S)
    for weights_at, v_at in ((0, 1), (1, 0)):
        m = _Matcher(graph)
        found = _match_from(m, product, product.inputs[weights_at], product.inputs[v_at], rows)
        if found is not None and private(graph, readers, found.replaced):
            return found
    return None


def _match_from(m: _Matcher, product: Node, weights_edge: Edge, v: Edge, rows: int):
    """Match the softmax and the scores above `weights_edge`; None if anything differs."""
    weights = m.node(weights_edge, ops.Mul, identity=False)
    if weights is None or not _spread_row(weights_edge.view, weights.shape, rows + 1):
        return None
    if not _constant_along(v.view, rows):
        return None
    split = m.split(weights, ops.Exp2)
    if split is None:
        return None
    exps, inverse_edge = split
    inverse = m.node(inverse_edge, ops.Recip, identity=False)
    total = None if inverse is None else m.node(inverse.inputs[0], ops.SumReduce, False)
    if total is None or total.op.axis != rows + 1:
        return None
    if tuple(inverse.shape) == (*total.shape, 1):  # keepdim, stretched back along the row
        spread = _stretched_row(inverse_edge.view, inverse.shape, rows + 1)
    else:  # the row's value broadcast along it
        spread = _spread_row(inverse_edge.view, inverse.shape, rows + 1)
    if not spread:
        return None
    if total.inputs[0].source != exps.id or not total.inputs[0].view.is_identity():
        return None
    scaled = m.node(exps.inputs[0], ops.Mul)
    split = None if scaled is None else m.split(scaled, ops.Add)
    if split is None or not math.isclose(m.constant(split[1]) or 0.0, LOG2_E, rel_tol=1e-7):
        return None
    shifted = split[0]
    return _match_shift(m, product, shifted, v, rows)


def _match_shift(m: _Matcher, product: Node, shifted: Node, v: Edge, rows: int):
    """shifted = scores + max(scores) * -1, then the scores themselves."""
    for first, second in ((0, 1), (1, 0)):
        negated_edge, scores_edge = shifted.inputs[first], shifted.inputs[second]
        negated = m.graph.nodes[negated_edge.source]
        if type(negated.op) is not ops.Mul or not negated_edge.view.is_identity():
            continue
        if not scores_edge.view.is_identity():
            continue
        for peak_at in (0, 1):
            peak_edge, minus = negated.inputs[peak_at], negated.inputs[1 - peak_at]
            peak = m.graph.nodes[peak_edge.source]
            if type(peak.op) is not ops.MaxReduce or m.constant(minus) != -1.0:
                continue
            if peak.op.axis != rows + 1 or not _spread_row(peak_edge.view, peak.shape, rows + 1):
                continue
            read = peak.inputs[0]
            if read.source != scores_edge.source or not read.view.is_identity():
                continue
            m.seen += [negated.id, peak.id]
            return _match_scores(m, product, m.graph.nodes[scores_edge.source], v, rows)
    return None


def _scaled_product(m: _Matcher, node: Node) -> tuple[Node, float] | None:
    """(the score product, its scale) of `node` = q kᵀ or q kᵀ * constant."""
    if type(node.op) is ops.Contract:
        return node, 1.0
    if type(node.op) is not ops.Mul:
        return None
    for first in (0, 1):
        edge, other = node.inputs[first], node.inputs[1 - first]
        inner = m.graph.nodes[edge.source]
        scale = m.constant(other)
        if type(inner.op) is ops.Contract and edge.view.is_identity() and scale is not None:
            return inner, scale
    return None


def _match_scores(m: _Matcher, product: Node, scores: Node, v: Edge, rows: int):
    """scores = q kᵀ [* scale] [+ mask], q kᵀ an `ops.Contract` over the last axis."""
    mask: Edge | None = None
    found = _scaled_product(m, scores)
    if found is None and type(scores.op) is ops.Add:
        for first in (0, 1):
            edge, other = scores.inputs[first], scores.inputs[1 - first]
            inner = m.graph.nodes[edge.source]
            found = _scaled_product(m, inner) if edge.view.is_identity() else None
            if found is not None:
                mask = other
                m.seen.append(inner.id)
                break
    if found is None:
        return None
    current, scale = found
    m.seen += [scores.id, current.id]
    if current.dtype != DType.float32 or current.op.axis != rows + 2:
        return None
    if len(current.inputs[0].view.shape) != rows + 3:
        return None
    q, k = _query_and_key(current, rows)
    if q is None or mask is not None and m.graph.nodes[mask.source].dtype != DType.float32:
        return None
    if mask is not None and tuple(mask.view.shape) != tuple(scores.shape):
        return None
    if not _shapes_agree(current, product, v, rows):
        return None
    replaced = list(dict.fromkeys(m.seen)) + [product.id]
    return Match(q, k, v, mask, scale, replaced)


def _query_and_key(scores: Node, rows: int) -> tuple[Edge | None, Edge | None]:
    """(q, k) of the score product: q constant along the key axis, k along the query's."""
    a, b = scores.inputs
    for q, k in ((a, b), (b, a)):
        if _constant_along(q.view, rows + 1) and _constant_along(k.view, rows):
            return q, k
    return None, None


def _shapes_agree(scores: Node, product: Node, v: Edge, rows: int) -> bool:
    """The score product's (*batch, L, S) is the weights' and v's index space."""
    logical = tuple(scores.inputs[0].view.shape)
    spread = tuple(v.view.shape)
    return logical[: rows + 2] == spread[: rows + 1] + spread[rows + 2 :] and (
        tuple(product.shape) == spread[: rows + 2]
    )


def fuse_attention(graph: Graph) -> int:
    """Replace every attention of `graph` worth fusing (`worth_fusing`) by an
    `ops.FusedAttention` node; returns how many were fused. Nodes the pattern no longer
    needs are removed."""
    readers = graph.readers()
    fused = 0
    for node in live_nodes(graph):
        match = match_attention(graph, node, readers)
        if match is None:
            continue
        causal = None if match.mask is None else causal_mask_of(graph, match.mask)
        if not worth_fusing(match, causal is not None):
            continue
        _apply(graph, match, causal, readers)
        fused += 1
    return fused


def causal_mask_of(graph: Graph, mask: Edge) -> tuple[Expr, float] | None:
    """(offset, value) when `mask` reads `iota(row + offset < key).cast(float32) * value`
    (`nn.attention.causal_mask` without a window) broadcast over the batch axes."""
    node = graph.nodes[mask.source]
    if type(node.op) is not ops.Mul or len(node.shape) != 2 or mask.view.mask is not None:
        return None
    spread = ShapeTracker.contiguous(node.shape)
    for _ in range(len(mask.view.shape) - 2):
        spread = spread.expand(0, 1)
    if mask.view.offset != 0 or mask.view.strides != spread.strides:
        return None
    for first in (0, 1):
        cast_edge, value_edge = node.inputs[first], node.inputs[1 - first]
        cast = graph.nodes[cast_edge.source]
        value = graph.nodes[value_edge.source].op
        if not (isinstance(value, ops.Constant) and isinstance(value.value, int | float)):
            continue
        if type(cast.op) is not ops.Cast or not cast_edge.view.is_identity():
            continue
        iota = graph.nodes[cast.inputs[0].source]
        if type(iota.op) is ops.Iota and cast.inputs[0].view.is_identity():
            offset = _causal_offset(iota.op.expr, node.shape[1])
            if offset is not None and iota.dtype == DType.int32:
                return offset, float(value.value)
    return None


def _causal_offset(expr: Expr, keys: Expr) -> Expr | None:
    """`offset` when `expr` is exactly (z // keys + offset) < z % keys."""
    if len(expr.terms) != 1 or expr.terms[0][1] != 1 or len(expr.terms[0][0]) != 1:
        return None
    (atom,) = expr.terms[0][0]
    z = var("z")
    if atom.op != "lt" or atom.args[1] != z % keys:
        return None
    offset = atom.args[0] - z // keys
    return None if "z" in offset.variables() else offset


def worth_fusing(match: Match, causal: bool) -> bool:
    """Whether the fused kernel beats the unfused graph (see UNFUSED_KEYS); a length only
    known at run time is fused."""
    keys = match.k.view.shape[-2].as_int()
    masked = causal or match.mask is not None
    return masked or keys is None or keys not in UNFUSED_KEYS


def _apply(
    graph: Graph,
    match: Match,
    causal: tuple[Expr, float] | None,
    readers: dict[int, set[int]],
) -> None:
    mask = match.mask
    op = ops.FusedAttention(match.scale)
    if causal is not None:
        op = ops.FusedAttention(match.scale, causal[0], causal[1])
        mask = None
    edges = [match.q, match.k, match.v] + ([mask] if mask is not None else [])
    replace_pattern(graph, op, edges, match.replaced, readers)


def causal_mask_tensor(
    graph: Graph, offset: Expr, value: float, length: Expr, keys: Expr
) -> GraphTensor:
    """The (L, S) mask a causal node holds as data, as the iota `causal_mask` builds."""
    z = var("z")
    hidden = (z // keys + offset).lt(z % keys)
    return graph.iota(hidden, (length, keys)).cast(float32) * value


def unfuse_attention(graph: Graph) -> int:
    """Replace every `ops.FusedAttention` by the products and softmax it stands for (for a
    lowering without a kernel for it, such as the GPU's); returns how many."""
    from luminal.tensor import GraphTensor

    count = 0
    for node in [n for n in graph.nodes.values() if isinstance(n.op, ops.FusedAttention)]:
        q, k, v = node.inputs[:3]
        rows = len(node.shape) - 2
        logical = tuple(q.view.shape)
        product = graph.insert(ops.Contract(rows + 2), (q, k), logical[:-1], DType.float32)
        scores = GraphTensor(graph, product, ShapeTracker.contiguous(logical[:-1]), DType.float32)
        scores = scores * node.op.scale
        if node.op.causal_offset is not None:
            causal = causal_mask_tensor(
                graph, node.op.causal_offset, node.op.causal_value, logical[rows], logical[rows + 1]
            )
            scores = scores + causal
        if len(node.inputs) == 4:
            mask = node.inputs[3]
            scores = scores + GraphTensor(graph, mask.source, mask.view, DType.float32)
        weights = scores.softmax(-1).expand_dim(rows + 1, node.shape[-1])
        spread = Edge(weights._node_id, 0, weights.view)
        out = graph.insert(ops.Contract(rows + 2), (spread, v), node.shape, DType.float32)
        graph.replace(node.id, out)
        count += 1
    return count

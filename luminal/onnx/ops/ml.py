"""ai.onnx.ml ops that are plain tensor arithmetic: ArrayFeatureExtractor (a gather on
the last axis), Binarizer (a threshold) and TreeEnsemble (opset 5), whose trees are
attributes: every leaf's path is known at load, so a leaf is reached where the product
of its path's node tests is 1, and the outputs are one weighted sum (or min/max) over
leaves. String-valued ml ops are not imported (luminal computes on numbers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.dtype import float32
from luminal.hl.combine import concat
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import select, take, wrap_negative
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def _array_feature_extractor(ctx: NodeContext) -> GraphTensor:
    """data[..., indices], the indices flattened; 1-D data gives one row (as onnxruntime)."""
    data, indices = ctx.tensor(0), ctx.tensor(1).reshape((-1,))
    picked = take(data, wrap_negative(indices, data.view.shape[-1]), data.ndim - 1)
    return picked.reshape((1, -1)) if data.ndim == 1 else picked


def _binarizer(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    return x.gt(float(ctx.attr("threshold", 0.0))).cast(x.dtype)


# TreeEnsemble node modes
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


class _Trees:
    """The ensemble's attributes, with each leaf's path as (node, went_true) pairs."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.modes = [int(m) for m in np.asarray(ctx.attr("nodes_modes")).reshape(-1)]
        self.splits = np.asarray(ctx.attr("nodes_splits"), np.float64).reshape(-1)
        self.features = list(ctx.attr("nodes_featureids"))
        self.true_ids = ctx.attr("nodes_truenodeids")
        self.false_ids = ctx.attr("nodes_falsenodeids")
        self.true_leaf = ctx.attr("nodes_trueleafs")
        self.false_leaf = ctx.attr("nodes_falseleafs")
        missing = ctx.attr("nodes_missing_value_tracks_true", [0] * len(self.modes))
        self.missing_true = list(missing)
        self.members = self._member_sets(ctx.attr("membership_values"))
        # (leaf index, path) for every leaf every tree reaches
        self.leaves: list[tuple[int, list[tuple[int, bool]]]] = []
        for root in ctx.attr("tree_roots"):
            if (
                self.true_leaf[root]
                and self.false_leaf[root]
                and (self.true_ids[root] == self.false_ids[root])
            ):
                self.leaves.append((self.true_ids[root], []))
            else:
                self._walk(root, [])

    def _member_sets(self, values: Any) -> dict[int, list[float]]:
        """membership_values: one NaN-terminated run per MEMBER node, in node order."""
        sets: dict[int, list[float]] = {}
        runs: list[list[float]] = [[]]
        for v in np.asarray(values if values is not None else [], np.float64).reshape(-1):
            if np.isnan(v):
                runs.append([])
            else:
                runs[-1].append(float(v))
        members = [i for i, m in enumerate(self.modes) if m == _MEMBER]
        if len(members) > len(runs) - 1:
            raise self.ctx.invalid("membership_values has fewer sets than MEMBER nodes")
        for k, node in enumerate(members):
            sets[node] = runs[k]
        return sets

    def _walk(self, node: int, path: list[tuple[int, bool]]) -> None:
        if len(path) > len(self.modes):
            raise self.ctx.invalid("the tree has a cycle")
        for went, target, is_leaf in (
            (True, self.true_ids[node], self.true_leaf[node]),
            (False, self.false_ids[node], self.false_leaf[node]),
        ):
            step = [*path, (node, went)]
            if is_leaf:
                self.leaves.append((target, step))
            else:
                self._walk(target, step)

    def test(self, x: GraphTensor, node: int) -> GraphTensor:
        """Node `node`'s test on every row of x (N, F), as 0/1 float32 (N,)."""
        column = x.slice([None, (self.features[node], self.features[node] + 1)]).reshape((-1,))
        mode, split = self.modes[node], float(self.splits[node])
        if mode == _MEMBER:
            hits = [column.eq(v).cast(float32) for v in self.members[node]]
            passed = sum(hits[1:], hits[0]) if hits else column.ne(column).cast(float32) * 0.0
            passed = passed.minimum(1.0)
        elif mode in _COMPARE:
            passed = _COMPARE[mode](column, split).cast(float32)
        else:
            raise self.ctx.unsupported(f"node mode {mode}")
        if self.missing_true[node]:
            passed = passed.maximum(column.ne(column).cast(float32))
        return passed


_COMPARE = {
    _LEQ: lambda c, s: c.le(s),
    _LT: lambda c, s: c.lt(s),
    _GTE: lambda c, s: c.ge(s),
    _GT: lambda c, s: c.gt(s),
    _EQ: lambda c, s: c.eq(s),
    _NEQ: lambda c, s: c.ne(s),
}


def _tree_ensemble(ctx: NodeContext) -> GraphTensor:
    x = ctx.tensor(0)
    source = x.cast(float32) if x.dtype != float32 else x
    if ctx.attr("post_transform", 0) != 0:
        raise ctx.unsupported(f"post_transform={ctx.attr('post_transform')}")
    trees = _Trees(ctx)
    tests = {node: trees.test(source, node) for node in range(len(trees.modes))}
    reached = []
    for _, path in trees.leaves:
        hit = ctx.graph.constant(1.0, float32).expand((source.view.shape[0],))
        for node, went in path:
            hit = hit * (tests[node] if went else 1.0 - tests[node])
        reached.append(hit.unsqueeze(1))
    hits = concat(reached, 1)  # (N, leaves)
    targets, weights = ctx.attr("leaf_targetids"), np.asarray(ctx.attr("leaf_weights")).reshape(-1)
    n_targets = int(ctx.attr("n_targets"))
    table = np.zeros((len(trees.leaves), n_targets), np.float32)
    for row, (leaf, _) in enumerate(trees.leaves):
        table[row, targets[leaf]] = weights[leaf]
    aggregate = ctx.attr("aggregate_function", 1)
    if aggregate in (0, 1):
        out = hits.matmul(ctx.lift(table, f"{ctx.node.output[0]}_leaf_weights"))
        return (out / float(len(ctx.attr("tree_roots"))) if aggregate == 0 else out).cast(x.dtype)
    if aggregate not in (2, 3):
        raise ctx.unsupported(f"aggregate_function={aggregate}")
    return _min_max(ctx, hits, trees, table, aggregate == 3).cast(x.dtype)


def _min_max(ctx: NodeContext, hits: GraphTensor, trees: _Trees, table: np.ndarray, is_max: bool):
    """Per target, the min (max) of the reached leaves' weights aimed at it; targets no
    reached leaf names keep float32's max (min), as the reference starts from them."""
    info = np.finfo(np.float32)
    start = info.min if is_max else info.max
    aims = np.zeros_like(table, dtype=np.int32)
    targets = ctx.attr("leaf_targetids")
    for row, (leaf, _) in enumerate(trees.leaves):
        aims[row, targets[leaf]] = 1
    aimed = hits.unsqueeze(2) * ctx.lift(aims, f"{ctx.node.output[0]}_leaf_aims").cast(float32)
    values = ctx.lift(table, f"{ctx.node.output[0]}_leaf_weights").unsqueeze(0)
    candidates = select(aimed.gt(0.5), values, ctx.graph.constant(float(start), float32))
    return candidates.max(1) if is_max else candidates.min(1)


RULES: dict[str, Rule] = {
    "ArrayFeatureExtractor": _array_feature_extractor,
    "Binarizer": _binarizer,
    "TreeEnsemble": _tree_ensemble,
}

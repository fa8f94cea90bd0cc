"""Extraction: choose one e-node per e-class from the serialized e-graph and decode the
choice into a Program.

Costs come from the term declarations (static, in the rules); the choice is computed
here in one pass over the serialized e-graph (Knuth's algorithm for superior functions:
an e-class is final once its cheapest e-node's children are final), which is also what
candidate enumeration walks. Decoding is memoised per e-class, so shared subterms stay
shared (a residual stream is not duplicated per use).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from luminal import ops
from luminal.compiler.egraph.encode import Tables
from luminal.compiler.egraph.program import Instruction, Program, Ref
from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.shape.tracker import ShapeTracker


@dataclass
class ENode:
    key: str
    op: str
    children: list[str]
    eclass: str
    cost: float


class SerializedEGraph:
    """The nodes and classes of a serialized e-graph, with the cheapest choice per class."""

    def __init__(self, data: dict) -> None:
        self.nodes: dict[str, ENode] = {
            key: ENode(key, n["op"], list(n["children"]), n["eclass"], float(n["cost"]))
            for key, n in data["nodes"].items()
        }
        # Term.root(i) marks the class of output i; it is never extracted
        self.roots: dict[int, str] = {}
        self.classes: dict[str, list[str]] = {}
        for node in self.nodes.values():
            if node.op == "Term.root":
                self.roots[int(self.nodes[node.children[0]].op)] = node.eclass
            else:
                self.classes.setdefault(node.eclass, []).append(node.key)
        self.best_cost: dict[str, float] = {}
        self.best_node: dict[str, str] = {}
        self.node_cost: dict[str, float] = {}
        self._solve()

    @classmethod
    def from_egraph(cls, egraph: Any) -> SerializedEGraph:
        return cls(json.loads(egraph._serialize().to_json()))

    def child_class(self, child: str) -> str:
        return self.nodes[child].eclass

    def _solve(self) -> None:
        parents: dict[str, list[str]] = {}
        pending: dict[str, int] = {}
        heap: list[tuple[float, str]] = []
        for node in self.nodes.values():
            if node.op == "Term.root":
                continue
            child_classes = {self.child_class(c) for c in node.children}
            pending[node.key] = len(child_classes)
            for cls in child_classes:
                parents.setdefault(cls, []).append(node.key)
            if not child_classes:
                self.node_cost[node.key] = node.cost
                heapq.heappush(heap, (node.cost, node.key))
        while heap:
            cost, key = heapq.heappop(heap)
            cls = self.nodes[key].eclass
            if cls in self.best_cost:
                continue
            self.best_cost[cls] = cost
            self.best_node[cls] = key
            for parent in parents.get(cls, ()):
                pending[parent] -= 1
                if pending[parent] == 0:
                    node = self.nodes[parent]
                    total = node.cost + sum(
                        self.best_cost[self.child_class(c)] for c in node.children
                    )
                    self.node_cost[parent] = total
                    heapq.heappush(heap, (total, parent))

    def alternatives(self, cls: str) -> list[str]:
        """Extractable e-nodes of a class, cheapest first."""
        options = [k for k in self.classes.get(cls, []) if k in self.node_cost]
        return sorted(options, key=lambda k: self.node_cost[k])


Choice = Callable[[str, set[str]], str]


def best_choice(graph: SerializedEGraph) -> Choice:
    return lambda cls, stack: graph.best_node[cls]


def random_choice(graph: SerializedEGraph, rng: random.Random) -> Choice:
    """A random extractable e-node whose children are not being decoded (no cycles);
    the cheapest node is always safe, since its children were final before it."""

    def choose(cls: str, stack: set[str]) -> str:
        options = [
            k
            for k in graph.alternatives(cls)
            if not any(graph.child_class(c) in stack for c in graph.nodes[k].children)
        ]
        return rng.choice(options) if options else graph.best_node[cls]

    return choose


def override_choice(graph: SerializedEGraph, overrides: dict[str, str]) -> Choice:
    def choose(cls: str, stack: set[str]) -> str:
        key = overrides.get(cls)
        if key is not None and not any(
            graph.child_class(c) in stack for c in graph.nodes[key].children
        ):
            return key
        return graph.best_node[cls]

    return choose


class _Cycle(Exception):
    """A choice led back to a class being decoded."""


class ProgramDecoder:
    """Turns chosen e-nodes into instructions, memoised per e-class."""

    def __init__(
        self,
        graph: SerializedEGraph,
        tables: Tables,
        boundaries: tuple,
        choose: Choice,
        ruleset_name: str,
    ) -> None:
        self.graph = graph
        self.tables = tables
        self.boundaries = boundaries
        self.choose = choose
        self.ruleset_name = ruleset_name
        self.instructions: list[Instruction] = []
        self.memo: dict[str, Ref] = {}
        self.stack: set[str] = set()

    # ------------------------------------------------------------- helpers
    def fail(self, node: ENode, why: str) -> CompileError:
        return CompileError(
            f"e-graph ({self.ruleset_name}): cannot decode e-node {node.op} "
            f"of class {node.eclass}: {why}"
        )

    def literal(self, child: str) -> Any:
        text = self.graph.nodes[child].op
        if text.startswith('"'):
            return json.loads(text)
        try:
            return int(text)
        except ValueError:
            return float(text)

    def shape_of(self, ref: Ref) -> tuple:
        if ref.boundary:
            return self.boundaries[ref.index][0]
        return self.instructions[ref.index].shape

    def dtype_of(self, ref: Ref) -> DType:
        if ref.boundary:
            return self.boundaries[ref.index][1]
        return self.instructions[ref.index].dtype

    def emit(
        self, op: ops.Op, inputs: list[tuple[Ref, ShapeTracker]], shape=None, dtype=None
    ) -> Ref:
        shapes = [view.shape for _, view in inputs]
        dtypes = [self.dtype_of(ref) for ref, _ in inputs]
        if shape is None:
            shape = ops.output_shape(op, shapes)
        if dtype is None:
            dtype = ops.output_dtype(op, dtypes)
        self.instructions.append(Instruction(op, tuple(inputs), tuple(shape), dtype))
        return Ref(False, len(self.instructions) - 1)

    # ------------------------------------------------------------- decoding
    def term(self, cls: str) -> Ref:
        ref = self.memo.get(cls)
        if ref is not None:
            return ref
        if cls in self.stack:
            raise _Cycle(cls)
        self.stack.add(cls)
        try:
            key = self.choose(cls, self.stack)
            mark, memo = len(self.instructions), dict(self.memo)
            try:
                ref = self._decode_node(self.graph.nodes[key])
            except _Cycle:
                best = self.graph.best_node.get(cls)
                if best is None or key == best:
                    raise
                # a non-cheapest choice closed a cycle: undo it and take the cheapest
                del self.instructions[mark:]
                self.memo = memo
                ref = self._decode_node(self.graph.nodes[best])
        finally:
            self.stack.discard(cls)
        self.memo[cls] = ref
        return ref

    def _decode_node(self, node: ENode) -> Ref:
        decoder = TERM_DECODERS.get(node.op)
        if decoder is None:
            raise self.fail(node, "no decoder for this op")
        return decoder(self, node)

    def edge(self, child: str) -> tuple[Ref, ShapeTracker]:
        """Decode an Edge.of(term, view) child into (ref, concrete view)."""
        cls = self.graph.child_class(child)
        node = self.graph.nodes[self.choose(cls, self.stack)]
        if node.op != "Edge.of":
            raise self.fail(node, "expected an edge")
        ref = self.term(self.graph.child_class(node.children[0]))
        view_node = self.graph.nodes[
            self.choose(self.graph.child_class(node.children[1]), self.stack)
        ]
        if view_node.op == "View.ident":
            view = ShapeTracker.contiguous(self.shape_of(ref))
        else:
            view = self.tables.views[self.literal(view_node.children[-1])]
            if tuple(view.source_shape) != tuple(self.shape_of(ref)):
                raise self.fail(view_node, "view does not fit its source")
        return ref, view

    def edge_list(self, child: str) -> list[tuple[Ref, ShapeTracker]]:
        out = []
        node = self.graph.nodes[self.choose(self.graph.child_class(child), self.stack)]
        while node.op == "EdgeList.cons":
            out.append(self.edge(node.children[0]))
            node = self.graph.nodes[
                self.choose(self.graph.child_class(node.children[1]), self.stack)
            ]
        return out


def _unary(op_type: type) -> Callable[[ProgramDecoder, ENode], Ref]:
    return lambda d, n: d.emit(op_type(), [d.edge(n.children[0])])


def _binary(op_type: type) -> Callable[[ProgramDecoder, ENode], Ref]:
    return lambda d, n: d.emit(op_type(), [d.edge(n.children[0]), d.edge(n.children[1])])


def _const(d: ProgramDecoder, n: ENode) -> Ref:
    dtype = DType(d.literal(n.children[1]))
    value = d.literal(n.children[0])
    value = int(value) if not dtype.is_float else float(value)
    return d.emit(ops.Constant(value), [], (), dtype)


def _source(d: ProgramDecoder, n: ENode) -> Ref:
    inst = d.tables.sources[d.literal(n.children[0])]
    return d.emit(inst.op, [], inst.shape, inst.dtype)


def _function(d: ProgramDecoder, n: ENode) -> Ref:
    inst = d.tables.sources[d.literal(n.children[0])]
    return d.emit(inst.op, d.edge_list(n.children[1]), inst.shape, inst.dtype)


def _reduce(op_type: type) -> Callable[[ProgramDecoder, ENode], Ref]:
    return lambda d, n: d.emit(op_type(d.literal(n.children[0])), [d.edge(n.children[1])])


def _contract(d: ProgramDecoder, n: ENode) -> Ref:
    axis = d.literal(n.children[0])
    product = d.emit(ops.Mul(), [d.edge(n.children[1]), d.edge(n.children[2])])
    return d.emit(ops.SumReduce(axis), [(product, ShapeTracker.contiguous(d.shape_of(product)))])


def _normalize(d: ProgramDecoder, n: ENode) -> Ref:
    axis = d.literal(n.children[0])
    x = d.term(d.graph.child_class(n.children[1]))
    shape = d.shape_of(x)
    total = d.emit(ops.SumReduce(axis), [(x, ShapeTracker.contiguous(shape))])
    inverse = d.emit(ops.Recip(), [(total, ShapeTracker.contiguous(d.shape_of(total)))])
    spread = ShapeTracker.contiguous(d.shape_of(inverse)).expand(axis, shape[axis])
    return d.emit(ops.Mul(), [(x, ShapeTracker.contiguous(shape)), (inverse, spread)])


TERM_DECODERS: dict[str, Callable[[ProgramDecoder, ENode], Ref]] = {
    "Term.boundary": lambda d, n: Ref(True, d.literal(n.children[0])),
    "Term.const": _const,
    "Term.source": _source,
    "Term.function": _function,
    "Term.log2": _unary(ops.Log2),
    "Term.exp2": _unary(ops.Exp2),
    "Term.sin": _unary(ops.Sin),
    "Term.sqrt": _unary(ops.Sqrt),
    "Term.recip": _unary(ops.Recip),
    "Term.add": _binary(ops.Add),
    "Term.mul": _binary(ops.Mul),
    "Term.mod": _binary(ops.Mod),
    "Term.less_than": _binary(ops.LessThan),
    "Term.sum_reduce": _reduce(ops.SumReduce),
    "Term.max_reduce": _reduce(ops.MaxReduce),
    "Term.contiguous": _unary(ops.Contiguous),
    "Term.gather": _binary(ops.Gather),
    "Term.scatter": lambda d, n: d.emit(ops.Scatter(), [d.edge(c) for c in n.children]),
    "Term.cast": lambda d, n: d.emit(
        ops.Cast(DType(d.literal(n.children[0]))), [d.edge(n.children[1])]
    ),
    "Term.graph_break": _unary(ops.GraphBreak),
    "Term.contract": _contract,
    "Term.normalize": _normalize,
}


def decode_program(
    graph: SerializedEGraph,
    tables: Tables,
    boundaries: tuple,
    output_classes: list[str],
    choose: Choice,
    ruleset_name: str = "rules",
) -> Program:
    decoder = ProgramDecoder(graph, tables, boundaries, choose, ruleset_name)
    for cls in output_classes:
        if cls not in graph.best_cost or not math.isfinite(graph.best_cost[cls]):
            raise CompileError(f"e-graph ({ruleset_name}): output class {cls} is not extractable")
    try:
        outputs = tuple(decoder.term(cls) for cls in output_classes)
    except _Cycle as cycle:
        raise CompileError(f"e-graph ({ruleset_name}): cyclic choice at class {cycle}") from None
    return Program(tuple(decoder.instructions), outputs, boundaries)

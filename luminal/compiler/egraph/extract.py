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

# e-nodes that only mark a class (an output, a shared term's name)
MARKERS = frozenset({"Term.root", "Term.named"})


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
        # the sort of each class by its short name: "Term", "Edge", "EdgeList", "View", "i64"
        self.sorts: dict[str, str] = {
            cls: info["type"].rsplit(".", 1)[-1] for cls, info in data.get("class_data", {}).items()
        }
        # Term.root(i) marks the class of output i and Term.named(i) names a shared
        # term; neither is ever extracted
        self.roots: dict[int, str] = {}
        self.classes: dict[str, list[str]] = {}
        for node in self.nodes.values():
            if node.op == "Term.root":
                self.roots[int(self.nodes[node.children[0]].op)] = node.eclass
            elif node.op not in MARKERS:
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

    def sort(self, cls: str) -> str:
        return self.sorts.get(cls, "")

    def _solve(self) -> None:
        parents: dict[str, list[str]] = {}
        pending: dict[str, int] = {}
        heap: list[tuple[float, str]] = []
        for node in self.nodes.values():
            if node.op in MARKERS:
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


@dataclass
class _Visit:
    """A term class on the traversal stack: its chosen e-node, the term classes that
    e-node reads (in decoding order), how many are done, and where the traversal's
    order and choices stood when the visit began (to undo a choice that closed a cycle)."""

    cls: str
    key: str
    children: list[str]
    next: int
    order_mark: int
    choice_mark: int


class ProgramDecoder:
    """Turns chosen e-nodes into instructions, memoised per e-class.

    Decoding is two passes so that its depth does not follow the graph's: an explicit
    stack walks the chosen e-nodes to list term classes children-first, then each is
    decoded with its children already memoised (a 300-op chain is not 300 nested calls).
    Choices are made once per class in a decode and reused by the second pass."""

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
        self.choices: dict[str, str] = {}
        self.choice_log: list[str] = []

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

    def pick(self, cls: str) -> ENode:
        """The chosen e-node of `cls`, chosen once per decode."""
        key = self.choices.get(cls)
        if key is None:
            key = self.choices[cls] = self.choose(cls, self.stack)
            self.choice_log.append(cls)
        return self.graph.nodes[key]

    # ------------------------------------------------------------- decoding
    def term(self, cls: str) -> Ref:
        ref = self.memo.get(cls)
        if ref is not None:
            return ref
        if cls in self.stack:
            raise _Cycle(cls)
        for pending in self._children_first(cls):
            self.stack.add(pending)
            try:
                self.memo[pending] = self._decode_node(self.pick(pending))
            finally:
                self.stack.discard(pending)
        return self.memo[cls]

    def _term_children(self, node: ENode) -> list[str]:
        """The term classes `node` reads, in the order its decoder reads them: directly,
        through an edge, or through an edge list."""
        out: list[str] = []
        todo = list(reversed(node.children))
        while todo:
            cls = self.graph.child_class(todo.pop())
            sort = self.graph.sort(cls)
            if sort == "Term":
                out.append(cls)
            elif sort in ("Edge", "EdgeList"):
                inner = self.pick(cls)
                if inner.op in ("Edge.of", "EdgeList.cons"):
                    todo.extend(reversed(inner.children))
        return out

    def _children_first(self, root: str) -> list[str]:
        """The undecoded term classes below `root` (itself last), children first, with
        the choices of `choose`; a non-cheapest choice that closes a cycle is replaced by
        the cheapest, as the nearest ancestor with such a choice."""
        order: list[str] = []
        done: set[str] = set()
        visits: list[_Visit] = []

        def enter(cls: str, key: str | None = None) -> None:
            order_mark, choice_mark = len(order), len(self.choice_log)
            self.stack.add(cls)
            if key is not None:
                self.choices[cls] = key
                self.choice_log.append(cls)
            node = self.pick(cls)
            visits.append(
                _Visit(cls, node.key, self._term_children(node), 0, order_mark, choice_mark)
            )

        enter(root)
        while visits:
            visit = visits[-1]
            if visit.next == len(visit.children):
                visits.pop()
                self.stack.discard(visit.cls)
                done.add(visit.cls)
                order.append(visit.cls)
                continue
            child = visit.children[visit.next]
            visit.next += 1
            if child in self.memo or child in done:
                continue
            if child not in self.stack:
                enter(child)
                continue
            while visits:  # a cycle: retry the nearest non-cheapest choice as the cheapest
                top = visits.pop()
                self.stack.discard(top.cls)
                best = self.graph.best_node.get(top.cls)
                if best is not None and top.key != best:
                    for cls in order[top.order_mark :]:
                        done.discard(cls)
                    del order[top.order_mark :]
                    for cls in self.choice_log[top.choice_mark :]:
                        del self.choices[cls]
                    del self.choice_log[top.choice_mark :]
                    enter(top.cls, best)
                    break
            else:
                raise _Cycle(child)
        return order

    def _decode_node(self, node: ENode) -> Ref:
        decoder = TERM_DECODERS.get(node.op)
        if decoder is None:
            raise self.fail(node, "no decoder for this op")
        return decoder(self, node)

    def edge(self, child: str) -> tuple[Ref, ShapeTracker]:
        """Decode an Edge.of(term, view) child into (ref, concrete view)."""
        node = self.pick(self.graph.child_class(child))
        if node.op != "Edge.of":
            raise self.fail(node, "expected an edge")
        ref = self.term(self.graph.child_class(node.children[0]))
        view_node = self.pick(self.graph.child_class(node.children[1]))
        if view_node.op == "View.ident":
            view = ShapeTracker.contiguous(self.shape_of(ref))
        else:
            view = self.tables.views[self.literal(view_node.children[-1])]
            if tuple(view.source_shape) != tuple(self.shape_of(ref)):
                raise self.fail(view_node, "view does not fit its source")
        return ref, view

    def edge_list(self, child: str) -> list[tuple[Ref, ShapeTracker]]:
        out = []
        node = self.pick(self.graph.child_class(child))
        while node.op == "EdgeList.cons":
            out.append(self.edge(node.children[0]))
            node = self.pick(self.graph.child_class(node.children[1]))
        return out


def _unary(op_type: type) -> Callable[[ProgramDecoder, ENode], Ref]:
    return lambda d, n: d.emit(op_type(), [d.edge(n.children[0])])


def _binary(op_type: type) -> Callable[[ProgramDecoder, ENode], Ref]:
    return lambda d, n: d.emit(op_type(), [d.edge(n.children[0]), d.edge(n.children[1])])


def _const(d: ProgramDecoder, n: ENode) -> Ref:
    """The value as written when it was encoded (the e-graph holds it rounded to what
    the runtime computes with), or the value the rules folded."""
    dtype = DType(d.literal(n.children[1]))
    value = float(d.literal(n.children[0]))
    value = d.tables.constants.get((value, dtype.value), value)
    return d.emit(ops.Constant(int(value) if not dtype.is_float else value), [], (), dtype)


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


def _lowered_contract(d: ProgramDecoder, n: ENode) -> Ref:
    axis = d.literal(n.children[0])
    a, b = d.edge(n.children[1]), d.edge(n.children[2])
    shape = tuple(size for i, size in enumerate(a[1].shape) if i != axis)
    return d.emit(ops.Contract(axis), [a, b], shape, d.dtype_of(a[0]))


def _lowered_contract_sum(d: ProgramDecoder, n: ENode) -> Ref:
    """One ContractSum when both operands vary along the outer axis (a batch axis, which
    then joins K); otherwise the Contract and a SumReduce it stands for."""
    axis, outer = d.literal(n.children[0]), d.literal(n.children[1])
    a, b = d.edge(n.children[2]), d.edge(n.children[3])
    full = tuple(a[1].shape)
    outer_in = outer + (outer >= axis)  # the outer axis in the logical input shape
    dtype = d.dtype_of(a[0])
    varies = all(view.strides[outer_in] != 0 for _, view in (a, b))
    if varies and full[outer_in] != 1:
        shape = tuple(size for i, size in enumerate(full) if i not in (axis, outer_in))
        return d.emit(ops.ContractSum(axis, outer_in), [a, b], shape, dtype)
    product_shape = tuple(size for i, size in enumerate(full) if i != axis)
    product = d.emit(ops.Contract(axis), [a, b], product_shape, dtype)
    return d.emit(ops.SumReduce(outer), [(product, ShapeTracker.contiguous(product_shape))])


# e-node name -> decoder; the lowered forms are those of rules/lowering.py
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
    "cpu_contract": _lowered_contract,
    "cpu_contract_sum": _lowered_contract_sum,
}


def decode_program(
    graph: SerializedEGraph,
    tables: Tables,
    boundaries: tuple,
    output_classes: list[str],
    choose: Choice,
    ruleset_name: str = "rules",
    expected: Program | None = None,
) -> Program:
    """The program the choices make. With `expected` (the program the e-graph was built
    from), each output must keep its shape and dtype: an e-class whose e-nodes disagree
    (an unsound rule, a corrupted encoding) is a CompileError, not a wrong program."""
    decoder = ProgramDecoder(graph, tables, boundaries, choose, ruleset_name)
    for cls in output_classes:
        if cls not in graph.best_cost or not math.isfinite(graph.best_cost[cls]):
            raise CompileError(f"e-graph ({ruleset_name}): output class {cls} is not extractable")
    try:
        outputs = tuple(decoder.term(cls) for cls in output_classes)
    except _Cycle as cycle:
        raise CompileError(f"e-graph ({ruleset_name}): cyclic choice at class {cycle}") from None
    program = Program(tuple(decoder.instructions), outputs, boundaries)
    if expected is not None:
        _check_outputs(program, expected, ruleset_name)
    return program


def _check_outputs(program: Program, expected: Program, ruleset_name: str) -> None:
    got, want = program.output_signature(), expected.output_signature()
    for index, (have, need) in enumerate(zip(got, want, strict=True)):
        if tuple(have[0]) != tuple(need[0]) or have[1] != need[1]:
            raise CompileError(
                f"e-graph ({ruleset_name}): output {index} decodes to shape {have[0]} "
                f"{have[1]}, but the program it came from gives {need[0]} {need[1]}"
            )

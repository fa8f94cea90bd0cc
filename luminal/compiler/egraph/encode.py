"""Programs to egglog terms: one table from primitive type to term constructor."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from luminal import ops
from luminal.compiler.egraph.program import Instruction, Program
from luminal.compiler.terms import Edge, EdgeList, Term, View
from luminal.shape.tracker import Expand, Reshape, ShapeTracker


@dataclass
class Tables:
    """What terms refer to by id: views, opaque sources and functions."""

    views: list[ShapeTracker] = field(default_factory=list)
    view_ids: dict[ShapeTracker, int] = field(default_factory=dict)
    sources: list[Instruction] = field(default_factory=list)
    # (literal, dtype) -> the value it was rounded from, so an unfolded constant decodes
    # to the value written (0.1, not float32's 0.10000000149011612)
    constants: dict[tuple[float, str], float] = field(default_factory=dict)
    # one term per distinct view: building an egglog term costs ~150 us of Python
    view_terms: dict[ShapeTracker, View] = field(default_factory=dict)

    def view_term(self, view: ShapeTracker) -> View:
        term = self.view_terms.get(view)
        if term is None:
            term = self.view_terms[view] = self._new_view_term(view)
        return term

    def _new_view_term(self, view: ShapeTracker) -> View:
        if view.is_identity():
            return View.ident()
        index = self.view_ids.get(view)
        if index is None:
            index = self.view_ids[view] = len(self.views)
            self.views.append(view)
        axis = broadcast_axis(view)
        if axis is not None:
            return View.bcast(axis, index)
        axis = stretched_axis(view)
        return View.stretch(axis, index) if axis is not None else View.table(index)

    def source(self, inst: Instruction) -> int:
        self.sources.append(inst)
        return len(self.sources) - 1


def broadcast_axis(view: ShapeTracker) -> int | None:
    """The axis when `view` is the identity of its source plus one inserted broadcast."""
    if len(view.history) != 1 or not isinstance(view.history[0], Expand):
        return None
    if tuple(view.source_shape) != tuple(
        d for i, d in enumerate(view.shape) if i != view.history[0].axis
    ):
        return None
    return view.history[0].axis


def stretched_axis(view: ShapeTracker) -> int | None:
    """The axis when `view` stretches a size-1 dim of an otherwise identity view."""
    if len(view.history) != 2:
        return None
    first, second = view.history
    if not (isinstance(first, Reshape) and isinstance(second, Expand)):
        return None
    axis = second.axis
    source = tuple(view.source_shape)
    if len(source) != len(view.shape) or axis >= len(source) or source[axis] != 1:
        return None
    if tuple(first.shape) != source[:axis] + source[axis + 1 :]:
        return None
    return axis


Encoder = Callable[[Instruction, list[Edge], Tables], Term]


def _const(inst: Instruction, edges: list[Edge], tables: Tables) -> Term:
    """A number rules may fold, as the runtime holds it: a float constant rounded to
    float32 (16777217.0 is 16777216 there). Opaque when rules must not see it: symbolic,
    not finite, or -0.0 (egglog and its bindings take it for 0.0, and 1 / -0.0 is -inf)."""
    value = inst.op.value
    if not isinstance(value, int | float):
        return Term.source(tables.source(inst))
    if inst.dtype.is_float:
        with np.errstate(over="ignore"):
            value = float(np.float32(value))
    value = float(value)
    if not math.isfinite(value) or math.copysign(1.0, value) < 0 and value == 0.0:
        return Term.source(tables.source(inst))
    tables.constants.setdefault((value, inst.dtype.value), float(inst.op.value))
    return Term.const(value, inst.dtype.value)


def _opaque(inst: Instruction, edges: list[Edge], tables: Tables) -> Term:
    return Term.source(tables.source(inst))


def _function(inst: Instruction, edges: list[Edge], tables: Tables) -> Term:
    inputs = EdgeList.nil()
    for edge in reversed(edges):
        inputs = EdgeList.cons(edge, inputs)
    return Term.function(tables.source(inst), inputs)


def _unary(constructor: Callable[[Edge], Term]) -> Encoder:
    return lambda inst, edges, tables: constructor(edges[0])


def _binary(constructor: Callable[[Edge, Edge], Term]) -> Encoder:
    return lambda inst, edges, tables: constructor(edges[0], edges[1])


ENCODERS: dict[type, Encoder] = {
    ops.Constant: _const,
    ops.Iota: _opaque,
    ops.Input: _opaque,
    ops.Function: _function,
    ops.Log2: _unary(Term.log2),
    ops.Exp2: _unary(Term.exp2),
    ops.Sin: _unary(Term.sin),
    ops.Sqrt: _unary(Term.sqrt),
    ops.Recip: _unary(Term.recip),
    ops.Add: _binary(Term.add),
    ops.Mul: _binary(Term.mul),
    ops.Mod: _binary(Term.mod),
    ops.LessThan: _binary(Term.less_than),
    ops.SumReduce: lambda inst, edges, tables: Term.sum_reduce(inst.op.axis, edges[0]),
    ops.MaxReduce: lambda inst, edges, tables: Term.max_reduce(inst.op.axis, edges[0]),
    ops.Contiguous: _unary(Term.contiguous),
    ops.Gather: _binary(Term.gather),
    ops.Scatter: lambda inst, edges, tables: Term.scatter(edges[0], edges[1], edges[2]),
    ops.Cast: lambda inst, edges, tables: Term.cast(inst.op.dtype.value, edges[0]),
    ops.GraphBreak: _unary(Term.graph_break),
}


# Longest chain of unnamed terms nested in one term. egglog's Python bindings hash and
# translate a term recursively, so an 80-layer MLP sent as one nested term overflows
# Python's stack; naming every LET_DEPTH-th level keeps nesting bounded at any depth.
LET_DEPTH = 32


def encode_program(
    program: Program, tables: Tables, bind: Callable[[Term], Term] | None = None
) -> list[Term]:
    """Terms for the program's outputs. `bind` names a term (`Term.named`) used more
    than once, so the terms sent to egglog stay a DAG instead of being expanded into a
    tree exponential in the sharing (a residual stream is read many times), and every
    term nested LET_DEPTH deep, so that no term sent is deeper than that."""
    uses = [0] * len(program.instructions)
    for inst in program.instructions:
        for ref, _ in inst.inputs:
            if not ref.boundary:
                uses[ref.index] += 1
    terms: list[Term] = []
    depths: list[int] = []  # nesting of unnamed terms below each term
    boundaries: dict[int, Term] = {}

    def term_of(ref: Any) -> Term:
        if not ref.boundary:
            return terms[ref.index]
        if ref.index not in boundaries:
            boundaries[ref.index] = Term.boundary(ref.index)
        return boundaries[ref.index]

    for index, inst in enumerate(program.instructions):
        edges = [Edge.of(term_of(ref), tables.view_term(view)) for ref, view in inst.inputs]
        # ops the e-graph has no term for (backend or user ops) travel as opaque functions
        term = ENCODERS.get(type(inst.op), _function)(inst, edges, tables)
        depth = 1 + max((depths[r.index] for r, _ in inst.inputs if not r.boundary), default=0)
        if bind is not None and inst.inputs and (uses[index] > 1 or depth >= LET_DEPTH):
            term, depth = bind(term), 0
        terms.append(term)
        depths.append(depth)
    return [term_of(ref) for ref in program.outputs]

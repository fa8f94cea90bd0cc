"""Programs: a region of the graph as a list of instructions with local references.

A program is what the e-graph layer encodes, extracts and writes back. Its inputs from
outside the region are numbered *boundaries*, so two structurally identical regions
(two transformer layers reading different weights) have equal programs: one is
saturated and extracted, and the result is written back for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.dtype import DType
from luminal.graph import Edge, Graph
from luminal.shape.expr import Expr
from luminal.shape.tracker import ShapeTracker


@dataclass(frozen=True)
class Ref:
    """An instruction's operand: a local instruction index or a boundary index."""

    boundary: bool
    index: int


@dataclass(frozen=True)
class Instruction:
    op: ops.Op
    inputs: tuple[tuple[Ref, ShapeTracker], ...]
    shape: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True)
class Program:
    instructions: tuple[Instruction, ...]
    outputs: tuple[Ref, ...]
    boundaries: tuple[tuple[tuple[Expr, ...], DType], ...]

    def key(self) -> tuple:
        """A structural key: equal for regions that compute the same thing from their
        boundaries (Function ops are told apart by their callable's identity)."""
        body = tuple(
            (
                inst.op if not isinstance(inst.op, ops.Function) else (inst.op, id(inst.op.fn)),
                inst.inputs,
                inst.shape,
                inst.dtype,
            )
            for inst in self.instructions
        )
        return body, self.outputs, self.boundaries

    def output_signature(self) -> tuple[tuple[tuple[Expr, ...], DType], ...]:
        """(shape, dtype) of each output."""
        return tuple(
            self.boundaries[ref.index]
            if ref.boundary
            else (self.instructions[ref.index].shape, self.instructions[ref.index].dtype)
            for ref in self.outputs
        )


def program_from_region(
    graph: Graph, region: Sequence[int], outputs: Sequence[int]
) -> tuple[Program, list[int]]:
    """The program of the nodes `region` (topologically ordered) computing `outputs`,
    and the node ids its boundaries stand for."""
    local = {node_id: i for i, node_id in enumerate(region)}
    boundary_ids: list[int] = []
    boundary_index: dict[int, int] = {}
    instructions: list[Instruction] = []
    order = list(region)
    for node_id in region:  # copy constants read from outside into the region
        for edge in graph.nodes[node_id].inputs:
            source = graph.nodes[edge.source]
            if edge.source not in local and isinstance(source.op, (ops.Constant, ops.Iota)):
                local[edge.source] = -1
                order.insert(0, edge.source)
    local = {node_id: i for i, node_id in enumerate(order)}
    for node_id in order:
        node = graph.nodes[node_id]
        inputs = []
        for edge in node.inputs:
            if edge.source in local:
                ref = Ref(False, local[edge.source])
            else:
                if edge.source not in boundary_index:
                    boundary_index[edge.source] = len(boundary_ids)
                    boundary_ids.append(edge.source)
                ref = Ref(True, boundary_index[edge.source])
            inputs.append((ref, edge.view))
        instructions.append(Instruction(node.op, tuple(inputs), node.shape, node.dtype))
    boundaries = tuple((graph.nodes[b].shape, graph.nodes[b].dtype) for b in boundary_ids)
    program = Program(tuple(instructions), tuple(Ref(False, local[o]) for o in outputs), boundaries)
    return program, boundary_ids


def write_program(graph: Graph, program: Program, boundary_ids: Sequence[int]) -> list[int]:
    """Insert the program's instructions; returns the node ids of its outputs."""
    ids: list[int] = []

    def resolve(ref: Ref) -> int:
        return boundary_ids[ref.index] if ref.boundary else ids[ref.index]

    for inst in program.instructions:
        edges = [Edge(resolve(ref), 0, view) for ref, view in inst.inputs]
        ids.append(graph.insert(inst.op, edges, inst.shape, inst.dtype))
    return [resolve(ref) for ref in program.outputs]

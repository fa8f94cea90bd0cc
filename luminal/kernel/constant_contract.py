"""The kernel of a contraction with a constant matrix (`schedule/constant_matrix.py`):
straight-line sums with the matrix's values folded in, vectorised over the other
operand's columns, so the Winograd transforms run at memory speed instead of as
compute-bound dense products."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from luminal.dtype import DType
from luminal.graph import Graph, Node
from luminal.kernel import ir
from luminal.kernel.indexing import flat_index, index_loop_name
from luminal.kernel.lower import kernel_label, loop_nest, product
from luminal.kernel.values import ValueLowering
from luminal.schedule.constant_matrix import constant_contract
from luminal.shape.expr import Expr, sym


def constant_contract_kernel(
    graph: Graph, node: Node, materialised: set[int], dims: Sequence[str]
) -> ir.Kernel | None:
    """The straight-line kernel of a `constant_contract`, or None: one loop nest over
    the other operand's axes (the last an `omp simd` loop), in whose body the summed
    values are loaded once and each row of the matrix is a sum stored."""
    found = constant_contract(graph, node)
    if found is None:
        return None
    data_edge, rows, coefficients = node.inputs[1 - found.side], found.rows, found.matrix
    shape, axis = tuple(data_edge.view.shape), node.op.axis
    sizes = [int(shape[d].as_int()) for d in rows]  # type: ignore[arg-type]
    w = ValueLowering(graph, materialised - {node.id})
    w.param(node.id)
    columns = [d for d in range(len(shape)) if d != axis and d not in rows]
    indices = w.loop_vars([shape[d] for d in columns], prefix="c")
    full: list[Expr] = [sym(0)] * len(shape)
    for d, index in zip(columns, indices, strict=True):
        full[d] = index
    body: list[ir.Stmt] = []
    for q in np.flatnonzero(np.any(coefficients != 0, axis=0)):
        full[axis] = sym(int(q))
        body.append(ir.Declare(f"x{q}", DType.float32, w.edge(data_edge, full), const=True))
    out_axes = [d for d in range(len(shape)) if d != axis]
    for position, row in enumerate(np.ndindex(*sizes)):
        for d, r in zip(rows, row, strict=True):
            full[d] = sym(r)
        flat = flat_index([full[d] for d in out_axes], node.shape)
        body.append(ir.Store(0, flat, _sum(coefficients[position]), DType.float32))
    work = product([shape[d] for d in columns]) * int(coefficients.size)
    nest = loop_nest([shape[d] for d in columns], indices, body, work)
    inner = [index for d, index in zip(columns, indices, strict=True) if shape[d] != 1]
    if inner:
        nest = _simd(nest, index_loop_name(inner[-1]))
    label = "constmat_" + kernel_label(graph, w, node)
    computed = tuple(sorted({*w.nodes, node.id}))
    return ir.Kernel(label, w.kernel_params(), tuple(dims), nest, computed)


def _simd(body: tuple[ir.Stmt, ...], name: str) -> tuple[ir.Stmt, ...]:
    """`body` with loop `name` as an order-free ("reduce") loop of no reductions: the
    CPU renders it `omp simd`, so gcc vectorises it without proving the 36 loads and
    stores apart (in an OpenMP-outlined function the buffers lose `restrict`)."""
    out: list[ir.Stmt] = []
    for stmt in body:
        if isinstance(stmt, ir.Loop):
            kind = "reduce" if stmt.var == name else stmt.kind
            stmt = replace(stmt, kind=kind, body=_simd(stmt.body, name))
        out.append(stmt)
    return tuple(out)


def _sum(row: np.ndarray) -> ir.Value:
    """sum_q row[q] * x{q}: terms grouped by coefficient, each group added, then scaled
    once (1 needs no multiply, -1 is a negation)."""
    groups: dict[float, list[ir.Value]] = {}
    for q in np.flatnonzero(row):
        groups.setdefault(float(row[q]), []).append(ir.Var(f"x{q}", DType.float32))
    terms: list[ir.Value] = []
    for value, xs in sorted(groups.items(), key=lambda item: (-abs(item[0]), item[0])):
        total = xs[0] if len(xs) == 1 else ir.Alu("add", tuple(xs), DType.float32)
        if value != 1.0:
            total = ir.Alu("mul", (total, ir.Const(value, DType.float32)), DType.float32)
        terms.append(total)
    if not terms:
        return ir.Const(0.0, DType.float32)
    return terms[0] if len(terms) == 1 else ir.Alu("add", tuple(terms), DType.float32)

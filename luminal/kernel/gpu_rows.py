"""Row reductions by a whole work-group: the body of a work-item that reduces long rows
(a sum or max over an axis, a softmax or layer norm row) rewritten for `width`
cooperating work-items.

Every loop over the row at the top of the body is strided over the work-group: work-item
`lid` takes elements `lid, lid + width, ...`. In a reduce loop its index is clamped to
the row, so loads stay in bounds, and elements past the end add the reduction's identity;
stores inside it (a softmax keeping exp(x - max) in its output row) and every store of a
plain loop are guarded, so each element is written by the one work-item that owns it and
read back later by that same work-item. After each reduce loop the partial results meet
in local memory and a tree of `log2(width)` steps with barriers combines them; every
work-item then reads the row's value, so later stages (the variance after the mean, the
normalisation after the sum) see it. A store outside loops (the row's result) is made by
work-item 0.
"""

from __future__ import annotations

from luminal.kernel import ir
from luminal.kernel.indexing import loop_index
from luminal.shape.expr import ONE, Expr, ceildiv, less_than, minimum

LID = "lid_"
MIN_ROW = 256  # shorter static rows stay in one work-item
MAX_WIDTH = 256
SYMBOLIC_WIDTH = 64


def row_width(body: tuple[ir.Stmt, ...]) -> int | None:
    """Work-items per row for a work-item `body`, or None when it does not qualify: only
    straight statements and loops over the row (reduce loops with add/max reductions,
    plain loops of stores) at its top, no nested loops, and some reduce loop long (or
    symbolic) enough to share. A power of two: the combining tree halves it."""
    longest, symbolic, reduces = 0, False, False
    for stmt in body:
        if isinstance(stmt, ir.Loop):
            if stmt.kind not in ("reduce", "serial") or _has_loop(stmt.body):
                return None
            if any(isinstance(s, ir.CheckIndex) for s in stmt.body):
                return None
            if stmt.kind == "reduce":
                reduces = True
                known = stmt.extent.as_int()
                symbolic |= known is None
                longest = max(longest, known or 0)
        elif not isinstance(stmt, ir.Declare | ir.Assign | ir.Store | ir.Accumulate):
            return None
    if not reduces or (longest < MIN_ROW and not symbolic):
        return None
    if longest < MIN_ROW:
        return SYMBOLIC_WIDTH
    return min(MAX_WIDTH, 1 << (longest - 1).bit_length())


def _has_loop(body: tuple[ir.Stmt, ...]) -> bool:
    return any(isinstance(s, ir.Loop | ir.If | ir.Scope) for s in body)


def cooperative(
    body: tuple[ir.Stmt, ...], width: int
) -> tuple[tuple[ir.LocalMemory, ...], tuple[ir.Stmt, ...]]:
    """(local memory to declare at kernel scope, the body for `width` work-items whose
    index in the row is the local `LID`)."""
    lid = loop_index(LID, ONE * width)
    memory: list[ir.LocalMemory] = []
    out: list[ir.Stmt] = []
    for stmt in body:
        if isinstance(stmt, ir.Loop) and stmt.kind == "reduce":
            out.append(_strided_reduce(stmt, lid, width))
            for r in stmt.reductions:
                name = f"lm_red_{r.name}"
                memory.append(ir.LocalMemory(name, r.dtype, ONE * width))
                out.extend(_combine(r, name, lid, width))
        elif isinstance(stmt, ir.Loop):
            out.append(strided_loop(stmt, lid, width))
        elif isinstance(stmt, ir.Store):
            out.append(ir.If(less_than(lid, 1), (stmt,)))
        else:
            out.append(stmt)
    return tuple(memory), tuple(out)


def _position(loop: ir.Loop, lid: Expr, width: int) -> tuple[str, Expr]:
    step = f"{loop.var}k"
    return step, loop_index(step, ceildiv(loop.extent, width)) * width + lid


def strided_loop(loop: ir.Loop, lid: Expr, width: int) -> ir.Loop:
    """`loop` shared by `width` work-items: `lid` takes iterations lid, lid + width, ..."""
    step, position = _position(loop, lid, width)
    index = ir.Declare(loop.var, ir.INDEX, ir.IndexValue(position, ir.INDEX), True)
    guarded = ir.If(less_than(position, loop.extent), loop.body)
    return ir.Loop(step, ceildiv(loop.extent, width), "serial", (index, guarded))


def _strided_reduce(loop: ir.Loop, lid: Expr, width: int) -> ir.Loop:
    step, position = _position(loop, lid, width)
    inside = less_than(position, loop.extent)
    clamped = ir.IndexValue(minimum(position, loop.extent - 1), ir.INDEX)
    body: list[ir.Stmt] = [ir.Declare(loop.var, ir.INDEX, clamped, True)]
    identity = {r.name: _identity(r) for r in loop.reductions}
    for stmt in loop.body:
        if isinstance(stmt, ir.Accumulate) and stmt.name in identity:
            masked = f"{stmt.name}_in"  # past the row: the identity
            value = ir.Select(inside, stmt.value, identity[stmt.name])
            body.append(ir.Declare(masked, ir.type_of(value), value, True))
            body.append(ir.Accumulate(stmt.name, stmt.op, ir.Var(masked, ir.type_of(value))))
        elif isinstance(stmt, ir.Store):
            body.append(ir.If(inside, (stmt,)))
        else:
            body.append(stmt)
    extent = ceildiv(loop.extent, width)
    return ir.Loop(step, extent, "reduce", tuple(body), reductions=loop.reductions)


def _identity(r: ir.Reduction) -> ir.Const:
    if r.op == "add":
        return ir.Const(0.0 if r.dtype.is_float else 0, r.dtype)
    return ir.Const(float("-inf") if r.dtype.is_float else -(2**31), r.dtype)


def _combine(r: ir.Reduction, memory: str, lid: Expr, width: int) -> list[ir.Stmt]:
    """Partial results to local memory, a tree of barriers and combines, the row's value
    back in every work-item (and a barrier so the next reduction may reuse memory)."""
    steps: list[ir.Stmt] = [ir.Store(memory, lid, ir.Var(r.name, r.dtype), r.dtype), ir.Barrier()]
    span = width // 2
    while span:
        mine = ir.Load(memory, lid, r.dtype)
        other = ir.Load(memory, lid + span, r.dtype)
        both = ir.Alu(r.op, (mine, other), r.dtype)
        steps += [
            ir.If(less_than(lid, span), (ir.Store(memory, lid, both, r.dtype),)),
            ir.Barrier(),
        ]
        span //= 2
    steps += [ir.Assign(r.name, ir.Load(memory, ONE * 0, r.dtype)), ir.Barrier()]
    return steps

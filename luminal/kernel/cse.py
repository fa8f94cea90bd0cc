"""Common subexpressions of a statement, computed once into `const` locals.

Kernel IR values are trees (frozen dataclasses): a value a statement reads twice is two
equal subtrees, and a renderer writes each in full. Lowering makes such repeats on
purpose: a row group recomputes the (rows, n) values it absorbs in every reader instead
of storing them (`schedule/fusion.row_groups`), and a short reduction renders its
producers once per term. MiniLM's exact GELU then wrote `clip(x / sqrt 2)` 60 times
and `x^2` of the erf polynomials 30 times in one 11.8 KB line of C; an expression that
reads a value twice per level grows with 2^levels until fusion's bounds split it.

`share_common(kernel)` numbers the values of each statement by structure (value
numbering: a node's number is its class, fields and the numbers of its children), and
every non-trivial value read more than once in the statement (an ALU op, a select, a
cast or a load) becomes `const <type> cN = <value>;` just before the statement, in
dependency order, each read replaced by the local. Renderers call it as they render
(`CRenderer.render`), so the CPU's C and every GPU dialect print each common value
once; the kernel IR the schedule knobs transform keeps its trees.

Nothing computed changes: a statement reads memory before it writes, so its values
are the same just before it; a load under a select's branch (a padded view reads its
source only where the mask holds) is hoisted only when the statement also reads it
unconditionally, and pure arithmetic hoisted out of a branch cannot trap (integer
`mod` and float-to-int casts are the renderers' trap-free helpers). Vector values stay
where they are (a `Vec` local is a dialect's type). Compilers already merged the
repeats (gcc's value numbering), so kernels run as fast; the source gets shorter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from luminal.kernel import ir

PREFIX = "c"  # shared values are the locals c1, c2, ...

# values worth a local when read twice; constants, locals, index values and lanes
# are as short as the name that would replace them
SHARED_KINDS = (ir.Alu, ir.Select, ir.Cast, ir.Load)
# a statement can repeat a value only if one of its values has children
COMPOUND = (ir.Alu, ir.Select, ir.Cast)


def share_common(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with every value read more than once by one statement computed once,
    into a `const` local declared just before that statement."""
    names = ir.FreshNames(PREFIX, ir.local_names(kernel.body))
    body = _block(kernel.body, names)
    return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)


def _block(body: tuple[ir.Stmt, ...], names: ir.FreshNames) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for stmt in body:
        stmt = _nested(stmt, names)
        roots = _roots(stmt)
        if any(isinstance(root, COMPOUND) for root in roots):
            declares, rewrite = _shared(roots, names)
            if declares:
                out.extend(declares)
                stmt = _with_roots(stmt, [rewrite(v) for v in roots])
        out.append(stmt)
    return tuple(out)


def _nested(stmt: ir.Stmt, names: ir.FreshNames) -> ir.Stmt:
    """`stmt` with the blocks it holds processed."""
    if isinstance(stmt, ir.Loop | ir.Scope):
        return dataclasses.replace(stmt, body=_block(stmt.body, names))
    if isinstance(stmt, ir.If):
        then, otherwise = _block(stmt.then, names), _block(stmt.otherwise, names)
        return dataclasses.replace(stmt, then=then, otherwise=otherwise)
    return stmt


def _roots(stmt: ir.Stmt) -> list[ir.Value]:
    """The values a statement evaluates (in the order `_with_roots` takes them back)."""
    if isinstance(stmt, ir.Declare | ir.Assign | ir.Accumulate | ir.Store):
        return [stmt.value]
    if isinstance(stmt, ir.VectorStore):
        return list(stmt.values)
    if isinstance(stmt, ir.If) and isinstance(stmt.cond, ir.Value):
        return [stmt.cond]
    return []


def _with_roots(stmt: ir.Stmt, roots: list[ir.Value]) -> ir.Stmt:
    if isinstance(stmt, ir.VectorStore):
        return dataclasses.replace(stmt, values=tuple(roots))
    if isinstance(stmt, ir.If):
        return dataclasses.replace(stmt, cond=roots[0])
    return dataclasses.replace(stmt, value=roots[0])


def _children(value: ir.Value) -> tuple[ir.Value, ...]:
    if isinstance(value, ir.Alu):
        return value.args
    if isinstance(value, ir.Select):
        cond = (value.cond,) if isinstance(value.cond, ir.Value) else ()
        return (*cond, value.a, value.b)
    if isinstance(value, ir.Cast):
        return (value.value,)
    if isinstance(value, ir.Lane):
        return (value.vector,)
    return ()


class _Numbering:
    """Value numbers of a statement's values: equal subtrees get one number, found
    through the numbers of their children (no deep hashing of shared subtrees)."""

    def __init__(self) -> None:
        self.table: dict[tuple[Any, ...], int] = {}
        self.by_id: dict[int, int] = {}  # id(node) -> number, for nodes seen already
        self.nodes: list[ir.Value] = []  # number -> a node with that number
        self.loads: list[bool] = []  # number -> whether it reads memory

    def number(self, value: ir.Value) -> int:
        known = self.by_id.get(id(value))
        if known is not None:
            return known
        children = tuple(self.number(c) for c in _children(value))
        key = (type(value), _fields(value), children)
        n = self.table.get(key)
        if n is None:
            n = len(self.nodes)
            self.table[key] = n
            self.nodes.append(value)
            self.loads.append(
                isinstance(value, ir.Load | ir.VectorLoad) or any(self.loads[c] for c in children)
            )
        self.by_id[id(value)] = n  # `value` lives in the statement as long as the table
        return n


def _float_key(value: float | int) -> Any:
    """A literal as a key: floats by their bits' spelling (-0.0 == 0.0, NaN != NaN)."""
    return float.hex(value) if isinstance(value, float) else value


# a node's own fields (its children are numbered apart), per node class
_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    ir.Alu: lambda v: (v.op, v.dtype),
    ir.Load: lambda v: (v.param, v.index, v.dtype),
    ir.Const: lambda v: (_float_key(v.value), v.dtype),
    ir.Var: lambda v: (v.name, v.dtype),
    ir.Cast: lambda v: (v.source, v.target),
    ir.Select: lambda v: (None if isinstance(v.cond, ir.Value) else v.cond,),
    ir.IndexValue: lambda v: (v.expr, v.dtype),
    ir.VectorLoad: lambda v: (v.param, v.index, v.dtype, v.width),
    ir.Lane: lambda v: (v.lane,),
}


def _fields(value: ir.Value) -> tuple[Any, ...]:
    fields = _FIELDS.get(type(value))
    return (value,) if fields is None else fields(value)  # a node class added later


def _shared(
    roots: list[ir.Value], names: ir.FreshNames
) -> tuple[list[ir.Stmt], Callable[[ir.Value], ir.Value]]:
    """Declarations of the values read more than once by the roots, and a function that
    rewrites a value with those reads replaced by the locals."""
    numbering = _Numbering()
    for root in roots:
        numbering.number(root)
    # reads per edge of the value graph: a parent reading a child twice (x * x) reads it
    # twice; a value inside a shared parent is read once by it, however often that is
    reads = [0] * len(numbering.nodes)
    for node in numbering.nodes:
        for c in _children(node):
            reads[numbering.by_id[id(c)]] += 1
    for root in roots:
        reads[numbering.by_id[id(root)]] += 1
    unconditional = _unconditional(roots, numbering)
    shared = {
        n
        for n, node in enumerate(numbering.nodes)
        if reads[n] > 1
        and isinstance(node, SHARED_KINDS)
        and not isinstance(ir.type_of(node), ir.Vec)
        and (not numbering.loads[n] or n in unconditional)
    }
    if not shared:
        return [], lambda v: v
    local: dict[int, ir.Var] = {}
    rebuilt: dict[int, ir.Value] = {}

    def rewrite(value: ir.Value, top: bool = False) -> ir.Value:
        n = numbering.by_id[id(value)]
        if n in local and not top:
            return local[n]
        if n in rebuilt and not top:
            return rebuilt[n]
        new = _replace_children(value, [rewrite(c) for c in _children(value)])
        if not top:
            rebuilt[n] = new
        return new

    declares: list[ir.Stmt] = []
    for n in _post_order(roots, numbering):
        if n not in shared:
            continue
        node = numbering.nodes[n]
        value = rewrite(node, top=True)
        dtype = ir.type_of(node)
        name = names.fresh()
        declares.append(ir.Declare(name, dtype, value, const=True))
        local[n] = ir.Var(name, dtype)
    return declares, rewrite


def _unconditional(roots: list[ir.Value], numbering: _Numbering) -> set[int]:
    """Numbers of the values a statement evaluates whatever its selects choose: reached
    from a root without entering a select's branch (its condition always runs)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        value = stack.pop()
        n = numbering.by_id[id(value)]
        if n in seen:
            continue
        seen.add(n)
        if isinstance(value, ir.Select):
            stack.extend([value.cond] if isinstance(value.cond, ir.Value) else [])
        else:
            stack.extend(_children(value))
    return seen


def _post_order(roots: list[ir.Value], numbering: _Numbering) -> list[int]:
    """Value numbers, children before parents (the order locals must be declared in)."""
    order: list[int] = []
    done: set[int] = set()

    def visit(value: ir.Value) -> None:
        n = numbering.by_id[id(value)]
        if n in done:
            return
        done.add(n)
        for c in _children(value):
            visit(c)
        order.append(n)

    for root in roots:
        visit(root)
    return order


def _replace_children(value: ir.Value, children: list[ir.Value]) -> ir.Value:
    if isinstance(value, ir.Alu):
        return dataclasses.replace(value, args=tuple(children))
    if isinstance(value, ir.Select):
        if isinstance(value.cond, ir.Value):
            return dataclasses.replace(value, cond=children[0], a=children[1], b=children[2])
        return dataclasses.replace(value, a=children[0], b=children[1])
    if isinstance(value, ir.Cast):
        return dataclasses.replace(value, value=children[0])
    if isinstance(value, ir.Lane):
        return dataclasses.replace(value, vector=children[0])
    return value

"""Loads that cannot fault, read unconditionally and once per loop level they depend on.

A padded view reads its source under the pad's validity mask (`Select(mask, value, 0)`),
so every load in `value` is written inside the mask's condition, including loads the
mask does not guard: ResNet's bias + ReLU written into the next convolution's padded
input reads the per-channel bias `b2[i1_]` inside the pad test of the innermost loop.
gcc then has to treat that load as conditional (a masked load of a loop-invariant
address it cannot vectorise: "no vectype for stmt .MASK_LOAD"), and the whole loop stays
scalar, with the ReLU's sign test a mispredicted branch (9.0 ms for one 8x64x58x58
kernel; 1.35 ms with the bias read before the inner loops).

`hoist_loads(kernel)` reads each load of an input buffer whose index is in bounds for
every iteration of the loops around it (the proof: the index's lowest value is >= 0 and
its highest below the buffer's element count, whatever the mask) into a `const` local:

- declared at the top of the body of the innermost loop whose variable its index reads
  (the kernel's top level for a constant index), so a loop-invariant load is made once
  per iteration of the loop it depends on, not in the inner loops;
- a load that depends on the innermost loop and sits in a select's branch is declared
  just before its statement: read unconditionally, the select stays a select of values.

Left in place: loads the mask really guards (their index may be out of range, like the
padded input itself, which gcc reads with a masked vector load), loads of buffers the
kernel writes (hoisting could move a read above a write), loads indexed by a local
(a gather's row) and loads whose bounds cannot be proved (symbolic sizes that do not
cancel). Nothing changes what is computed: a load's value is the same wherever it is
read, and a hoisted load is in bounds wherever it runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from luminal.kernel import ir
from luminal.kernel.indexing import LOOP_MARK
from luminal.shape.expr import Expr

PREFIX = "h"  # hoisted loads are the locals h1, h2, ...
# nodes that hold no load (`values` returns them as they are)
_LEAVES = frozenset({ir.Const, ir.Var, ir.IndexValue, str, int, float, bool, type(None)})


def hoist_loads(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with the loads that cannot fault read into locals where the module
    docstring says; unchanged when there are none."""
    stores = (ir.Store, ir.VectorStore)
    written = {s.param for s in ir.statements(kernel.body) if isinstance(s, stores)}
    safe = {
        position
        for position, param in enumerate(kernel.params)
        if not param.output and position not in written and param.elements is not None
    }
    if not safe:
        return kernel
    hoister = _Hoister(kernel, safe, ir.local_names(kernel.body))
    body = hoister.body(kernel.body, ())
    return kernel if not hoister.count else dataclasses.replace(kernel, body=body)


class _Hoister:
    def __init__(self, kernel: ir.Kernel, safe: set[int], taken: set[str]) -> None:
        self.kernel = kernel
        self.safe = safe
        self.names = ir.FreshNames(PREFIX, taken)
        self.count = 0
        # per loop level (a loop's var, "" for the kernel's top): the loads declared there
        self.levels: dict[str, dict[ir.Load, ir.Var]] = {}

    def body(self, stmts: tuple[ir.Stmt, ...], loops: tuple[ir.Loop, ...]) -> tuple[ir.Stmt, ...]:
        """A block's statements rewritten; the loads hoisted to this block's level are
        declared at its top."""
        level = loops[-1].var if loops else ""
        outer = self.levels.get(level)
        self.levels[level] = {}
        out: list[ir.Stmt] = []
        for stmt in stmts:
            out.extend(self.statement(stmt, loops))
        hoisted = self.levels[level]
        if outer is None:
            del self.levels[level]
        else:  # a second loop of the same variable (a row kernel's j0_ loops)
            self.levels[level] = outer
        declares = [ir.Declare(v.name, v.dtype, load, const=True) for load, v in hoisted.items()]
        return (*declares, *out)

    def statement(self, stmt: ir.Stmt, loops: tuple[ir.Loop, ...]) -> list[ir.Stmt]:
        if isinstance(stmt, ir.Loop):
            return [dataclasses.replace(stmt, body=self.body(stmt.body, (*loops, stmt)))]
        if isinstance(stmt, ir.Scope):
            return [dataclasses.replace(stmt, body=self.block(stmt.body, loops))]
        if isinstance(stmt, ir.If):
            then = self.block(stmt.then, loops)
            otherwise = self.block(stmt.otherwise, loops)
            return [dataclasses.replace(stmt, then=then, otherwise=otherwise)]
        if isinstance(stmt, ir.Declare) and stmt.dtype == ir.INDEX:
            return [stmt]  # an index local: read in place, before its check
        before: dict[ir.Load, ir.Var] = {}
        rewritten = self.values(stmt, loops, before, False, {})
        declares = [ir.Declare(v.name, v.dtype, load, const=True) for load, v in before.items()]
        return [*declares, rewritten]

    def block(self, stmts: tuple[ir.Stmt, ...], loops: tuple[ir.Loop, ...]) -> tuple[ir.Stmt, ...]:
        """A nested block of the same loop level (a scope, an if's branches)."""
        out: list[ir.Stmt] = []
        for stmt in stmts:
            out.extend(self.statement(stmt, loops))
        return tuple(out)

    def values(
        self,
        node: Any,
        loops: tuple[ir.Loop, ...],
        before: dict[ir.Load, ir.Var],
        conditional: bool,
        done: dict[tuple[int, bool], Any],
    ) -> Any:
        """`node` (a statement's fields, values) with hoistable loads replaced by their
        locals; `before` collects those declared just before the statement. `done` holds
        the statement's subtrees already rewritten (by id, with `conditional`): lowering
        shares one object for a value its row group recomputes in every reader, so the
        tree can be far larger than its distinct nodes (MiniLM's exact GELU)."""
        kind = type(node)
        if kind in _LEAVES or isinstance(node, Expr):
            return node
        key = (id(node), conditional)
        if key in done:
            return done[key]
        if kind is ir.Alu:
            args = tuple(self.values(x, loops, before, conditional, done) for x in node.args)
            changed = any(new is not old for new, old in zip(args, node.args, strict=True))
            new = dataclasses.replace(node, args=args) if changed else node
        elif kind is ir.Load:
            new = self.load(node, loops, before, conditional)
        elif isinstance(node, ir.Select):
            cond = self.values(node.cond, loops, before, conditional, done)
            a = self.values(node.a, loops, before, True, done)
            b = self.values(node.b, loops, before, True, done)
            new = dataclasses.replace(node, cond=cond, a=a, b=b)
        elif isinstance(node, tuple):
            new = tuple(self.values(x, loops, before, conditional, done) for x in node)
        elif not ir.is_node_type(kind):
            new = node
        else:
            changes = {}
            for field in dataclasses.fields(node):
                old = getattr(node, field.name)
                value = self.values(old, loops, before, conditional, done)
                if value is not old:
                    changes[field.name] = value
            new = dataclasses.replace(node, **changes) if changes else node
        done[key] = new  # `node` stays alive in the statement, so its id is not reused
        return new

    def load(
        self,
        load: ir.Load,
        loops: tuple[ir.Loop, ...],
        before: dict[ir.Load, ir.Var],
        conditional: bool,
    ) -> ir.Value:
        if not isinstance(load.param, int) or load.param not in self.safe:
            return load
        variables = load.index.variables()
        extents = {loop.var + LOOP_MARK: loop.extent for loop in loops}
        if any(v.endswith(LOOP_MARK) and v not in extents for v in variables):
            return load  # an index local (a gather's row)
        elements = self.kernel.params[load.param].elements
        if elements is None or not in_bounds(load.index, elements, extents):
            return load
        depth = max(
            (d for d, loop in enumerate(loops) if loop.var + LOOP_MARK in variables), default=-1
        )
        if depth == len(loops) - 1:
            if not conditional:
                return load  # read once per iteration where it is: nothing to gain
            target = before
        else:
            target = self.levels[loops[depth].var if depth >= 0 else ""]
        if load not in target:
            target[load] = ir.Var(self.names.fresh(), load.dtype)
            self.count += 1
        return target[load]


def in_bounds(index: Expr, elements: Expr, extents: dict[str, Expr]) -> bool:
    """Whether `index` lies in [0, elements) for every value of the loop variables in
    `extents` (variable -> number of iterations) and every value of the dims (>= 0).
    Proved on the expressions: the lowest value from the bounds (each variable >= 0),
    the highest by putting each loop variable at its last iteration, which is the
    maximum when every term reading a loop variable is a positive multiple of it."""
    low, high = index.bounds()
    if low < 0:
        return False
    size = elements.as_int()
    if size is not None and high != float("inf"):
        return high < size
    last = {}
    for mono, coef in index.terms:
        loop_atoms = [a for a in mono if a.op == "var" and a.args[0] in extents]
        if not loop_atoms:
            continue
        if coef <= 0 or len(loop_atoms) != 1 or any(a.op != "var" for a in mono):
            return False
        (atom,) = loop_atoms
        last[atom.args[0]] = extents[atom.args[0]] - 1
    highest = index.substitute(last) if last else index
    return (elements - 1 - highest).bounds()[0] >= 0

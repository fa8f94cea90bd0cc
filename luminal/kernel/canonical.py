"""Canonical kernels: one computation, one source text.

Lowering names a row kernel's locals after graph node ids (`s420`) and the e-graph may
extract `x * -1` in one layer and `-1 * x` in the next, so identical kernels (a
softmax per block of a 32-block graph) rendered to different C: separate translation
units, separate gcc runs, separate kernel cache entries. `canonical(kernel)` renames
value locals in order of declaration and orders the operands of two-operand `add` and
`mul` (exactly commutative in IEEE and in wrapping int32 arithmetic), so such kernels
render to the same text, hence the same symbol and one compiled function.

Commutative in the IR, not always bit for bit in the compiled C: under
`-ffp-contract=fast` (toolchain.CFLAGS) gcc fuses `a * b + c * d` into an fma of one
product and the other rounded, and which one follows the operand order. So the chosen
order can move a kernel's result by an fma's rounding from what the lowered order gave
(every kernel with one canonical source still computes the same bits).

Left alone, because changing them could change results or meaning: operands of `max`
(the NaN-propagating max returns its second operand for `max(-0.0, +0.0)`), n-ary sums
(float addition does not associate), index locals (index expressions read them by
name) and every name that is not a value local (loop variables, buffers, scratch).
A kernel holding a node this module does not know is returned unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any

from luminal.kernel import ir
from luminal.kernel.indexing import is_loop_index, loop_name
from luminal.shape.expr import Expr

COMMUTATIVE = ("add", "mul")

# nodes whose every field is understood: names below, children rewritten, the rest kept
KNOWN: tuple[type, ...] = (
    ir.Const,
    ir.IndexValue,
    ir.Load,
    ir.Alu,
    ir.Select,
    ir.Cast,
    ir.Var,
    ir.Declare,
    ir.Assign,
    ir.Accumulate,
    ir.Store,
    ir.Reduction,
    ir.Loop,
    ir.If,
    ir.Scope,
    ir.CheckIndex,
    ir.LocalMemory,
    ir.Barrier,
    ir.Call,
    ir.Pointer,
    ir.LibraryCall,
    ir.Alloc,
    ir.Free,
)
# fields naming a value local (a Var may also read an index local: kept by the mapping)
LOCAL_NAME_FIELDS = {
    ir.Declare: "name",
    ir.Assign: "name",
    ir.Accumulate: "name",
    ir.Var: "name",
    ir.Reduction: "name",
}


def _operand_label(value: ir.Value) -> tuple[bool, str, str]:
    label = next((getattr(value, f) for f in ("param", "name", "op") if hasattr(value, f)), "")
    return isinstance(value, ir.Const), type(value).__name__, str(label)


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


class _Unknown(Exception):
    """A node type outside KNOWN: the kernel is left as lowered."""


def canonical(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with value locals renamed in declaration order (`_mapping`) and the
    operands of two-operand add/mul in a fixed order; the same values (up to gcc's fma
    contraction, see the module docstring)."""
    try:
        declared, taken = _names(kernel.body)
    except _Unknown:
        return kernel
    rewriter = _Rewriter(_mapping(declared, taken))
    return dataclasses.replace(kernel, body=rewriter.rewrite(kernel.body))


def _mapping(declared: list[str], taken: set[str]) -> dict[str, str]:
    """New names: each name's leading part (the role lowering gave it: `s` for a row
    local, `acc`, `v`) numbered from 1 in declaration order, `s420, s425` -> `s1, s2`; a
    first name without a number stays bare (`acc`, `v`), so readable kernels stay so."""
    counts: dict[str, int] = {}
    used = set(taken)
    mapping: dict[str, str] = {}
    for name in declared:
        prefix = name.rstrip("0123456789") or "s"
        new = prefix if name == prefix and prefix not in counts else ""
        count = counts.get(prefix, 1)
        while not new or new in used:
            new, count = f"{prefix}{count}", count + 1
        counts[prefix] = count
        used.add(new)
        mapping[name] = new
    return mapping


def _names(body: tuple[ir.Stmt, ...]) -> tuple[list[str], set[str]]:
    """Value locals in declaration order, and every other name the kernel uses (index
    locals, loop variables, scratch and local memory), which fresh names must avoid.
    Values are DAGs (a row kernel reuses a subexpression many times): each node is
    visited once."""
    declared: dict[str, None] = {}
    taken: set[str] = set()
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if isinstance(node, tuple):
            for item in node:
                visit(item)
            return
        if isinstance(node, Expr):
            taken.update(loop_name(v) for v in node.variables() if is_loop_index(v))
            return
        if not ir.is_node_type(type(node)) or id(node) in seen:
            return
        seen.add(id(node))
        if type(node) not in KNOWN:
            raise _Unknown(type(node).__name__)
        if isinstance(node, ir.Declare | ir.Reduction):
            if isinstance(node, ir.Declare) and node.dtype == ir.INDEX:
                taken.add(node.name)
            else:
                declared.setdefault(node.name, None)
        elif isinstance(node, ir.Loop):
            taken.add(node.var)
        elif isinstance(node, ir.CheckIndex | ir.LocalMemory | ir.Alloc):
            taken.add(node.name)
        if isinstance(node, ir.Loop):  # reductions are declared before the loop's body
            visit(node.reductions)
        for name in _fields(type(node)):
            if not (isinstance(node, ir.Loop) and name == "reductions"):
                visit(getattr(node, name))

    visit(body)
    return [name for name in declared if name not in taken], taken


class _Rewriter:
    """Renames locals and orders operands, each shared node once (memoised by identity:
    the nodes live as long as the kernel being rewritten)."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping
        self.done: dict[int, Any] = {}
        self.digests: dict[int, bytes] = {}

    def rewrite(self, node: Any) -> Any:
        """`node` with locals renamed and operands ordered; unchanged subtrees are
        returned as they are (no copy)."""
        if isinstance(node, tuple):
            items = tuple(self.rewrite(item) for item in node)
            return node if all(a is b for a, b in zip(items, node, strict=True)) else items
        if isinstance(node, Expr) or not ir.is_node_type(type(node)):
            return node
        done = self.done.get(id(node))
        if done is None:
            done = self.done[id(node)] = self._rewrite(node)
        return done

    def _rewrite(self, node: Any) -> Any:
        changes = {}
        for name in _fields(type(node)):
            old = getattr(node, name)
            new = self.rewrite(old)
            if new is not old:
                changes[name] = new
        name_field = LOCAL_NAME_FIELDS.get(type(node))
        if name_field is not None and getattr(node, name_field) in self.mapping:
            changes[name_field] = self.mapping[getattr(node, name_field)]
        if isinstance(node, ir.Alu) and node.op in COMMUTATIVE and len(node.args) == 2:
            first, second = changes.get("args", node.args)
            if self.goes_after(first, second):
                changes["args"] = (second, first)
        return dataclasses.replace(node, **changes) if changes else node

    def goes_after(self, first: ir.Value, second: ir.Value) -> bool:
        """Operand order: constants last (`x * -1.0f`, as lowering mostly writes it),
        then by kind (`Alu` < `Cast` < `Load` < ... < `Var`), by what names the operand
        (a load's buffer, a local's name, an ALU op), then by a digest of its content,
        computed only for operands alike in all the rest (most pairs are not)."""
        a, b = _operand_label(first), _operand_label(second)
        if a == b:
            return self.digest(first) > self.digest(second)
        return a > b

    def digest(self, node: Any) -> bytes:
        """A content digest of a (rewritten) node, the same in every process (Python's
        own hash of a string is not), computed once per shared node."""
        known = self.digests.get(id(node))
        if known is not None:
            return known
        hasher = hashlib.blake2b(type(node).__name__.encode(), digest_size=16)
        if isinstance(node, tuple):
            for item in node:
                hasher.update(self.digest(item))
        elif ir.is_node_type(type(node)):
            for name in _fields(type(node)):
                hasher.update(self.digest(getattr(node, name)))
        else:
            hasher.update(str(node).encode())
        digest = hasher.digest()
        if ir.is_node_type(type(node)):  # alive as long as the kernel: ids stay theirs
            self.digests[id(node)] = digest
        return digest

"""Schedule knobs as transformations of the kernel IR (tinygrad's `Opt(op, axis, arg)`).

Each transformation takes an `ir.Kernel` and returns another that computes the same
values; a renderer then writes it (the search never edits generated text). A loop is
named by its variable (`Loop.var`, e.g. `i0_`). Before rewriting, each transformation
checks that it is legal and otherwise raises `IllegalTransform`, naming the kernel, the
loop and why:

- `split(k, axis, f)`: a loop of n iterations becomes n/f x f (the tile sizes of the
  original design are 4, 8, 16, 32); a reduce loop keeps its reduction: the inner loop
  reduces a tile into a partial accumulator that the outer loop adds up.
- `unroll(k, axis, f)`: f copies of the body per iteration (locals renamed per copy);
  f equal to the extent removes the loop.
- `parallelise(k, axis, work)` / `serialise(k, axis)`: run a loop on threads (always,
  or above `work` elements: the renderer's threshold) or in order; a loop whose
  iterations write the same element, read what another iteration writes, update a
  local declared outside it, or store through a data-dependent index must stay serial.
- `vectorise(k, axis)`: an innermost loop as SIMD lanes (same dependence rule);
  `vector_width(k, bits)`: the preferred SIMD width of the whole kernel (256 or 512).
- `swap(k, outer, inner)`: exchange two perfectly nested loops (loop order).
- `stage_local(k, axis, param)`: copy the tile of buffer `param` that one iteration of
  `axis` reads into work-group local memory, then read it there (GPU renderers only;
  the CPU renderer rejects local memory).
- `lanes(k, axis, w)`: each iteration of a straight-line loop (or one around a single
  reduce loop) does `w` consecutive elements with wide memory accesses
  (`ir.VectorLoad` / `ir.VectorStore`: `float4` on GPUs): the vector width of GPU
  kernels (GPU renderers only).

`Opt` names one transformation as data, so a search space is a list of `Opt` tuples and
a cached choice is its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from luminal.errors import CompileError
from luminal.kernel import ir
from luminal.kernel.indexing import LOOP_MARK, is_loop_index, loop_index, loop_name
from luminal.shape.expr import ONE, Atom, Expr, sym

VECTOR_WIDTHS = (256, 512)
LANES = (2, 4)  # elements per wide access (`lanes`); 1 is the kernel as it is
THREAD_KINDS = ("serial", "parallel")


class IllegalTransform(CompileError):
    """A schedule transformation would change what a kernel computes (or cannot apply)."""


# ------------------------------------------------------------------------------ Opt
@dataclass(frozen=True)
class Opt:
    """One transformation as data: `op` (a key of `TRANSFORMS`), the loop it applies to
    (`axis`, a loop variable; None for kernel-wide knobs and "every parallel loop"), and
    its argument (a factor, a width, a loop, a buffer parameter)."""

    op: str
    axis: str | None = None
    arg: int | str | None = None

    @property
    def name(self) -> str:
        """A short stable name for logs and cached choices: `split(i1_,16)`."""
        parts = [str(p) for p in (self.axis, self.arg) if p is not None]
        return f"{self.op}({','.join(parts)})" if parts else self.op

    def apply(self, kernel: ir.Kernel) -> ir.Kernel:
        transform = TRANSFORMS.get(self.op)
        if transform is None:
            raise IllegalTransform(f"no schedule transformation {self.op!r} ({sorted(TRANSFORMS)})")
        return transform(kernel, self)


def apply_opts(kernel: ir.Kernel, opts: Sequence[Opt]) -> ir.Kernel:
    """`kernel` with each of `opts` applied in order."""
    for opt in opts:
        kernel = opt.apply(kernel)
    return kernel


def opts_name(opts: Sequence[Opt]) -> str:
    return "+".join(o.name for o in opts) or "static"


# ----------------------------------------------------------------------- tree helpers
def _map_exprs(node: object, fn: Callable[[Expr], Expr]) -> object:
    """`node` (IR values, statements, tuples of them) with `fn` applied to every Expr."""
    if isinstance(node, Expr):
        return fn(node)
    if isinstance(node, tuple):
        return tuple(_map_exprs(x, fn) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: _map_exprs(getattr(node, f.name), fn) for f in dataclasses.fields(node)}
        return replace(node, **changes)
    return node


def walk(node: object) -> Iterator[object]:
    """Every IR node, Expr and Reduction under `node`, `node` included (pre-order)."""
    yield node
    if isinstance(node, tuple):
        for x in node:
            yield from walk(x)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from walk(getattr(node, f.name))


def _loop_vars(expr: Expr) -> set[str]:
    """IR names of the loop variables and index locals in `expr`."""
    return {loop_name(v) for v in expr.variables() if is_loop_index(v)}


def _mentions(node: object, name: str) -> bool:
    """Whether any index expression under `node` reads the loop variable or index local
    `name`."""
    return any(isinstance(x, Expr) and name in _loop_vars(x) for x in walk(node))


def _index_var(expr_tree: object, name: str) -> Expr:
    """The Expr variable of the loop/index local `name`, with the upper bound it has in
    `expr_tree`."""
    key = name + LOOP_MARK
    for x in walk(expr_tree):
        if isinstance(x, Expr):
            for atom in _atoms(x):
                if atom.op == "var" and atom.args[0] == key:
                    return Expr((((atom,), 1),))
    return Expr((((Atom("var", (key,)),), 1),))


def _atoms(expr: Expr) -> Iterator[Atom]:
    for mono, _ in expr.terms:
        for atom in mono:
            yield atom
            if atom.op != "var":
                for arg in atom.args:
                    yield from _atoms(arg)


def _names(kernel: ir.Kernel) -> set[str]:
    """Every local, accumulator and loop name in use (fresh names avoid them)."""
    names: set[str] = set()
    for x in walk(kernel.body):
        if isinstance(x, ir.Loop):
            names.add(x.var)
        elif isinstance(x, ir.Declare | ir.Reduction | ir.LocalMemory):
            names.add(x.name)
        elif isinstance(x, Expr):
            names |= _loop_vars(x)
    return names


def _fresh(base: str, taken: set[str]) -> str:
    name, count = base, 1
    while name in taken:
        name, count = f"{base}{count}", count + 1
    taken.add(name)
    return name


@dataclass
class _Found:
    loop: ir.Loop
    enclosing: tuple[ir.Loop, ...]  # loops around it, outermost first


def _find(kernel: ir.Kernel, axis: str | None, opt: Opt) -> _Found:
    """The loop `axis` names: a loop variable, unique in the kernel, or `var@n` for the
    n-th loop of that variable in program order (a row kernel's three `j0_` loops)."""
    name, _, nth = (axis or "").partition("@")
    found: list[_Found] = []

    def visit(body: tuple[ir.Stmt, ...], around: tuple[ir.Loop, ...]) -> None:
        for stmt in body:
            if isinstance(stmt, ir.Loop):
                if stmt.var == name:
                    found.append(_Found(stmt, around))
                visit(stmt.body, (*around, stmt))
                continue
            for field in ("body", "then", "otherwise"):
                child = getattr(stmt, field, None)
                if isinstance(child, tuple):
                    visit(child, around)

    visit(kernel.body, ())
    if nth.isdigit() and int(nth) < len(found):
        return found[int(nth)]
    if len(found) == 1 and not nth:
        return found[0]
    loops = sorted({x.var for x in walk(kernel.body) if isinstance(x, ir.Loop)})
    what = f"{len(found)} loops" if found else "no loop"
    raise _illegal(kernel, opt, f"{what} named {axis!r} (loops: {', '.join(loops) or 'none'})")


def _replace(
    body: tuple[ir.Stmt, ...], target: ir.Loop, new: Sequence[ir.Stmt]
) -> tuple[ir.Stmt, ...]:
    """`body` with the statement `target` (by identity) replaced by `new`."""
    out: list[ir.Stmt] = []
    for stmt in body:
        if stmt is target:
            out.extend(new)
            continue
        changes = {
            field: _replace(getattr(stmt, field), target, new)
            for field in ("body", "then", "otherwise")
            if isinstance(getattr(stmt, field, None), tuple)
        }
        out.append(replace(stmt, **changes) if changes else stmt)
    return tuple(out)


def _illegal(kernel: ir.Kernel, opt: Opt, why: str) -> IllegalTransform:
    return IllegalTransform(f"{opt.name} on kernel {kernel.label!r}: {why}")


def _factor(kernel: ir.Kernel, opt: Opt, loop: ir.Loop) -> tuple[int, int]:
    """(extent, factor) of a split or unroll, checked: a known extent the factor divides."""
    factor, extent = opt.arg, loop.extent.as_int()
    if not isinstance(factor, int) or factor < 2:
        raise _illegal(kernel, opt, f"the factor must be an integer >= 2, got {factor!r}")
    if extent is None:
        raise _illegal(kernel, opt, f"loop {loop.var} has a symbolic extent ({loop.extent})")
    if extent % factor:
        raise _illegal(kernel, opt, f"{factor} does not divide loop {loop.var}'s extent {extent}")
    return extent, factor


# ------------------------------------------------------------------------- split
def split(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Loop `axis` of n iterations as an outer loop of n/f and an inner one of f, the
    index `outer * f + inner` substituted in the body."""
    found = _find(kernel, opt.axis, opt)
    loop = found.loop
    extent, factor = _factor(kernel, opt, loop)
    if extent == factor:
        raise _illegal(kernel, opt, f"loop {loop.var} has only {extent} iterations")
    taken = _names(kernel)
    outer_name, inner_name = _fresh(f"{loop.var}o", taken), _fresh(f"{loop.var}i", taken)
    outer = loop_index(outer_name, sym(extent // factor))
    inner = loop_index(inner_name, sym(factor))
    body = _substitute(loop.body, loop.var, outer * factor + inner)
    count = sym(extent // factor)
    if loop.kind == "reduce":
        new = _split_reduction(loop, body, outer_name, inner_name, count, factor, taken)
    else:
        inner_kind = "vector" if loop.kind == "vector" else "serial"
        outer_kind = "serial" if loop.kind == "vector" else loop.kind
        inner_loop = ir.Loop(inner_name, sym(factor), inner_kind, body)
        new = [replace(loop, var=outer_name, extent=count, kind=outer_kind, body=(inner_loop,))]
    return replace(kernel, body=_replace(kernel.body, loop, new))


def _substitute(node: object, name: str, value: Expr) -> object:
    key = name + LOOP_MARK
    return _map_exprs(node, lambda e: e.substitute({key: value}) if key in e.variables() else e)


def _split_reduction(
    loop: ir.Loop,
    body: tuple[ir.Stmt, ...],
    outer: str,
    inner: str,
    count: Expr,
    factor: int,
    taken: set[str],
) -> list[ir.Stmt]:
    """A reduce loop split in two: each accumulator starts at its identity, the inner loop
    reduces one tile into a partial, the outer loop combines the partials in order."""
    partials = {r.name: _fresh(f"{r.name}_t", taken) for r in loop.reductions}
    body = _rename_locals(body, partials)
    inner_loop = ir.Loop(
        inner,
        sym(factor),
        "reduce",
        body,
        reductions=tuple(replace(r, name=partials[r.name]) for r in loop.reductions),
    )
    combine = tuple(
        ir.Accumulate(r.name, r.op, ir.Var(partials[r.name], r.dtype)) for r in loop.reductions
    )
    starts = [ir.Declare(r.name, r.dtype, _identity(r)) for r in loop.reductions]
    return [*starts, ir.Loop(outer, count, "serial", (inner_loop, *combine))]


def _identity(r: ir.Reduction) -> ir.Const:
    if r.op == "add":
        return ir.Const(0.0 if r.dtype.is_float else 0, r.dtype)
    return ir.Const(float("-inf") if r.dtype.is_float else -(2**31), r.dtype)


def _rename_locals(node: object, names: dict[str, str]) -> object:
    """`node` with the value locals, accumulators and index locals in `names` renamed
    (declarations, reads, updates and index expressions alike)."""
    if not names:
        return node
    index_vars = {
        old + LOOP_MARK: _renamed_var(node, old, new)
        for old, new in names.items()
        if _mentions(node, old)
    }

    def rename(x: object) -> object:
        if isinstance(x, Expr):
            hit = {k: v for k, v in index_vars.items() if k in x.variables()}
            return x.substitute(hit) if hit else x
        if isinstance(x, tuple):
            return tuple(rename(y) for y in x)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {f.name: rename(getattr(x, f.name)) for f in dataclasses.fields(x)}
            if isinstance(x, _NAMED):
                changes["name"] = names.get(x.name, x.name)
            return replace(x, **changes)
        return x

    return rename(node)


_NAMED = (ir.Declare, ir.Assign, ir.Accumulate, ir.Var, ir.Reduction, ir.CheckIndex)


def _renamed_var(tree: object, old: str, new: str) -> Expr:
    """The index variable `new` with the bound `old` has in `tree`."""
    current = _index_var(tree, old)
    (((atom,), _),) = current.terms
    return Expr((((Atom("var", (new + LOOP_MARK,), atom.upper),), 1),))


# ------------------------------------------------------------------------ unroll
def unroll(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """`f` copies of loop `axis`'s body per iteration, each with its own locals; with `f`
    equal to the extent the loop disappears (a reduce loop's accumulators are then
    declared before the copies)."""
    found = _find(kernel, opt.axis, opt)
    loop = found.loop
    extent, factor = _factor(kernel, opt, loop)
    if any(isinstance(x, ir.CheckIndex) and x.action == "skip" for x in walk(loop.body)):
        raise _illegal(kernel, opt, f"loop {loop.var} skips iterations (`continue`)")
    if any(isinstance(x, ir.LocalMemory | ir.Barrier | ir.Alloc) for x in walk(loop.body)):
        raise _illegal(kernel, opt, f"loop {loop.var} holds local memory, scratch or a barrier")
    taken = _names(kernel)
    declared = sorted({x.name for x in walk(loop.body) if isinstance(x, ir.Declare | ir.Reduction)})
    whole = factor == extent
    outer_name = loop.var if whole else _fresh(f"{loop.var}u", taken)
    outer = loop_index(outer_name, sym(extent // factor))
    copies: list[ir.Stmt] = []
    for k in range(factor):
        index = sym(k) if whole else outer * factor + k
        body = _substitute(loop.body, loop.var, index)
        if k:  # the first copy keeps the names: code after the loop never sees them
            body = _rename_locals(body, {n: _fresh(f"{n}_u{k}", taken) for n in declared})
        copies.extend(body)
    if not whole:
        new: list[ir.Stmt] = [
            replace(loop, var=outer_name, extent=sym(extent // factor), body=tuple(copies))
        ]
    else:  # the copies in a block of their own: their locals end with it
        starts = [ir.Declare(r.name, r.dtype, _identity(r)) for r in loop.reductions]
        new = [*starts, ir.Scope(tuple(copies))] if declared else [*starts, *copies]
    return replace(kernel, body=_replace(kernel.body, loop, new))


# -------------------------------------------------------------- threads and lanes
def _dependence(loop: ir.Loop) -> str | None:
    """Why iterations of `loop` may not run at once, or None. Conservative: every store
    must address an element through the loop variable with no data-dependent index
    local, no store may hit a buffer another iteration reads elsewhere, and no local
    declared outside the loop may be updated inside it."""
    declared = {x.name for x in walk(loop.body) if isinstance(x, ir.Declare | ir.Reduction)}
    data_indices = {
        x.name
        for x in walk(loop.body)
        if isinstance(x, ir.Declare) and x.dtype == ir.INDEX and _reads_memory(x.value)
    }
    written: set[int | str] = set()
    for x in walk(loop.body):
        if isinstance(x, ir.Store):
            used = _loop_vars(x.index)
            if used & data_indices:
                return f"a store to buffer {x.param} goes through an index read from memory"
            if loop.var not in used:
                return f"every iteration stores to the same element of buffer {x.param}"
            written.add(x.param)
        if isinstance(x, ir.Assign | ir.Accumulate) and x.name not in declared:
            return f"iterations update {x.name}, declared outside the loop"
        if isinstance(x, ir.Call | ir.LibraryCall):
            return f"it calls {x.function}, whose effects are unknown"
    for x in walk(loop.body):
        if isinstance(x, ir.Load) and x.param in written and loop.var not in _loop_vars(x.index):
            return f"iterations read buffer {x.param} where other iterations write it"
    return None


def _reads_memory(value: object) -> bool:
    return any(isinstance(x, ir.Load) for x in walk(value))


def parallelise(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Loop `axis` on threads: `arg` "always", or "static" (above the work the lowering
    gave it, when it had one). With no axis, every parallel loop of the kernel runs on
    threads always (the search's `parallel` knob)."""
    if opt.axis is None:
        return _every_parallel_loop(kernel, lambda loop: replace(loop, work=None))
    found = _find(kernel, opt.axis, opt)
    loop = found.loop
    if loop.kind not in THREAD_KINDS:
        raise _illegal(kernel, opt, f"loop {loop.var} is a {loop.kind} loop")
    nested = [x.var for x in (*found.enclosing, *_inner_loops(loop)) if x.kind == "parallel"]
    if any(v != loop.var for v in nested):
        raise _illegal(kernel, opt, f"loop {loop.var} is nested with parallel loop {nested[0]}")
    why = _dependence(loop)
    if why is not None:
        raise _illegal(kernel, opt, f"loop {loop.var} carries a dependence: {why}")
    work = loop.work if opt.arg == "static" else None
    new = replace(loop, kind="parallel", work=work)
    return replace(kernel, body=_replace(kernel.body, loop, [new]))


def serialise(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Loop `axis` in order on one thread; with no axis, every parallel loop."""
    serial = lambda loop: replace(loop, kind="serial", work=None)  # noqa: E731
    if opt.axis is None:
        return _every_parallel_loop(kernel, serial)
    loop = _find(kernel, opt.axis, opt).loop
    if loop.kind not in THREAD_KINDS:
        raise _illegal(kernel, opt, f"loop {loop.var} is a {loop.kind} loop, not run on threads")
    return replace(kernel, body=_replace(kernel.body, loop, [serial(loop)]))


def _inner_loops(loop: ir.Loop) -> list[ir.Loop]:
    return [x for x in walk(loop.body) if isinstance(x, ir.Loop)]


def _every_parallel_loop(kernel: ir.Kernel, change: Callable[[ir.Loop], ir.Loop]) -> ir.Kernel:
    def visit(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out = []
        for stmt in body:
            changes = {
                field: visit(getattr(stmt, field))
                for field in ("body", "then", "otherwise")
                if isinstance(getattr(stmt, field, None), tuple)
            }
            stmt = replace(stmt, **changes) if changes else stmt
            out.append(
                change(stmt) if isinstance(stmt, ir.Loop) and stmt.kind == "parallel" else stmt
            )
        return tuple(out)

    return replace(kernel, body=visit(kernel.body))


def vectorise(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """An innermost serial loop whose iterations are independent, as SIMD lanes."""
    loop = _find(kernel, opt.axis, opt).loop
    if loop.kind != "serial":
        raise _illegal(kernel, opt, f"loop {loop.var} is a {loop.kind} loop, not serial")
    if _inner_loops(loop):
        raise _illegal(kernel, opt, f"loop {loop.var} is not innermost")
    why = _dependence(loop)
    if why is not None:
        raise _illegal(kernel, opt, f"loop {loop.var} carries a dependence: {why}")
    return replace(kernel, body=_replace(kernel.body, loop, [replace(loop, kind="vector")]))


def vector_width(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """The kernel's preferred SIMD width in bits (the renderer's attribute)."""
    if opt.arg not in VECTOR_WIDTHS:
        raise _illegal(kernel, opt, f"vector width must be one of {VECTOR_WIDTHS}, got {opt.arg}")
    return replace(kernel, vector_width=opt.arg)


# --------------------------------------------------------------------- loop order
def swap(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Exchange loop `axis` with loop `arg` nested directly in it (its only statement).
    Each position keeps its kind (a parallel outer loop stays the parallel one), so the
    loop that moves out must be free of dependences if it becomes parallel."""
    outer = _find(kernel, opt.axis, opt).loop
    inner = outer.body[0] if len(outer.body) == 1 else None
    if not isinstance(inner, ir.Loop) or inner.var != opt.arg:
        raise _illegal(kernel, opt, f"loop {opt.arg} is not the only statement of {outer.var}")
    for loop in (outer, inner):
        if loop.kind not in THREAD_KINDS:
            raise _illegal(kernel, opt, f"loop {loop.var} is a {loop.kind} loop")
    if _mentions(inner.extent, outer.var):
        raise _illegal(kernel, opt, f"loop {inner.var}'s extent depends on {outer.var}")
    new_inner = replace(inner, var=outer.var, extent=outer.extent)
    new_outer = replace(outer, var=inner.var, extent=inner.extent, body=(new_inner,))
    if new_outer.kind == "parallel":
        why = _dependence(new_outer)
        if why is not None:
            raise _illegal(kernel, opt, f"loop {inner.var} would run on threads: {why}")
    return replace(kernel, body=_replace(kernel.body, outer, [new_outer]))


# ---------------------------------------------------------------- local memory
def stage_local(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Buffer parameter `arg`'s tile read by one iteration of loop `axis`, copied into
    local memory first (the loops inside `axis` that its index reads span the tile), a
    barrier, then every such load reads the local copy."""
    found = _find(kernel, opt.axis, opt)
    loop, param = found.loop, opt.arg
    if not isinstance(param, int) or not 0 <= param < len(kernel.params):
        raise _illegal(kernel, opt, f"no buffer parameter {param!r}")
    if kernel.params[param].output:
        raise _illegal(kernel, opt, f"buffer {param} is written by the kernel")
    loads = {x for x in walk(loop.body) if isinstance(x, ir.Load) and x.param == param}
    if len(loads) != 1:
        raise _illegal(kernel, opt, f"loop {loop.var} reads buffer {param} {len(loads)} ways")
    (load,) = loads
    inner = {x.var: x for x in _inner_loops(loop)}
    used = _loop_vars(load.index)
    tile_loops = [inner[v] for v in sorted(used & set(inner))]
    declared = {x.name for x in walk(loop.body) if isinstance(x, ir.Declare)}
    locals_ = used & declared
    if locals_:
        raise _illegal(kernel, opt, f"the index reads locals {sorted(locals_)} set in the loop")
    if any(x.extent.as_int() is None for x in tile_loops):
        raise _illegal(kernel, opt, "the tile has a symbolic size")
    taken = _names(kernel)
    name = _fresh(f"lds{param}", taken)
    copy_vars = {x.var: _fresh(f"{x.var}s", taken) for x in tile_loops}
    shape = [x.extent for x in tile_loops]
    size = ONE
    for d in shape:
        size = size * d
    position = _flat([_index_var(loop.body, x.var) for x in tile_loops], shape)
    local_load = ir.Load(name, position, load.dtype)  # type: ignore[arg-type]
    copy_index = {v: loop_index(copy_vars[v], inner[v].extent) for v in copy_vars}
    fill: tuple[ir.Stmt, ...] = (
        ir.Store(
            name,  # type: ignore[arg-type]
            _flat([copy_index[x.var] for x in tile_loops], shape),
            _substitute_all(load, copy_index),
            load.dtype,
        ),
    )
    for x in reversed(tile_loops):
        fill = (ir.Loop(copy_vars[x.var], x.extent, "serial", fill),)
    body = _map_values(loop.body, load, local_load)
    staged = (ir.LocalMemory(name, load.dtype, size), *fill, ir.Barrier(), *body)
    return replace(kernel, body=_replace(kernel.body, loop, [replace(loop, body=staged)]))


def _flat(indices: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    flat, stride = sym(0), ONE
    for index, dim in zip(reversed(indices), reversed(shape), strict=True):
        flat, stride = flat + index * stride, stride * dim
    return flat


def _substitute_all(node: object, values: dict[str, Expr]) -> object:
    mapping = {k + LOOP_MARK: v for k, v in values.items()}
    return _map_exprs(node, lambda e: e.substitute(mapping))


def _map_values(node: object, old: ir.Value, new: ir.Value) -> object:
    if node == old:
        return new
    if isinstance(node, tuple):
        return tuple(_map_values(x, old, new) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type) and not isinstance(node, Expr):
        changes = {
            f.name: _map_values(getattr(node, f.name), old, new) for f in dataclasses.fields(node)
        }
        return replace(node, **changes)
    return node


# ------------------------------------------------------------------ vector lanes
# what a lane may hold: declarations, updates of its own locals (a short reduction,
# unrolled), index checks, blocks of those, one reduce loop, the final store
_LANE_STATEMENTS = (ir.Declare, ir.Accumulate, ir.Store, ir.CheckIndex, ir.Scope, ir.Loop)


def lanes(kernel: ir.Kernel, opt: Opt) -> ir.Kernel:
    """Loop `axis` (n iterations) as n/w iterations of `w` lanes: every input read at `w`
    consecutive elements from an address that is a multiple of `w` is read by one
    `VectorLoad`, the body runs once per lane (locals renamed) reading its lane, and the
    lanes' results are written by one `VectorStore`. A reduce loop in the body (a column
    sum, a loop matrix product) becomes one reduce loop with an accumulator per lane.
    Loads that are not contiguous or aligned, sit in a select's branch (a padded view:
    the address may be invalid where the mask is false), read through a local the lanes
    compute or hold another type stay scalar, per lane. Legal on a loop with
    independent iterations and a known extent `w` divides, whose body is straight-line
    code around at most one reduce loop of straight-line code, ending in its one store,
    to a buffer whose index is contiguous and aligned along the loop."""
    loop = _find(kernel, opt.axis, opt).loop
    width = opt.arg
    if width not in LANES:
        raise _illegal(kernel, opt, f"the width must be one of {LANES}, got {width!r}")
    extent = _lane_extent(kernel, opt, loop, width)
    store = loop.body[-1]
    why = _dependence(loop)
    if why is not None:
        raise _illegal(kernel, opt, f"loop {loop.var} carries a dependence: {why}")
    taken = _names(kernel)
    var = _fresh(f"{loop.var}v", taken)
    lane = lambda k: loop_index(var, sym(extent // width)) * width + k  # noqa: E731
    if not _aligned(store.index, loop.var, lane, width) or store.dtype not in ir.VECTOR_DTYPES:
        why = f"the {store.dtype.name} output is not contiguous and aligned along {loop.var}"
        raise _illegal(kernel, opt, why)
    if any(isinstance(x, ir.Load) and x.param == store.param for x in walk(loop.body)):
        raise _illegal(kernel, opt, f"loop {loop.var} reads back buffer {store.param}")
    prefix = _invariant_prefix(loop)
    rest = loop.body[len(prefix) :]
    local = {x.name for x in walk(rest) if isinstance(x, ir.Declare | ir.CheckIndex)}
    straight = tuple(s for s in rest if not isinstance(s, ir.Loop))
    inner = [s.body for s in rest if isinstance(s, ir.Loop)]
    vectors = _Vectors(loop.var, lane, width, taken)
    outer = vectors.name(_wide_loads(straight, loop.var, lane, width, local))
    within = vectors.name(_wide_loads(inner[0], loop.var, lane, width, local)) if inner else {}
    copies = _lane_copies(rest, vectors, outer, within)
    statements, values = _merge_lanes(copies, vectors.declare(within))
    index = _substitute(store.index, loop.var, lane(0))
    wide_store = ir.VectorStore(store.param, index, tuple(values), store.dtype)
    body = (*prefix, *vectors.declare(outer), *statements, wide_store)
    new = replace(loop, var=var, extent=sym(extent // width), body=body)
    return replace(kernel, body=_replace(kernel.body, loop, [new]))


@dataclass
class _Vectors:
    """The lanes of one `lanes` transform: loop `var`, lane k's element `lane(k)`, the
    width, and the names in use (each wide load gets a fresh `vl<param>`)."""

    var: str
    lane: Callable[[int], Expr]
    width: int
    taken: set[str]

    def name(self, loads: list[ir.Load]) -> dict[ir.Load, str]:
        return {load: _fresh(f"vl{load.param}_", self.taken) for load in loads}

    def declare(self, vectors: dict[ir.Load, str]) -> list[ir.Stmt]:
        """One `VectorLoad` per wide load, at lane 0's element."""
        return [
            ir.Declare(name, ir.Vec(load.dtype, self.width), self.load(load), True)
            for load, name in vectors.items()
        ]

    def load(self, load: ir.Load) -> ir.VectorLoad:
        index = _substitute(load.index, self.var, self.lane(0))
        return ir.VectorLoad(load.param, index, load.dtype, self.width)  # type: ignore[arg-type]

    def reads(self, node: object, vectors: dict[ir.Load, str], k: int) -> object:
        """`node` (lane k's copy) with each wide load's read as lane k of its vector."""
        for load, name in vectors.items():
            vector = ir.Var(name, ir.Vec(load.dtype, self.width))
            node = _map_values(node, _substitute(load, self.var, self.lane(k)), ir.Lane(vector, k))
        return node


def _lane_copies(
    body: tuple[ir.Stmt, ...],
    vectors: _Vectors,
    outer: dict[ir.Load, str],
    within: dict[ir.Load, str],
) -> list[tuple[ir.Stmt, ...]]:
    """The body once per lane: loop variable = lane k's element, the wide loads' reads as
    `Lane`s of their vectors (`within` inside the reduce loop, `outer` elsewhere), and
    the locals and accumulators of every lane after lane 0 renamed."""
    declared = sorted({x.name for x in walk(body) if isinstance(x, ir.Declare | ir.Reduction)})
    copies: list[tuple[ir.Stmt, ...]] = []
    for k in range(vectors.width):
        copy = _substitute(body, vectors.var, vectors.lane(k))
        copy = tuple(
            vectors.reads(s, within if isinstance(s, ir.Loop) else outer, k)  # type: ignore[misc]
            for s in copy
        )
        if k:
            names = {n: _fresh(f"{n}_l{k}", vectors.taken) for n in declared}
            copy = _rename_locals(copy, names)  # type: ignore[assignment]
        copies.append(copy)
    return copies


def _merge_lanes(
    copies: list[tuple[ir.Stmt, ...]], inner_head: list[ir.Stmt]
) -> tuple[list[ir.Stmt], list[ir.Value]]:
    """The lanes' statements without their stores (a reduce loop once, holding every
    lane's body and accumulators after the wide loads made inside it), and the value
    each lane stores."""
    values = [copy[-1].value for copy in copies]  # type: ignore[attr-defined]
    position = next((i for i, s in enumerate(copies[0]) if isinstance(s, ir.Loop)), None)
    if position is None:
        return [s for copy in copies for s in copy[:-1]], values
    loops: list[ir.Loop] = [copy[position] for copy in copies]  # type: ignore[misc]
    merged = replace(
        loops[0],
        body=(*inner_head, *(s for x in loops for s in x.body)),
        reductions=tuple(r for x in loops for r in x.reductions),
    )
    before = [s for copy in copies for s in copy[:position]]
    after = [s for copy in copies for s in copy[position + 1 : -1]]
    return [*before, merged, *after], values


def _lane_extent(kernel: ir.Kernel, opt: Opt, loop: ir.Loop, width: int) -> int:
    """The loop's known extent, checked: a loop `lanes` accepts (see there)."""
    if loop.kind not in ("serial", "parallel", "gpu_global"):
        raise _illegal(kernel, opt, f"loop {loop.var} is a {loop.kind} loop")
    extent = loop.extent.as_int()
    if extent is None:
        raise _illegal(kernel, opt, f"loop {loop.var} has a symbolic extent ({loop.extent})")
    if extent % width:
        raise _illegal(kernel, opt, f"{width} does not divide loop {loop.var}'s extent {extent}")
    inner = [s for s in loop.body if isinstance(s, ir.Loop)]
    for stmt in loop.body:
        scoped = stmt.body if isinstance(stmt, ir.Scope) else ()
        for x in (stmt, *scoped):
            if not isinstance(x, _LANE_STATEMENTS) or getattr(x, "action", "") == "skip":
                what = type(x).__name__
                raise _illegal(kernel, opt, f"loop {loop.var} is not straight-line code (a {what})")
        if any(isinstance(x, ir.Loop | ir.Scope | ir.Store) for x in scoped):
            raise _illegal(kernel, opt, f"loop {loop.var} is not straight-line code (a block)")
    if len(inner) > 1 or (inner and not _lane_reduction(inner[0], loop.var)):
        why = "its body holds a loop other than one straight-line reduce loop"
        raise _illegal(kernel, opt, f"loop {loop.var} is not straight-line code ({why})")
    stores = [s for s in walk(loop.body) if isinstance(s, ir.Store)]
    if len(stores) != 1 or stores[0] is not loop.body[-1] or isinstance(stores[0].param, str):
        raise _illegal(kernel, opt, f"loop {loop.var} does not end in its one buffer store")
    return extent


def _lane_reduction(inner: ir.Loop, var: str) -> bool:
    """A reduce loop whose lanes can share one loop: straight-line body (declarations and
    reduction steps), an extent the same for every lane."""
    straight = all(isinstance(s, ir.Declare | ir.Accumulate) for s in inner.body)
    return inner.kind == "reduce" and straight and not _mentions(inner.extent, var)


def _aligned(index: Expr, var: str, lane: Callable[[int], Expr], width: int) -> bool:
    """Whether lane k of `index` (along loop `var`) is lane 0's element + k, and lane 0's
    element a multiple of `width` (proved on the expressions, for every iteration)."""
    first = _substitute(index, var, lane(0))
    if (first % width).as_int() != 0:
        return False
    return all((_substitute(index, var, lane(k)) - first).as_int() == k for k in range(width))


def _invariant_prefix(loop: ir.Loop) -> tuple[ir.Stmt, ...]:
    """The declarations and index checks at the top of the body that do not depend on
    the loop variable and are not updated later (a merged work-item axis decoded into
    indices, a gather's checked row): computed once, before the wide loads, not per
    lane."""
    updated = {x.name for x in walk(loop.body) if isinstance(x, ir.Accumulate | ir.Assign)}
    prefix: list[ir.Stmt] = []
    for stmt in loop.body:
        if not isinstance(stmt, ir.Declare | ir.CheckIndex) or _mentions(stmt, loop.var):
            break
        if stmt.name in updated:  # an accumulator: every lane has its own
            break
        prefix.append(stmt)
    return tuple(prefix)


def _wide_loads(
    body: tuple[ir.Stmt, ...],
    var: str,
    lane: Callable[[int], Expr],
    width: int,
    local: set[str],
) -> list[ir.Load]:
    """The loads of `body` every lane makes unconditionally, of a vector type, contiguous
    and aligned along `var` and indexed without the `local`s the lanes declare or check
    (the wide loads are made before them: in program order)."""
    found: list[ir.Load] = []
    for load in _unconditional_loads(body):
        if load in found or isinstance(load.param, str) or load.dtype not in ir.VECTOR_DTYPES:
            continue
        if _loop_vars(load.index) & local or var not in _loop_vars(load.index):
            continue
        if _aligned(load.index, var, lane, width):
            found.append(load)
    return found


def _unconditional_loads(node: object) -> Iterator[ir.Load]:
    """Loads under `node` outside the branches of a select."""
    if isinstance(node, ir.Load):
        yield node
    elif isinstance(node, ir.Select):
        yield from _unconditional_loads(node.cond)
    elif isinstance(node, tuple):
        for x in node:
            yield from _unconditional_loads(x)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type | Expr):
        for f in dataclasses.fields(node):
            yield from _unconditional_loads(getattr(node, f.name))


TRANSFORMS: dict[str, Callable[[ir.Kernel, Opt], ir.Kernel]] = {
    "split": split,
    "unroll": unroll,
    "parallel": parallelise,
    "serial": serialise,
    "vectorise": vectorise,
    "vector_width": vector_width,
    "swap": swap,
    "stage_local": stage_local,
    "lanes": lanes,
}

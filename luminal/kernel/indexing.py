"""Index arithmetic of generated kernels: flat row-major positions of logical indices and
back, and the loop indices those expressions are written in.

Loop indices live in a namespace of their own: their expression variables end in
`LOOP_MARK`, a character no dimension name can hold (a dim name is a Python
identifier), so a user's dim named `i0_`, `r0_` or `n` never meets a loop index in one
expression, and renderers tell the two apart by name (`is_loop_index`), not by pattern.
"""

from __future__ import annotations

from collections.abc import Sequence

from luminal import ops
from luminal.graph import Graph
from luminal.shape.expr import ONE, ZERO, Atom, Expr
from luminal.shape.tracker import contiguous_strides

LOOP_MARK = "#"  # not an identifier character: see the module docstring


def loop_index(name: str, extent: Expr) -> Expr:
    """The variable of a loop named `name` (its name in generated code) running over
    `extent` values, bounded when the extent is known."""
    upper = extent.as_int()
    atom = Atom("var", (name + LOOP_MARK,), upper - 1 if upper is not None else None)
    return Expr((((atom,), 1),))


def is_loop_index(variable: str) -> bool:
    """Whether an expression variable is a loop index (else it is a dimension)."""
    return variable.endswith(LOOP_MARK)


def loop_name(variable: str) -> str:
    """A loop index's name in generated code."""
    return variable.removesuffix(LOOP_MARK)


def index_loop_name(index: Expr) -> str:
    """The generated-code name of the loop whose index expression is `index`
    (`loop_index(name, ...)`)."""
    return loop_name(index.terms[0][0][0].args[0])


def dims_of(graph: Graph) -> list[str]:
    """The names of the symbolic dims a graph's kernels read, sorted: the order of the
    dimension array every kernel receives."""
    names: set[str] = set()
    for node in graph.nodes.values():
        for d in node.shape:
            names |= d.variables()
        for edge in node.inputs:
            view = edge.view
            for e in (*view.shape, *view.strides, view.offset):
                names |= e.variables()
            if view.mask is not None:
                for lo, hi in view.mask:
                    names |= lo.variables() | hi.variables()
        if isinstance(node.op, ops.Constant) and hasattr(node.op.value, "variables"):
            names |= node.op.value.variables()
        if isinstance(node.op, ops.Iota):
            names |= node.op.expr.variables() - {"z"}
    return sorted(names)


def flat_index(indices: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    """Row-major flat position of logical `indices` in a buffer of `shape`."""
    flat = ZERO
    for index, stride in zip(indices, contiguous_strides(shape), strict=True):
        flat = flat + index * stride
    return flat


def unravel(
    flat: Expr, shape: Sequence[Expr], extents: dict[str, Expr], compare: bool = False
) -> list[Expr]:
    """Logical indices of a flat row-major position. When `flat` is a sum of loop indices
    times the buffer's own strides (the usual case: permutes, broadcasts, pads, slices),
    each dim's index is read off directly; otherwise `(flat // stride) % dim` (which the
    expression simplifier folds where the loop bounds allow), or with `compare`, where a
    remainder's range is small, a comparison in place of each division (see
    `_divide_by_comparison`)."""
    strides = contiguous_strides(shape)
    direct = _affine_unravel(flat, shape, strides, extents)
    if direct is not None:
        return direct
    # a read lies inside the buffer (or is masked off), so the outermost index needs no
    # `% dim`: with a symbolic batch dim that modulo would stay in the inner loop
    outermost = next((d for d, dim in enumerate(shape) if dim != 1), None)
    divided = [
        ZERO if dim == 1 else flat // stride if d == outermost else (flat // stride) % dim
        for d, (dim, stride) in enumerate(zip(shape, strides, strict=True))
    ]
    if not compare:
        return divided
    # peel the dims off from the outermost, dividing by comparison where the remainder's
    # range allows (a skewed read, 14*r + i into rows of 15): no division in the loop
    compared = list(divided)
    remainder = flat
    for d, (dim, stride) in enumerate(zip(shape, strides, strict=True)):
        if dim == 1:
            continue
        split = _divide_by_comparison(remainder, stride)
        if split is None:
            break
        compared[d], remainder = split
    return compared


def _divide_by_comparison(value: Expr, divisor: Expr) -> tuple[Expr, Expr] | None:
    """(value // divisor, value % divisor) without a division, for a constant divisor:
    each coefficient is split as q * divisor + r with r nearest zero, so the rest
    R = sum(r * term) has a small range; when R spans at most two multiples of the
    divisor, its quotient is one comparison. None when the range is unknown or wider, or
    when `value` is not affine (comparisons of comparisons grow without bound)."""
    d = divisor.as_int()
    if d == 1:
        return value, ZERO
    if d is None or d <= 0 or any(a.op != "var" for mono, _ in value.terms for a in mono):
        return None  # only affine values: comparisons must not nest
    best = None
    for nearest in (False, True):  # floor division of each coefficient, then nearest
        quotient, rest = ZERO, ZERO
        for mono, coef in value.terms:
            term = Expr(((mono, 1),)) if mono else ONE
            q = (coef + d // 2) // d if mono and nearest else coef // d
            quotient = quotient + term * q
            rest = rest + term * (coef - q * d)
        lo, hi = rest.bounds()
        if lo == float("-inf") or hi == float("inf"):
            continue
        k_lo, k_hi = int(lo) // d, int(hi) // d
        if k_lo == k_hi:
            return quotient + k_lo, rest - k_lo * d
        if k_hi - k_lo == 1 and best is None:
            carry = k_lo + rest.ge(k_hi * d)
            best = quotient + carry, rest - carry * d
    return best


def _affine_unravel(
    flat: Expr, shape: Sequence[Expr], strides: Sequence[Expr], extents: dict[str, Expr]
) -> list[Expr] | None:
    by_stride: dict[Expr, list[Expr]] = {}
    for mono, coef in flat.terms:
        loop_vars = [a for a in mono if a.op == "var" and is_loop_index(a.args[0])]
        if len(loop_vars) != 1 or any(a.op != "var" for a in mono):
            return None  # a constant offset or a non-affine term
        (index_atom,) = loop_vars
        rest = [a for a in mono if a is not index_atom]
        stride = Expr((((tuple(rest)), coef),))
        by_stride.setdefault(stride, []).append(Expr((((index_atom,), 1),)))
    indices: list[Expr] = []
    used = 0
    for dim, stride in zip(shape, strides, strict=True):
        if dim == 1:
            indices.append(ZERO)
            continue
        parts = by_stride.get(stride, [])
        used += len(parts)
        total = ZERO
        span = ZERO  # the largest value the summed indices reach
        for part in parts:
            total = total + part
            extent = extents.get(part.terms[0][0][0].args[0])
            if extent is None:
                return None
            span = span + extent - 1
        if parts and not (span == dim - 1 or (dim - 1 - span).bounds()[0] >= 0):
            return None  # an index could run past this dim (a merged reshape)
        indices.append(total)
    if used != sum(len(v) for v in by_stride.values()):
        return None  # some term's coefficient is not a stride of this buffer
    return indices

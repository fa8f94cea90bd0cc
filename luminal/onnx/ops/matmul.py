"""MatMul, Gemm and Einsum."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal.onnx.context import NodeContext
from luminal.shape.expr import sym, var
from luminal.tensor import GraphTensor

Rule = Callable[[NodeContext], object]


def matmul(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """numpy matmul for any rank: batch dims beyond luminal's 5-D are merged."""
    if max(a.ndim, b.ndim) <= 5:
        return a.matmul(b)
    rank = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (rank - a.ndim) + tuple(a.view.shape))
    b = b.reshape((1,) * (rank - b.ndim) + tuple(b.view.shape))
    from luminal.hl.binary import broadcast_shapes

    batch = broadcast_shapes(a.view.shape[:-2], b.view.shape[:-2], "MatMul")
    a = a.expand(batch + tuple(a.view.shape[-2:])).reshape((-1, *a.view.shape[-2:]))
    b = b.expand(batch + tuple(b.view.shape[-2:])).reshape((-1, *b.view.shape[-2:]))
    out = a.matmul(b)
    return out.reshape(batch + tuple(out.view.shape[-2:]))


def _matmul(ctx: NodeContext) -> GraphTensor:
    a, b = ctx.tensor(0), ctx.tensor(1)
    return matmul(a, b).cast(a.dtype)


def _gemm(ctx: NodeContext) -> GraphTensor:
    a, b = ctx.tensor(0), ctx.tensor(1)
    if ctx.attr("transA", 0):
        a = a.transpose(0, 1)
    if ctx.attr("transB", 0):
        b = b.transpose(0, 1)
    result = a.matmul(b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        result = result * alpha
    if ctx.has(2):
        c = ctx.tensor(2)
        result = result + (c * beta if beta != 1.0 else c)
    return result.cast(ctx.tensor(0).dtype)


def _einsum(ctx: NodeContext) -> GraphTensor:
    """Any einsum: a letter repeated in one operand takes that operand's diagonal first;
    operands are then laid out over all letters, multiplied with broadcasting and
    summed over the letters that leave."""
    equation = ctx.attr("equation").replace(" ", "")
    operands = ctx.tensors()
    inputs_text, _, output = equation.partition("->")
    terms = inputs_text.split(",")
    if len(terms) != len(operands):
        raise ctx.invalid(f"equation {equation!r} names {len(terms)} operands")
    terms = [_expand_ellipsis(t, x.ndim) for t, x in zip(terms, operands, strict=True)]
    if "->" not in equation:
        letters = [c for t in terms for c in t]
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    else:
        widths = [
            x.ndim - len(t.replace("...", ""))
            for t, x in zip(inputs_text.split(","), operands, strict=True)
        ]
        output = _expand_ellipsis(output, max(widths, default=0) + len(output.replace("...", "")))
    for k, (term, x) in enumerate(zip(terms, operands, strict=True)):
        while len(set(term)) != len(term):  # a repeated letter: its diagonal
            term, x = _diagonal(term, x)
        terms[k], operands[k] = term, x
    letters = list(dict.fromkeys(output + "".join(terms)))
    sizes: dict[str, Any] = {}
    for term, x in zip(terms, operands, strict=True):
        for letter, dim in zip(term, x.view.shape, strict=True):
            if dim != 1 or letter not in sizes:
                sizes[letter] = dim
    product = None
    for term, x in zip(terms, operands, strict=True):
        laid = _lay_out(x, term, letters, sizes)
        product = laid if product is None else product * laid
    summed = tuple(i for i, c in enumerate(letters) if c not in output)
    result = product.sum(summed) if summed else product
    return result.cast(operands[0].dtype)


def _diagonal(term: str, x: GraphTensor) -> tuple[str, GraphTensor]:
    """The first repeated letter's two axes replaced by their diagonal (a row gather of
    every (n + 1)-th row), the letter moved to the front."""
    letter = next(c for c in term if term.count(c) > 1)
    p = term.index(letter)
    q = term.index(letter, p + 1)
    n = x.view.shape[p]
    rest = [d for d in range(x.ndim) if d not in (p, q)]
    rows = x.permute((p, q, *rest)).reshape((n * n, *(x.view.shape[d] for d in rest)))
    diagonal = rows.gather(x.graph.iota(var("z") * (n + 1), (n,)))
    return letter + "".join(term[d] for d in rest), diagonal


def _expand_ellipsis(term: str, rank: int) -> str:
    """'...' becomes upper-case letters (ONNX einsum letters are lower-case)."""
    if "..." not in term:
        return term
    width = rank - len(term.replace("...", ""))
    return term.replace("...", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[26 - width :] if width else "")


def _lay_out(x: GraphTensor, term: str, letters: list[str], sizes: dict[str, Any]) -> GraphTensor:
    order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
    x = x.permute(tuple(order)) if order != list(range(len(term))) else x
    present = [term[i] for i in order]
    shape = []
    for letter in letters:
        shape.append(x.view.shape[present.index(letter)] if letter in present else sym(1))
    x = x.reshape(tuple(shape))
    return x.expand(tuple(sizes[c] for c in letters))


def _det(ctx: NodeContext) -> GraphTensor:
    """Determinant by Gaussian elimination with partial pivoting, unrolled over the
    (known) matrix size: each step takes the row with the largest |pivot| (argmax and a
    row gather; a swap flips the sign), then clears the column below it. A zero pivot
    column leaves the row as it is and the product of the diagonal is 0."""
    x = ctx.tensor(0)
    a = x if x.dtype.is_float else x.cast("float32")
    n = int(a.view.shape[-1].as_int())
    batch = tuple(a.view.shape[:-2])
    a = a.reshape((-1, n, n))
    rows = a.graph.arange(n).reshape((1, n))  # (1, n): row numbers
    sign: GraphTensor | None = None
    diagonal = []
    for k in range(n):
        column = a.slice([None, None, (k, k + 1)]).reshape((-1, n))
        below = rows.ge(k).cast(a.dtype)
        pivot = (column.abs() * below - (1.0 - below)).argmax(1, keepdim=True)  # (b, 1)
        # order: row k <- pivot row, pivot row <- row k, others stay
        at_k, at_pivot = rows.eq(k), rows.eq(pivot)
        order = rows + at_k * (pivot - k) + at_pivot * (k - pivot)
        a = _take_rows(a, order)
        swapped = 1.0 - pivot.ne(k).cast(a.dtype) * 2.0
        sign = swapped if sign is None else sign * swapped
        top = a.slice([None, (k, k + 1), None])  # (b, 1, n)
        lead = top.slice([None, None, (k, k + 1)])  # (b, 1, 1)
        diagonal.append(lead.reshape((-1, 1)))
        safe = lead + lead.eq(0).cast(a.dtype)
        factors = a.slice([None, None, (k, k + 1)]) / safe  # (b, n, 1)
        factors = factors * rows.gt(k).cast(a.dtype).reshape((1, n, 1))
        a = a - factors * top
    product = diagonal[0]
    for d in diagonal[1:]:
        product = product * d
    result = (product * sign).reshape(batch)
    return result.cast(x.dtype)


def _take_rows(a: GraphTensor, order: GraphTensor) -> GraphTensor:
    """a (b, n, n) with row i of each matrix replaced by row order[b, i]."""
    n = a.view.shape[1]
    base = a.graph.iota((var("z") // n) * n, order.view.shape)
    flat = a.reshape((-1, n))
    return flat.gather(base + order).reshape(a.view.shape)


RULES: dict[str, Rule] = {"MatMul": _matmul, "Gemm": _gemm, "Einsum": _einsum, "Det": _det}

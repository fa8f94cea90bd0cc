"""Canonical kernels (luminal/kernel/canonical.py): identical computations render to one
source, one symbol and one compiled unit; nothing that could change a value is reordered."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends.cpu.codegen import RENDERER, kernel_source
from luminal.backends.cpu.compiler import static_program
from luminal.compiler.passes import GenericCompiler
from luminal.dtype import DType
from luminal.kernel import ir
from luminal.kernel.canonical import canonical
from luminal.kernel.indexing import loop_index
from luminal.shape.expr import sym

F = DType.float32
I = loop_index("i0_", sym(8))


def _scaled_row_max(local: str, negate_first: bool) -> ir.Kernel:
    """y[i] = max_j(x[i, j]) * -1 with the accumulator called `local` and the product's
    operands in either order (as two layers of one model come out of the e-graph)."""
    r = loop_index("r0_", sym(16))
    acc = ir.Loop(
        "r0_",
        sym(16),
        "reduce",
        (ir.Accumulate(local, "max", ir.Load(1, 16 * I + r, F)),),
        reductions=(ir.Reduction(local, "max", F),),
    )
    product = (ir.Const(-1.0, F), ir.Var(local, F))
    value = ir.Alu("mul", product if negate_first else product[::-1], F)
    body = (ir.Loop("i0_", sym(8), "parallel", (acc, ir.Store(0, I, value, F))),)
    return ir.Kernel("scaled_max", (ir.Param(9, F, True), ir.Param(1, F)), (), body, (9,))


def test_local_names_and_product_order_do_not_change_the_source() -> None:
    first = kernel_source(_scaled_row_max("s420", negate_first=False))
    second = kernel_source(_scaled_row_max("s429", negate_first=True))
    assert first.source == second.source and first.name == second.name
    assert "s420" not in first.source  # renamed, not merely equal by chance
    # without canonicalisation the two differ (the test's kernels are really distinct)
    assert RENDERER.render(_scaled_row_max("s420", False)) != RENDERER.render(
        _scaled_row_max("s429", True)
    )


def _store(value: ir.Value) -> ir.Kernel:
    body = (ir.Loop("i0_", sym(8), "serial", (ir.Store(0, I, value, F),)),)
    return ir.Kernel("k", (ir.Param(3, F, True), ir.Param(1, F), ir.Param(2, F)), (), body, (3,))


def test_max_and_longer_sums_keep_their_operand_order() -> None:
    """max(-0.0, +0.0) depends on the order and float sums do not associate: untouched."""
    a, b, c = ir.Load(2, I, F), ir.Load(1, I, F), ir.Const(1.0, F)
    for value in (ir.Alu("max", (a, b), F), ir.Alu("add", (a, b, c), F)):
        assert canonical(_store(value)).body == _store(value).body
    swapped = canonical(_store(ir.Alu("add", (a, b), F)))
    assert canonical(_store(ir.Alu("add", (b, a), F))) == swapped


def test_index_locals_keep_their_names() -> None:
    """An index local is read by name inside index expressions: renaming it alone would
    leave the expression reading a variable that no longer exists."""
    row = ir.Declare("row", ir.INDEX, ir.Cast(ir.Load(1, I, DType.int32), DType.int32, ir.INDEX))
    gathered = ir.Load(2, 4 * loop_index("row", sym(8)), F)
    body = (
        ir.Loop(
            "i0_",
            sym(8),
            "serial",
            (row, ir.Declare("g5", F, gathered, const=True), ir.Store(0, I, ir.Var("g5", F), F)),
        ),
    )
    kernel = ir.Kernel(
        "gather", (ir.Param(3, F, True), ir.Param(1, F), ir.Param(2, F)), (), body, (3,)
    )
    loop = canonical(kernel).body[0]
    assert loop.body[0].name == "row"
    assert loop.body[1].name != "g5" and loop.body[2].value == ir.Var(loop.body[1].name, F)


def test_identical_blocks_share_one_compiled_kernel() -> None:
    """Four softmax(h @ W) blocks: the kernels of each kind (softmax rows, or whatever
    fusion makes of the blocks) are one symbol, so one translation unit, and the program
    still equals numpy."""
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = rng.standard_normal((8, 32)).astype(np.float32)
    h, expected = cx.tensor((8, 32)).set(x), x
    for _ in range(4):
        w = rng.standard_normal((32, 32)).astype(np.float32) * 0.1
        h = (h @ cx.tensor((32, 32)).set(w)).softmax(-1)
        logits = expected @ w
        e = np.exp(logits - logits.max(-1, keepdims=True))
        expected = e / e.sum(-1, keepdims=True)
    h.retrieve()
    cx.compile(GenericCompiler())
    compiled = static_program(cx)
    kinds: dict[str, set[str]] = {}
    kernels = [k for segment in compiled.segments for k in segment.kernels]
    for kernel in kernels:
        kinds.setdefault(kernel.name.rsplit("_", 1)[0], set()).add(kernel.name)
    assert len(kernels) >= 4 and all(len(names) == 1 for names in kinds.values()), kinds
    compiled.build()
    cx.compiled = compiled
    cx.execute()
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-5, atol=1e-6)

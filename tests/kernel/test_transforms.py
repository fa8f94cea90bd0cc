"""Schedule knobs as IR transformations: each one, applied to a kernel lowered from a
small graph, renders, compiles and runs on the CPU backend to what numpy computes; an
illegal one raises IllegalTransform naming the kernel, the loop and why."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu.codegen import CpuRenderer, kernel_source
from luminal.backends.cpu.lowering import assemble, lower_kernels
from luminal.errors import CompileError
from luminal.kernel import ir
from luminal.kernel.transforms import IllegalTransform, Opt, apply_opts
from luminal.training.autograd import gradients

Build = Callable[[lm.Graph], tuple[lm.GraphTensor, np.ndarray]]
RNG = np.random.default_rng(0)
X = RNG.uniform(-2, 2, (32, 48)).astype(np.float32)
Y = RNG.uniform(-2, 2, (48, 32)).astype(np.float32)
ROWS = RNG.uniform(-4, 4, (8, 64)).astype(np.float32)
INTS = RNG.integers(-1000, 1000, (6, 40)).astype(np.int32)
A = RNG.uniform(-1, 1, (12, 32)).astype(np.float32)
B = RNG.uniform(-1, 1, (16, 32)).astype(np.float32)


def elementwise(cx: lm.Graph) -> tuple[lm.GraphTensor, np.ndarray]:
    """exp(x) * y^T + 1 over (32, 48): a parallel i0_ around a serial i1_."""
    x, y = cx.tensor(X.shape).set(X), cx.tensor(Y.shape).set(Y)
    return x.exp() * y.transpose(0, 1) + 1.0, np.exp(X) * Y.T + 1.0


def softmax(cx: lm.Graph) -> tuple[lm.GraphTensor, np.ndarray]:
    """A row kernel: a max reduce loop, a sum reduce loop that stores, a serial loop,
    all three named j0_."""
    e = np.exp(ROWS - ROWS.max(1, keepdims=True))
    return cx.tensor(ROWS.shape).set(ROWS).softmax(1), e / e.sum(1, keepdims=True)


def int_sum(cx: lm.Graph) -> tuple[lm.GraphTensor, np.ndarray]:
    """An int32 sum over 40 elements: a reduce loop with a wrapping accumulator."""
    return cx.tensor(INTS.shape, dtype=lm.int32).set(INTS).sum(1), INTS.sum(1)


def dot_rows(cx: lm.Graph) -> tuple[lm.GraphTensor, np.ndarray]:
    """(12, 16) dot products over 32 as a loop reduction (no BLAS)."""
    a, b = cx.tensor(A.shape).set(A), cx.tensor(B.shape).set(B)
    return (a.unsqueeze(1) * b.unsqueeze(0)).sum(2), A @ B.T


def _lower(build: Build):  # noqa: ANN202
    """(graph, output tensor, numpy's output, lowering, the node of the kernel to
    transform: the output's, else the kernel computing the most nodes)."""
    cx = lm.Graph()
    out, expected = build(cx)
    out = out.retrieve()
    cx.compile(lm.GenericCompiler())
    lowering = lower_kernels(cx)
    kernels = lowering.kernels
    (root,) = cx.output_roots()
    head = root if root in kernels else max(kernels, key=lambda n: len(kernels[n].nodes))
    return cx, out, expected, lowering, head


def kernel_of(build: Build) -> ir.Kernel:
    _, _, _, lowering, head = _lower(build)
    return lowering.kernels[head].kernel


def run_transformed(build: Build, opts: list[Opt], renderer: CpuRenderer | None = None):  # noqa: ANN201
    """The graph's output with `opts` applied to the output's kernel, and numpy's."""
    cx, out, expected, lowering, head = _lower(build)
    kernel = apply_opts(lowering.kernels[head].kernel, opts)
    lowering.kernels[head] = kernel_source(kernel, *([renderer] if renderer else []))
    compiled = assemble(lowering)
    compiled.build()
    cx.compiled = compiled
    cx.execute()
    return out.numpy(), expected, kernel, lowering.kernels[head].source


def loops(kernel: ir.Kernel) -> list[tuple[str, int | None, str]]:
    """(var, extent, kind) of every loop, in program order."""
    found = []

    def visit(body: tuple) -> None:
        for stmt in body:
            if isinstance(stmt, ir.Loop):
                found.append((stmt.var, stmt.extent.as_int(), stmt.kind))
            for field in ("body", "then", "otherwise"):
                if isinstance(getattr(stmt, field, None), tuple):
                    visit(getattr(stmt, field))

    visit(kernel.body)
    return found


LEGAL = [
    ("split i1_", elementwise, [Opt("split", "i1_", 16)]),
    ("split parallel i0_", elementwise, [Opt("split", "i0_", 8)]),
    ("unroll i1_", elementwise, [Opt("unroll", "i1_", 4)]),
    (
        "unroll all of i1_ after a split",
        elementwise,
        [Opt("split", "i1_", 4), Opt("unroll", "i1_i", 4)],
    ),
    ("swap", elementwise, [Opt("swap", "i0_", "i1_")]),
    ("serial", elementwise, [Opt("serial")]),
    ("always parallel", elementwise, [Opt("parallel")]),
    ("parallel i0_ static", elementwise, [Opt("serial"), Opt("parallel", "i0_", "static")]),
    ("vector width 512", elementwise, [Opt("vector_width", None, 512)]),
    ("vectorise i1_", elementwise, [Opt("vectorise", "i1_")]),
    ("split max reduce", softmax, [Opt("split", "j0_@0", 16)]),
    ("split storing sum reduce", softmax, [Opt("split", "j0_@1", 8)]),
    ("unroll sum reduce", softmax, [Opt("unroll", "j0_@1", 4)]),
    ("unroll rows", softmax, [Opt("unroll", "i0_", 2), Opt("vector_width", None, 512)]),
    ("split int sum", int_sum, [Opt("split", "r0_", 8)]),
    ("unroll int sum", int_sum, [Opt("unroll", "r0_", 4)]),
    ("unroll whole reduce", dot_rows, [Opt("split", "r0_", 4), Opt("unroll", "r0_i", 4)]),
    (
        "split then parallel inner tile",
        dot_rows,
        [Opt("serial"), Opt("split", "i1_", 4), Opt("parallel", "i1_i")],
    ),
]


@pytest.mark.parametrize("name", [case[0] for case in LEGAL])
def test_legal_transforms_compute_what_numpy_computes(name: str) -> None:
    _, build, opts = next(case for case in LEGAL if case[0] == name)
    got, expected, _, _ = run_transformed(build, opts)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_transforms_change_the_loops_they_say() -> None:
    kernel = kernel_of(elementwise)
    assert loops(kernel) == [("i0_", 32, "parallel"), ("i1_", 48, "serial")]
    split = apply_opts(kernel, [Opt("split", "i1_", 16)])
    assert loops(split) == [("i0_", 32, "parallel"), ("i1_o", 3, "serial"), ("i1_i", 16, "serial")]
    swapped = apply_opts(kernel, [Opt("swap", "i0_", "i1_")])
    assert loops(swapped) == [("i1_", 48, "parallel"), ("i0_", 32, "serial")]
    assert loops(apply_opts(kernel, [Opt("serial")])) == [
        ("i0_", 32, "serial"),
        ("i1_", 48, "serial"),
    ]
    forced = apply_opts(kernel, [Opt("parallel")])
    assert forced.body[0].work is None and kernel.body[0].work is not None
    unrolled = apply_opts(kernel, [Opt("unroll", "i1_", 4)])
    assert loops(unrolled)[1] == ("i1_u", 12, "serial") and len(unrolled.body[0].body[0].body) == 4


def test_split_reduce_loop_keeps_the_reduction() -> None:
    kernel = apply_opts(kernel_of(softmax), [Opt("split", "j0_@0", 16)])
    assert [(v, n, k) for v, n, k in loops(kernel)][:3] == [
        ("i0_", 8, "parallel"),
        ("j0_o", 4, "serial"),
        ("j0_i", 16, "reduce"),
    ]


def test_knob_sources_show_the_knob() -> None:
    _, _, _, source = run_transformed(
        elementwise, [Opt("vector_width", None, 512), Opt("parallel")]
    )
    assert "prefer-vector-width=512" in source
    assert "#pragma omp parallel for\n" in source and "if(" not in source
    _, _, _, serial = run_transformed(elementwise, [Opt("serial")])
    assert "#pragma omp" not in serial


ILLEGAL = [
    (elementwise, Opt("split", "i1_", 5), "does not divide"),
    (elementwise, Opt("split", "i1_", 48), "only 48 iterations"),
    (elementwise, Opt("split", "k9_", 4), "no loop named 'k9_'"),
    (elementwise, Opt("parallel", "i1_"), "nested with parallel loop i0_"),
    (elementwise, Opt("vector_width", None, 128), "vector width"),
    (elementwise, Opt("swap", "i1_", "i0_"), "not the only statement"),
    (elementwise, Opt("vectorise", "i0_"), "not serial"),
    (softmax, Opt("split", "j0_", 4), "3 loops named 'j0_'"),
    (softmax, Opt("parallel", "j0_@0"), "reduce loop"),
    (softmax, Opt("serial", "j0_@1"), "reduce loop"),
    (dot_rows, Opt("stage_local", "i0_", 0), "written by the kernel"),
    (elementwise, Opt("tile", "i1_", 4), "no schedule transformation"),
]


@pytest.mark.parametrize("case", range(len(ILLEGAL)))
def test_illegal_transforms_raise_naming_kernel_loop_and_why(case: int) -> None:
    build, opt, why = ILLEGAL[case]
    kernel = kernel_of(build)
    with pytest.raises(IllegalTransform, match=why) as raised:
        opt.apply(kernel)
    if opt.op != "tile":
        assert kernel.label in str(raised.value) and opt.name in str(raised.value)


def scatter_graph(cx: lm.Graph) -> tuple[lm.GraphTensor, np.ndarray]:
    """The gradient of an embedding lookup: a Scatter adding rows at repeated indices."""
    table = RNG.uniform(-1, 1, (5, 4)).astype(np.float32)
    index = np.array([1, 3, 1], np.int32)
    t = cx.tensor(table.shape).set(table)
    loss = (t.gather(cx.tensor((3,), dtype=lm.int32).set(index)) * 2.0).sum()
    (grad,) = gradients(cx, [t], loss)
    expected = np.zeros_like(table)
    np.add.at(expected, index, 2.0)
    return grad, expected


def test_scatter_keeps_its_serial_update_loop() -> None:
    """Repeated indices accumulate in order: the update loop carries a dependence through
    an index read from memory, and its `continue` on a bad index forbids unrolling."""
    kernel = kernel_of(scatter_graph)
    update = [var for var, _, kind in loops(kernel) if var.startswith("r")][0]
    with pytest.raises(IllegalTransform, match="index read from memory|same element"):
        Opt("parallel", update).apply(kernel)
    with pytest.raises(IllegalTransform, match="skips iterations"):
        Opt("unroll", update, 3).apply(kernel)


class StagingRenderer(CpuRenderer):
    """Test-only: local memory as a C array of the work-item, read and written by its
    name, and a barrier as nothing (one work-item per loop iteration runs in order), so
    a staged kernel runs on the CPU."""

    def stmt_localmemory(self, stmt: ir.LocalMemory, depth: int) -> list[str]:
        storage = self.storage_types[stmt.dtype]
        return self.line(f"{storage} {stmt.name}[{self.index(stmt.size)}];", depth)

    def stmt_barrier(self, stmt: ir.Barrier, depth: int) -> list[str]:
        return self.line("/* barrier */", depth)

    def value_load(self, load: ir.Load) -> str:
        if isinstance(load.param, str):
            return self.from_storage(f"{load.param}[{self.index(load.index)}]", load.dtype)
        return super().value_load(load)

    def stmt_store(self, stmt: ir.Store, depth: int) -> list[str]:
        if isinstance(stmt.param, str):
            value = self.to_storage(self.value(stmt.value), stmt.dtype)
            return self.line(f"{stmt.param}[{self.index(stmt.index)}] = {value};", depth)
        return super().stmt_store(stmt, depth)


def test_stage_local_reads_the_staged_tile() -> None:
    kernel = kernel_of(dot_rows)
    a_param = next(i for i, p in enumerate(kernel.params) if not p.output)
    opts = [Opt("stage_local", "i0_", a_param)]
    staged = apply_opts(kernel, opts)
    body = staged.body[0].body
    assert isinstance(body[0], ir.LocalMemory) and body[0].size.as_int() == 32
    assert any(isinstance(s, ir.Barrier) for s in body)
    with pytest.raises(CompileError, match="local memory"):
        kernel_source(staged)  # the CPU renderer has no local memory
    got, expected, _, _ = run_transformed(dot_rows, opts, StagingRenderer())
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

"""The vector width knob (`transforms.lanes`, `Choice(vector=w)`): each work-item of an
elementwise kernel does w consecutive elements with one wide load per contiguous input
and one wide store, run on the OpenCL device for widths 1, 2 and 4 (one program build for
all) and compared with numpy; illegal widths raise IllegalTransform."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends import gpu_search
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl.runtime import OpenCLDevice
from luminal.errors import CompileError, ExecutionError
from luminal.kernel import ir
from luminal.kernel.gpu import Choice, lower_gpu
from luminal.kernel.indexing import loop_index
from luminal.kernel.transforms import IllegalTransform, Opt
from luminal.render.c import CRenderer
from luminal.shape.expr import sym, var

WIDTHS = (1, 2, 4)


def _float32(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """A broadcast bias (contiguous along the row) and a transposed input (not: read per
    lane)."""
    a = rng.standard_normal((48, 40)).astype(np.float32)
    b = rng.standard_normal((40,)).astype(np.float32)
    t = rng.standard_normal((40, 48)).astype(np.float32)
    cx = lm.Graph()
    x, bias, xt = cx.tensor((48, 40)), cx.tensor((40,)), cx.tensor((40, 48))
    out = ((x.set(a) * 2.0).exp() + bias.set(b) * xt.set(t).permute((1, 0))).retrieve()
    return cx, out, np.exp(a * 2.0) + b * t.T


def _float16(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    a = rng.standard_normal((16, 64)).astype(np.float16)
    b = rng.standard_normal((16, 64)).astype(np.float16)
    cx = lm.Graph()
    x, y = cx.tensor((16, 64), dtype=lm.float16), cx.tensor((16, 64), dtype=lm.float16)
    out = (x.set(a) * y.set(b) + 1.0).retrieve()
    return cx, out, a * b + np.float16(1.0)


def _int32(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    a = rng.integers(-99, 99, (8, 32)).astype(np.int32)
    cx = lm.Graph()
    out = (cx.tensor((8, 32), dtype=lm.int32).set(a) * 3 + 7).retrieve()
    return cx, out, a * 3 + 7


def _padded_4d(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """Four loops (the outer two merged into one axis, decoded once per work-item) and a
    padded input (a masked read: stays scalar per lane) beside a contiguous one."""
    a = rng.standard_normal((3, 2, 4, 6)).astype(np.float32)
    b = rng.standard_normal((3, 2, 4, 8)).astype(np.float32)
    cx = lm.Graph()
    x, y = cx.tensor((3, 2, 4, 6)).set(a), cx.tensor((3, 2, 4, 8)).set(b)
    out = (x.pad((None, None, None, (1, 1))) * y + 0.5).retrieve()
    return cx, out, np.pad(a, ((0, 0), (0, 0), (0, 0), (1, 1))) * b + 0.5


def _gather(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """Rows read through a data-dependent index (checked, clamped): scalar loads per
    lane, one wide store per work-item."""
    table = rng.standard_normal((10, 16)).astype(np.float32)
    ids = np.array([3, 0, 9, 3, 7], np.int32)
    cx = lm.Graph()
    rows = cx.tensor((10, 16)).set(table)
    out = (rows.gather(cx.tensor((5,), dtype=lm.int32).set(ids)) * 2.0).retrieve()
    return cx, out, table[ids] * 2.0


def _column_sum(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """A reduce loop in the work-item: one loop, an accumulator per lane, wide reads of
    each row's slice."""
    a = rng.standard_normal((32, 48)).astype(np.float32)
    cx = lm.Graph()
    out = cx.tensor((32, 48)).set(a).sum(0).retrieve()
    return cx, out, a.sum(0)


def _short_sums(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """Short reductions unrolled into updates of a local (a max with a NaN, a sum of a
    padded view): every lane keeps its own accumulator."""
    a = rng.standard_normal((5, 4, 12)).astype(np.float32)
    a[1, 2, 3] = np.nan
    cx = lm.Graph()
    x = cx.tensor((5, 4, 12)).set(a)
    out = (x.max(1) + x.pad((None, (1, 0), None)).sum(1)).retrieve()
    return cx, out, a.max(1) + a.sum(1)


def _int_product(rng: np.random.Generator) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray]:
    """An int32 matrix product (a loop kernel): B's rows read wide, A's element per lane."""
    a = rng.integers(-9, 9, (16, 32)).astype(np.int32)
    b = rng.integers(-9, 9, (32, 24)).astype(np.int32)
    cx = lm.Graph()
    left, right = cx.tensor((16, 32), dtype=lm.int32), cx.tensor((32, 24), dtype=lm.int32)
    out = (left.set(a) @ right.set(b)).retrieve()
    return cx, out, a @ b


def _programs(cx: lm.Graph) -> list:
    """The graph lowered with each vector width on every kernel site that takes it."""
    program = lm.OpenCLCompiler().lower(cx)
    nodes = [s.node for s in gpu_search.sites(cx, program) if s.option("vector(4)")]
    assert nodes
    return [
        gpu_search.lower_choices(cx, (16, 1), {n: Choice(vector=w) for n in nodes}) for w in WIDTHS
    ]


def test_every_vector_width_computes_what_numpy_does(rng):
    makers = (_float32, _float16, _int32, _padded_4d, _column_sum, _short_sums, _int_product)
    makers += (_gather,)  # last: reused below
    cases = [make(rng) for make in makers]
    programs = [(case, p) for case in cases for p in _programs(case[0])]
    device = OpenCLDevice()
    every = [launch for _, p in programs for launch in p.launches]
    names = dict(zip(map(id, every), device.build(every), strict=True))  # one build
    assert "vload4(0, b1 + " in device.source and "vstore4((float4)(" in device.source
    assert "vload_half4(0, " in device.source and "vstore_half4_rte(" in device.source
    assert "vstore2((int2)(" in device.source
    results: dict[int, list[np.ndarray]] = {}
    for (cx, out, expected), program in programs:
        compiled = GpuCompiledGraph(cx, program, device, "test")
        compiled.names = [names[id(x)] for x in program.launches]
        compiled.execute(cx)
        got = out.numpy().copy()
        results.setdefault(id(cx), []).append(got)
        if got.dtype == np.float16:
            np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-3, atol=2e-3)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    for widths in results.values():  # wide accesses move data, the arithmetic is the same
        for got in widths[1:]:
            np.testing.assert_array_equal(got, widths[0])
    # the gather at width 4 still checks its row before the wide read of it
    (cx, _, _), program = programs[-1]
    ids = next(n for n in cx.input_data if cx.nodes[n].dtype == lm.int32)
    cx.input_data[ids] = np.array([3, 0, 12, 3, 7], np.int32)
    compiled = GpuCompiledGraph(cx, program, device, "test")
    compiled.names = [names[id(x)] for x in program.launches]
    with pytest.raises(ExecutionError, match="12"):
        compiled.execute(cx)


def test_a_wide_access_needs_a_contiguous_aligned_divisible_axis(rng):
    cx = lm.Graph()
    (cx.tensor((6, 42)).set(rng.standard_normal((6, 42)).astype(np.float32)) + 1.0).retrieve()
    program = lm.OpenCLCompiler().lower(cx)
    (launch,) = program.launches
    loop = launch.kernel.body[0].body[0]
    assert loop.kind == "gpu_global" and loop.extent.as_int() == 42
    with pytest.raises(IllegalTransform, match="4 does not divide loop i1_'s extent 42"):
        Opt("lanes", loop.var, 4).apply(launch.kernel)
    with pytest.raises(IllegalTransform, match="width must be one of"):
        Opt("lanes", loop.var, 3).apply(launch.kernel)
    halves = Opt("lanes", loop.var, 2).apply(launch.kernel)
    (store,) = [s for s in gpu_search.statements(halves.body) if isinstance(s, ir.VectorStore)]
    assert len(store.values) == 2
    (site,) = gpu_search.sites(cx, program)
    names = [name for name, _ in site.options]
    assert "vector(2)" in names and "vector(4)" not in names  # only legal widths offered
    with pytest.raises(IllegalTransform, match="4 does not divide"):
        lower_gpu(cx, choices={site.node: Choice(vector=4)})


def test_a_row_kernel_with_several_loops_takes_no_vector_width(rng):
    """A softmax row (two reduce loops and a loop storing the row) has no single
    store after one reduce loop: refused; a row sum (one reduce loop, a store per row)
    is legal but reads nothing wide along rows, so the search does not offer it."""
    cx = lm.Graph()
    cx.tensor((16, 64)).set(rng.standard_normal((16, 64)).astype(np.float32)).softmax(-1).retrieve()
    (launch,) = lm.OpenCLCompiler().lower(cx).launches
    loop = launch.kernel.body[0]
    with pytest.raises(IllegalTransform, match="not straight-line code"):
        Opt("lanes", loop.var, 2).apply(launch.kernel)
    rows = lm.Graph()
    rows.tensor((16, 64)).set(rng.standard_normal((16, 64)).astype(np.float32)).sum(-1).retrieve()
    (launch,) = lm.OpenCLCompiler().lower(rows).launches
    summed = Opt("lanes", launch.kernel.body[0].var, 4).apply(launch.kernel)
    loops = [s for s in gpu_search.statements(summed.body) if isinstance(s, ir.Loop)]
    (reduce,) = [lp for lp in loops if lp.kind == "reduce"]
    assert len(reduce.reductions) == 4  # one accumulator per lane, in one loop
    assert not any(isinstance(x, ir.VectorLoad) for x in gpu_search.statements(reduce.body))
    (site,) = gpu_search.sites(rows, lm.OpenCLCompiler().lower(rows))
    assert not any(name.startswith("vector") for name, _ in site.options)


def test_plain_c_refuses_vector_values_by_name():
    """y[i, j] = exp2(x[i, j]) + 1 as a CPU-style loop nest: `lanes` applies to its serial
    inner loop, and the plain C renderer refuses the vector values it makes."""
    f32 = lm.float32
    i, j = loop_index("i0_", sym(8)), loop_index("i1_", sym(64))
    value = ir.Alu(
        "add", (ir.Alu("exp2", (ir.Load(1, 64 * i + j, f32),), f32), ir.Const(1.0, f32)), f32
    )
    loop = ir.Loop("i1_", sym(64), "serial", (ir.Store(0, 64 * i + j, value, f32),))
    body = (ir.Loop("i0_", sym(8), "parallel", (loop,), work=sym(512)),)
    params = (ir.Param(5, f32, output=True), ir.Param(1, f32))
    kernel = Opt("lanes", "i1_", 4).apply(ir.Kernel("exp2_add", params, (), body, (4, 5)))
    (inner,) = [
        s
        for s in gpu_search.statements(kernel.body)
        if isinstance(s, ir.Loop) and s.kind == "serial"
    ]
    assert inner.extent.as_int() == 16 and isinstance(inner.body[-1], ir.VectorStore)
    with pytest.raises(CompileError, match="CRenderer: no vector values \\(float32x4\\)"):
        CRenderer().render(kernel)


@pytest.mark.parametrize(
    ("store_index", "extent", "why"),
    [
        (lambda i, j: 64 * i + j + 1, 64, "not contiguous and aligned"),  # off by one
        (lambda i, j: 128 * i + 2 * j, 64, "not contiguous and aligned"),  # stride 2
        (lambda i, j: 64 * i + j, var("n"), "symbolic extent"),
    ],
    ids=["unaligned", "strided", "symbolic"],
)
def test_the_store_must_be_contiguous_and_aligned_over_a_known_extent(store_index, extent, why):
    f32 = lm.float32
    i, j = loop_index("i0_", sym(8)), loop_index("i1_", sym(extent))
    store = ir.Store(0, store_index(i, j), ir.Load(1, 64 * i + j, f32), f32)
    loop = ir.Loop("i1_", sym(extent), "serial", (store,))
    body = (ir.Loop("i0_", sym(8), "parallel", (loop,)),)
    params = (ir.Param(5, f32, output=True), ir.Param(1, f32))
    kernel = ir.Kernel("copy", params, ("n",), body, (4, 5))
    with pytest.raises(IllegalTransform, match=why):
        Opt("lanes", "i1_", 2).apply(kernel)

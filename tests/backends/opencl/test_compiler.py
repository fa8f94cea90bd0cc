"""`lm.OpenCLCompiler` against the reference runtime and numpy, on PoCL in CI: random
graphs, matmuls, softmax and layer norm, dtypes, symbolic dims, gathers and scatters with
bad indices, Python functions, data kept on the device, an MLP forward."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import luminal as lm
from luminal import ops
from luminal.backends.gpu_runtime import GpuCompiledGraph
from luminal.backends.opencl.compiler import OpenCLCompiler
from tests.compiler.strategies import GraphCase, assert_compiler_preserves, random_graphs
from tests.conftest import uniform


def reference_outputs(cx: lm.Graph, outs: list[lm.GraphTensor]) -> list[np.ndarray]:
    cx.execute()
    return [o.numpy() for o in outs]


def check(cx: lm.Graph, outs: list[lm.GraphTensor], rtol: float = 1e-5, atol: float = 1e-6):
    expected = reference_outputs(cx, outs)
    compiled = cx.compile(OpenCLCompiler())
    assert isinstance(compiled, GpuCompiledGraph)
    cx.execute()
    for out, want in zip(outs, expected, strict=True):
        got = out.numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return compiled


@settings(max_examples=8)  # one program build per example (~0.5 s on PoCL)
@given(random_graphs())
def test_random_graphs_match_the_reference(case: GraphCase):
    assert_compiler_preserves(case, lambda g: g.compile(OpenCLCompiler(verify=False)))


def test_matmuls_softmax_layer_norm_and_a_fused_chain(rng):
    cx = lm.Graph()
    x = cx.tensor(("rows", 33)).set(uniform(rng, (17, 33)) * 10)
    w = cx.tensor((33, 20)).set(uniform(rng, (33, 20)))
    batched = cx.tensor((3, 20, 7)).set(uniform(rng, (3, 20, 7)))
    outs = [
        x.softmax(-1).retrieve(),
        x.layer_norm(-1).retrieve(),
        (x * x.sigmoid() * (x + 1)).retrieve(),
        (x @ w).relu().retrieve(),
        (x[:3] @ w @ batched).retrieve(),
        x.sum(0).retrieve(),
        x.max(-1).retrieve(),
    ]
    check(cx, outs, rtol=1e-5, atol=1e-5)
    smaller = uniform(rng, (5, 33))
    x.set(smaller)  # a new size for the symbolic dim: a new plan, no recompilation
    cx.execute()
    e = np.exp(smaller - smaller.max(-1, keepdims=True))
    np.testing.assert_allclose(outs[0].numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(outs[3].numpy(), np.maximum(smaller @ w.numpy(), 0), rtol=1e-4)


def test_special_values_and_dtypes(rng):
    data = np.array(
        [[-np.inf, np.inf, np.nan, 0.0, -0.0], [1e-38, -1e-38, 3e38, -3e38, 1.0]], np.float32
    )
    cx = lm.Graph()
    x = cx.tensor((2, 5)).set(data)
    h = cx.tensor((4, 6), dtype=lm.float16).set(uniform(rng, (4, 6)).astype(np.float16))
    b = cx.tensor((4, 6), dtype=lm.bfloat16).set(uniform(rng, (4, 6)))
    i = cx.tensor((4, 6), dtype=lm.int32).set(rng.integers(-5, 5, (4, 6)).astype(np.int32))
    outs = [
        x.max(-1).retrieve(),
        x.exp2().retrieve(),
        x.abs().log2().retrieve(),
        x.relu().retrieve(),
        x.lt(0.0).retrieve(),
        (h * 2 + 1).exp().retrieve(),
        (b * 3 - 1).retrieve(),
        (i * 3 + 1).retrieve(),
        (i % 3).retrieve(),
        h.cast(lm.float32).sum(0).retrieve(),
        (h.cast(lm.float32) + i).retrieve(),
        (x > 0).retrieve(),
    ]
    expected = reference_outputs(cx, outs)
    cx.compile(OpenCLCompiler())
    cx.execute()
    for out, want in zip(outs, expected, strict=True):
        got = out.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True)


def test_gather_scatter_and_bad_indices(rng):
    cx = lm.Graph()
    table = cx.tensor((10, 4)).set(uniform(rng, (10, 4)))
    ids = cx.tensor(("n",), dtype=lm.int32).set(np.array([1, 9, 0, 1], np.int32))
    updates = cx.tensor(("n", 4)).set(uniform(rng, (4, 4)))
    gathered = (table.gather(ids) * 2).retrieve()
    scattered = cx.add_node(ops.Scatter(), [table, ids, updates.exp()]).retrieve()
    check(cx, [gathered, scattered])
    ids.set(np.array([0, 9, 0], np.int32))  # repeated rows accumulate in order
    updates.set(uniform(rng, (3, 4)))
    cx.execute()
    expected = table.numpy().copy()
    np.add.at(expected, [0, 9, 0], np.exp(cx.input_data[updates.node_id]))
    np.testing.assert_allclose(scattered.numpy(), expected, rtol=1e-6)
    ids.set(np.array([3, 10], np.int32))
    updates.set(uniform(rng, (2, 4)))
    with pytest.raises(lm.ExecutionError, match=r"index 10 is out of range .* 10 rows"):
        cx.execute()
    ids.set(np.array([3, 2], np.int32))  # the fault record was cleared: runs again
    cx.execute()
    np.testing.assert_allclose(gathered.numpy(), table.numpy()[[3, 2]] * 2, rtol=1e-6)


def test_python_function_between_launches(rng):
    cx = lm.Graph()
    x = cx.tensor((3, 4)).set(uniform(rng, (3, 4)))
    doubled = cx.add_node(ops.Function("double", lambda a: a * 2), [x.exp()], (3, 4))
    out = (doubled + 1).sum(-1).retrieve()
    check(cx, [out])


def test_data_stays_on_the_device_and_set_uploads(rng, monkeypatch):
    """Weights cross once; an input crosses again only when set again."""
    cx = lm.Graph()
    x = cx.tensor((4, 8)).set(uniform(rng, (4, 8)))
    w = cx.tensor((8, 8)).set(uniform(rng, (8, 8)))
    out = (x @ w).retrieve()
    compiled = cx.compile(OpenCLCompiler())
    uploads: list[int] = []
    original = compiled.device.upload
    monkeypatch.setattr(
        compiled.device, "upload", lambda buf, a: (uploads.append(a.size), original(buf, a))
    )
    cx.execute()
    assert sorted(uploads) == [32, 64]  # the first run after compiling: both inputs
    uploads.clear()
    cx.execute()
    assert uploads == []
    new = uniform(rng, (4, 8))
    x.set(new)
    cx.execute()
    assert uploads == [32]
    np.testing.assert_allclose(out.numpy(), new @ w.numpy(), rtol=1e-5, atol=1e-6)


def test_mlp_forward_matches_numpy(rng):
    cx = lm.Graph()
    model = [lm.nn.Linear(cx, 16, 32), lm.nn.Linear(cx, 32, 10)]
    x = cx.tensor(("batch", 16)).set(uniform(rng, (5, 16)))
    out = model[1](model[0](x).relu()).softmax(-1).retrieve()
    cx.compile(OpenCLCompiler())
    cx.execute()
    h = np.asarray(cx.input_data[x.node_id])
    for layer in model:
        weights = layer.state_dict()
        h = h @ weights["weight"].T + weights["bias"]
        h = np.maximum(h, 0) if layer is model[0] else h
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_render_and_build_need_no_compile_and_leave_the_graph_alone(rng):
    cx = lm.Graph()
    x = cx.tensor(("n", 8)).set(uniform(rng, (3, 8)))
    (x.exp() @ cx.tensor((8, 4)).set(uniform(rng, (8, 4)))).retrieve()
    nodes = cx.num_nodes
    source = OpenCLCompiler().render(cx)
    assert source.count("__kernel void") >= 2 and "get_global_id" in source
    assert "const long dim_n" in source
    program = OpenCLCompiler().build(cx)
    assert len(program.kernel_names.split(";")) == source.count("__kernel void")
    assert cx.num_nodes == nodes and cx.compiled is None


def test_no_device_is_a_compile_error_naming_what_is_missing(monkeypatch):
    cx = lm.Graph()
    (cx.tensor((2,)).set(np.ones(2, np.float32)) + 1).retrieve()
    monkeypatch.setenv("LUMINAL_OPENCL_DEVICE", "no-such-device")
    with pytest.raises(lm.CompileError, match="no OpenCL device matches 'no-such-device'"):
        cx.compile(lm.OpenCLCompiler())
    assert cx.compiled is None
    cx.execute()  # the graph still runs on the reference runtime


@pytest.mark.parametrize(("tile", "block"), [(0, 1), (4, 1), (8, 1), (32, 1), (8, 2), (16, 4)])
def test_matrix_products_tiled_in_local_memory_for_every_schedule(rng, tile, block):
    """Sizes that are not multiples of the tile, a batch, a fused transpose and scale,
    and a symbolic M: every work-item meets the barriers, only stores are guarded;
    with register blocking each work-item keeps block x block sums."""
    cx = lm.Graph()
    a = cx.tensor(("m", 37)).set(uniform(rng, (50, 37)))
    b = cx.tensor((37, 29)).set(uniform(rng, (37, 29)))
    c = cx.tensor((3, 29, 5)).set(uniform(rng, (3, 29, 5)))
    outs = [(a @ b).retrieve(), (a[:7] @ b @ c).retrieve(), (a.exp() @ (b.T * 2).T).retrieve()]
    compiler = OpenCLCompiler(tile=tile, block=block)
    source = compiler.render(cx)
    staged = source.count(f"__local float lm_tile_a[{tile * tile * block}];")
    assert staged == (4 if tile else 0) and ("barrier(CLK_LOCAL_MEM_FENCE);" in source) == bool(
        tile
    )
    assert (f"acc{block - 1}_{block - 1} +=" in source) == bool(tile)
    expected = reference_outputs(cx, outs)
    cx.compile(compiler)
    cx.execute()
    for out, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-4)
    a.set(uniform(rng, (3, 37)))  # M smaller than a tile and than the slice
    cx.execute()
    np.testing.assert_allclose(outs[0].numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


def test_long_rows_are_reduced_by_a_work_group_in_local_memory(rng):
    """Rows of 300 (and a symbolic length) shared by a work-group: sums, NaN-propagating
    maxes, int32 sums that wrap, softmax and layer norm against numpy."""
    cx = lm.Graph()
    data = uniform(rng, (5, 300)) * 4
    data[2, 17] = np.nan
    x = cx.tensor((5, 300)).set(data)
    ints = rng.integers(-(2**30), 2**30, (3, 300)).astype(np.int32)
    i = cx.tensor((3, 300), dtype=lm.int32).set(ints)
    s = cx.tensor((4, "len")).set(uniform(rng, (4, 70)))
    outs = [
        x.sum(-1).retrieve(),
        x.max(-1).retrieve(),
        i.sum(-1).retrieve(),
        x[:2].softmax(-1).retrieve(),
        x[3:].layer_norm(-1).retrieve(),
        s.softmax(-1).retrieve(),
        s.sum(-1).retrieve(),
    ]
    source = OpenCLCompiler().render(cx)
    assert "get_local_id(0)" in source and "__local float lm_red_" in source
    check(cx, outs, rtol=1e-5, atol=1e-5)
    assert np.isnan(outs[1].numpy()[2]) and not np.isnan(outs[1].numpy()[[0, 1, 3, 4]]).any()
    np.testing.assert_array_equal(outs[2].numpy(), ints.sum(-1, dtype=np.int32))
    for length in (300, 1):
        values = uniform(rng, (4, length))
        s.set(values)
        cx.execute()
        e = np.exp(values - values.max(-1, keepdims=True))
        np.testing.assert_allclose(outs[5].numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(outs[6].numpy(), values.sum(-1), rtol=1e-5, atol=1e-5)


def test_the_registry_backend_parts_run_a_graph(rng):
    """rulesets -> e-graph, render -> a compiled graph on the device, build, run."""
    from luminal.compiler.egraph import EGraphCompiler

    backend = lm.backends.get("opencl")
    assert backend.is_available() and backend.device_id().startswith("opencl/")
    assert not backend.capabilities().blas and backend.capabilities().custom_kernels
    cx = lm.Graph()
    a, b = uniform(rng, (6, 5)), uniform(rng, (5, 3))
    out = (cx.tensor((6, 5)).set(a) @ cx.tensor((5, 3)).set(b)).relu().retrieve()
    cx.compile(lm.GenericCompiler())
    cx.compile(EGraphCompiler(rulesets=backend.rulesets))
    compiled = backend.render(cx)
    assert isinstance(compiled, backend.runtime)
    compiled.build()
    cx.compiled = compiled
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
    assert isinstance(lm.backends.compiler("opencl", tile=8), OpenCLCompiler)

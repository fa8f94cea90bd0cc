"""Winograd fusion (`compiler/winograd.py`, `ops.WinogradConv`, `backends/cpu/winograd.c`):
the CPU compiler replaces a Winograd convolution's window copy, transforms and products
by one node whose kernel runs blocks of tiles through all of them; checked against
torch's conv2d (F(4x4) and F(2x2), overhanging tiles, output channels that do not fill
a register tile, no padding, bias and ReLU after it, short rows of tiles sharing a
vector of lanes), through gradients of a compiled graph, the convolutions it leaves
unfused, and the OpenCL lowering of a fused graph."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from luminal.backends.cpu import cpu_caches
from luminal.compiler import winograd as fusion
from luminal.nn.winograd import F2, F4
from tests.compiler.cached_runs import two_processes
from tests.conftest import uniform

CONV_MODULE = importlib.import_module("luminal.nn.conv")  # luminal.nn.conv is the function
ATOL, RTOL = 1e-4, 1e-3

CASES = [  # (input shape, out channels, padding, transforms)
    ((8, 64, 16, 16), 64, 1, F4),  # 128 tiles: three blocks of the register tile's width
    ((2, 24, 14, 13), 68, 1, F4),  # overhanging tiles; 68 rows: a last partial row panel
    ((4, 16, 6, 7), 20, 1, F2),
    ((3, 8, 11, 9), 5, 0, F4),  # no padding: the windows read the input itself
    ((1, 3, 40, 90), 4, 1, F4),  # a row of 23 tiles: two segments of lanes
    ((2, 8, 28, 26), 12, 1, F4),  # rows of 7 tiles, two a vector, blocks end mid-row
    ((3, 8, 10, 9), 8, 1, F2),  # rows of 5 tiles, two a vector, blocks end mid-row
    # U of 2.6 MB, past a core's L2: each row panel asks for the next (winograd.c's
    # LM_WG_STREAM_U_BYTES), across chunks of 64 channels and positions; 140 rows: a last
    # partial panel, packed
    ((2, 128, 8, 8), 140, 1, F4),
]


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(
    "shape, tile",
    [((1, 16, 12, 12), 4), ((2, 8, 16, 16), 4), ((1, 8, 20, 32), 4), ((1, 8, 14, 12), 2)],
    ids=str,
)
def test_output_channels_in_chunks_match_torch(rng, monkeypatch, shape, tile, count) -> None:  # noqa: ANN001
    """150 output channels: the kernel's chunks (LM_WG_M_BYTES on AVX-512: 64 channels by
    F(4x4), 144 by F(2x2)), the last with a partial row panel; on 2 threads the one
    block's (or two blocks') channels are split between them off a chunk's boundary
    (lm_wg_parts), with short rows sharing lanes (3, 4 and 6 tiles a row) and without (8)."""
    from ..backends.gemm_calls import thread_setter

    transforms = {4: F4, 2: F2}[tile]
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: transforms)
    setter = thread_setter()
    next(setter)(count)
    try:
        cx, layer, reference, x = _layer(rng, shape, 150, 1)
        y = layer(cx.tensor(shape).set(x)).relu().retrieve()
        cx.compile(lm.CPUCompiler())
        assert _fused(cx) == 1
        cx.execute()
    finally:
        next(setter, None)
    expected = torch.relu(reference(torch.from_numpy(x))).detach().numpy()
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)


def _fused(graph: lm.Graph) -> int:
    return sum(isinstance(n.op, ops.WinogradConv) for n in graph.nodes.values())


def _kernel_names(graph: lm.Graph) -> list[str]:
    return [k.name for segment in graph.compiled.segments for k in segment.kernels]


def _layer(rng, shape, outs, padding):  # noqa: ANN001, ANN202
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(shape[1], outs, 3, padding=padding)
    cx = lm.Graph()
    layer = lm.nn.Conv2d(cx, shape[1], outs, 3, padding=padding, algorithm="winograd")
    layer.load_state_dict(reference.state_dict())
    x = uniform(rng, shape)
    return cx, layer, reference, x


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}->{c[1]},p{c[2]},F{c[3].tile}")
def test_fused_convolution_matches_torch(rng, monkeypatch, case) -> None:
    shape, outs, padding, transforms = case
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: transforms)
    cx, layer, reference, x = _layer(rng, shape, outs, padding)
    y = layer(cx.tensor(shape).set(x)).relu().retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    names = _kernel_names(cx)
    assert sum("winograd" in n for n in names) == 1 and not any("constmat" in n for n in names)
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x))).detach().numpy()
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)


@pytest.fixture
def last_level_cache(monkeypatch):  # noqa: ANN001, ANN201
    """Sets the last-level cache size the CPU lowering's Winograd weight limit sees."""

    def set_size(size: int | None) -> None:
        monkeypatch.setattr(cpu_caches, "last_level_cache_bytes", lambda: size)
        cpu_caches.winograd_weight_limit.cache_clear()

    yield set_size
    cpu_caches.winograd_weight_limit.cache_clear()


@pytest.mark.parametrize(
    ("shape", "cache", "fused"),
    [
        ((4, 256, 16, 16), None, 0),
        ((4, 256, 16, 16), 8 << 20, 0),
        ((4, 256, 16, 16), 32 << 20, 1),
        ((1, 256, 8, 8), None, 1),  # 4 tiles: U is read once
        ((12, 256, 8, 8), 8 << 20, 1),  # 48 tiles: one block
        ((13, 256, 8, 8), 8 << 20, 0),  # 52 tiles: two blocks read U twice
    ],
    ids=str,
)
def test_transformed_weights_past_half_the_cache_stay_unfused(
    rng, monkeypatch, last_level_cache, shape, cache, fused
) -> None:
    """U of 36 x 256 x 256 floats (9.4 MB) is fused where half the last-level cache holds
    it (32 MiB) or where the convolution's tiles are one block of the kernel's (48), which
    reads U once; else the window copy, the constant-matrix transforms and the products
    stay separate kernels (8 MiB, or a cache of unknown size: MAX_WEIGHT_BYTES, 4 MiB); all
    equal torch."""
    last_level_cache(cache)
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    assert fusion.MAX_WEIGHT_BYTES < 36 * 256 * 256 * 4
    cx, layer, reference, x = _layer(rng, shape, 256, 1)
    y = layer(cx.tensor(shape).set(x)).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == fused
    assert sum("constmat" in n for n in _kernel_names(cx)) == 2 * (1 - fused)
    cx.execute()
    expected = reference(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_gradients_through_a_fused_convolution_match_torch(rng) -> None:
    """A compiled graph holding WinogradConv differentiates (its VJP spells the chain it
    stands for in primitives) to torch's gradients for the input and the weight."""
    shape = (2, 8, 9, 10)
    cx, layer, reference, x = _layer(rng, shape, 6, 1)
    xt = cx.tensor(shape).set(x).keep()
    y = layer(xt)
    loss = (y * y).sum().retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    grads = cx.compile(lm.training.Autograd([xt, layer.weight], loss))
    for g in grads:
        g.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    tx = torch.from_numpy(x).requires_grad_()
    out = reference(tx)
    expected = torch.autograd.grad((out * out).sum(), [tx, reference.weight])
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-3, atol=2e-3)


def test_a_fused_graph_runs_on_opencl(rng) -> None:
    """The GPU lowering has no WinogradConv kernel: it unfuses first, so a graph the CPU
    compiler fused compiles for OpenCL (PoCL here) and still equals torch."""
    shape = (2, 8, 12, 12)
    cx, layer, reference, x = _layer(rng, shape, 8, 1)
    y = layer(cx.tensor(shape).set(x)).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    cx.compile(lm.OpenCLCompiler())
    cx.execute()
    expected = reference(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_the_declaration_matches_winograd_c() -> None:
    """Kernels declare `lm_winograd` themselves (`PROTOTYPE`): its parameter types must
    be those of the definition, or a kernel would call it with the wrong arguments."""
    import re
    from pathlib import Path

    from luminal.backends.cpu import winograd

    source = (Path(winograd.__file__).parent / "winograd.c").read_text()
    definition = re.search(r"\nlong long lm_winograd\(([^)]*)\)", source)
    assert definition is not None
    types = [" ".join(p.split()[:-1]).replace(" *", "*") for p in definition.group(1).split(",")]
    declared = re.search(r"lm_winograd\(([^)]*)\)", winograd.PROTOTYPE)
    assert declared is not None
    assert [t.strip() for t in declared.group(1).split(",")] == [
        t.replace("float *", "float*") for t in types
    ]


def test_bias_residual_and_relu_fuse_into_the_call(rng, monkeypatch) -> None:
    """relu(conv(x) + bias + x), a ResNet block's second convolution: the consumer is
    applied as the tiles are stored (`lm_winograd_ep`), no kernel of its own."""
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    shape = (2, 16, 12, 12)  # whole tiles: the consumer reads the product as it lies
    cx, layer, reference, x = _layer(rng, shape, 16, 1)
    xt = cx.tensor(shape).set(x)
    y = (layer(xt) + xt).relu().retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    names = _kernel_names(cx)
    assert any("winograd_bias_residual_relu" in n for n in names)
    assert not any("maxreduce" in n or "_add" in n for n in names)
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x)) + torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=ATOL, rtol=RTOL)


SHORT_ROWS = [  # (input shape, transforms): rows of few tiles sharing a vector of lanes
    ((2, 8, 28, 28), F4),  # 7 tiles a row, two rows a vector; blocks of 48 end mid-row
    ((3, 8, 20, 20), F4),  # 5 tiles a row, two rows a vector, mid-row block ends
    ((2, 8, 24, 24), F4),  # 6 tiles a row: blocks of whole rows
    ((5, 8, 12, 12), F4),  # 3 tiles a row, four rows a vector, the last vector part full
    ((2, 8, 16, 16), F2),  # 8 tiles a row, two rows a vector
    ((2, 8, 10, 10), F2),  # 5 tiles a row, two rows a vector, mid-row block ends
    ((7, 8, 6, 6), F2),  # 3 tiles a row, four rows a vector, the last vector part full
]


@pytest.mark.parametrize("case", SHORT_ROWS, ids=lambda c: f"{c[0]},F{c[1].tile}")
def test_short_rows_with_bias_residual_and_relu_match_torch(rng, monkeypatch, case) -> None:
    """Rows of at most half a vector of tiles share the lanes of both transforms (two or
    four rows a vector, a block's partial rows included); relu(conv(x) + bias + x) stored
    row by row from the shared lanes, the residual read at each row's own offsets."""
    shape, transforms = case
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: transforms)
    cx, layer, reference, x = _layer(rng, shape, shape[1], 1)
    xt = cx.tensor(shape).set(x)
    y = (layer(xt) + xt).relu().retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    assert any("winograd_bias_residual_relu" in n for n in _kernel_names(cx))
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x)) + torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=ATOL, rtol=RTOL)


def test_a_scalar_term_is_not_taken_for_a_channel_bias(rng, monkeypatch) -> None:
    """relu(conv(x) + s) read as (images * channels, pixels): no axis of the consumer
    steps the channels alone, so the broadcast scalar s is not a per-channel bias (read
    as one, the kernel would read s[k] past its one element)."""
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    shape, outs = (2, 16, 12, 12), 16
    torch.manual_seed(0)
    reference = torch.nn.Conv2d(shape[1], outs, 3, padding=1, bias=False)
    cx = lm.Graph()
    layer = lm.nn.Conv2d(cx, shape[1], outs, 3, padding=1, bias=False, algorithm="winograd")
    layer.load_state_dict(reference.state_dict())
    x = uniform(rng, shape)
    rows, pixels = shape[0] * outs, shape[2] * shape[3]
    scalar = cx.tensor((1, 1)).set(np.array([[3.0]], dtype=np.float32))
    term = scalar.expand_dim(0, rows).expand_dim(1, pixels).reshape((rows, pixels))
    y = (layer(cx.tensor(shape).set(x)).reshape((rows, pixels)) + term).relu().retrieve()
    cx.compile(lm.CPUCompiler(verify=False))  # the check under test, not the verifier's
    assert _fused(cx) == 1
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x)).reshape(rows, pixels) + 3.0)
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=ATOL, rtol=RTOL)


def test_the_matcher_refuses_operands_that_are_not_float32(rng, monkeypatch) -> None:
    """The kernel reads float buffers: a pattern whose transformed weights or windows
    are another dtype (here relabelled float16 just before the pass) is not fused."""
    import dataclasses

    from luminal.backends.cpu import lowering
    from luminal.dtype import DType

    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    refused = []

    def relabelled(graph: lm.Graph, max_weight_bytes: int) -> int:
        for node in list(graph.nodes.values()):
            match = fusion.match_winograd(graph, node)
            if match is None:
                continue
            for edge in match.edges[:2]:
                source = graph.nodes[edge.source]
                graph.nodes[source.id] = dataclasses.replace(source, dtype=DType.float16)
                refused.append(fusion.match_winograd(graph, node) is None)
                graph.nodes[source.id] = source
        return fusion.fuse_winograd(graph, max_weight_bytes)

    monkeypatch.setattr(lowering, "fuse_winograd", relabelled)
    cx, layer, reference, x = _layer(rng, (2, 16, 12, 12), 16, 1)
    y = layer(cx.tensor(x.shape).set(x)).retrieve()
    cx.compile(lm.CPUCompiler())
    assert refused == [True, True] and _fused(cx) == 1
    cx.execute()
    expected = reference(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)


CACHED = """
import json, sys, numpy as np, torch, luminal as lm
from luminal import ops
torch.manual_seed(int(sys.argv[1]))
reference = torch.nn.Conv2d(16, 16, 3, padding=1)
x = np.random.default_rng(int(sys.argv[1])).uniform(-1, 1, (2, 16, 12, 12)).astype(np.float32)
cx = lm.Graph()
layer = lm.nn.Conv2d(cx, 16, 16, 3, padding=1, algorithm="winograd")
layer.load_state_dict(reference.state_dict())
xt = cx.tensor(x.shape).set(x)
y = (layer(xt) + xt).relu().retrieve()
compiler = lm.CPUCompiler()
cx.compile(compiler)
cx.execute()
expected = torch.relu(reference(torch.from_numpy(x)) + torch.from_numpy(x)).detach().numpy()
fused = sum(isinstance(n.op, ops.WinogradConv) for n in cx.nodes.values())
error = float(np.abs(y.numpy() - expected).max())
print(json.dumps({"hit": compiler.program_cache_hit, "fused": fused, "error": error}))
"""


def test_a_fused_program_is_loaded_by_a_second_process(tmp_path) -> None:
    """The program cache pickles the lowered graph: a second process (other weights and
    input) loads the WinogradConv node and its epilogue kernel and still equals torch."""
    runs = two_processes(CACHED, tmp_path)
    assert [(r["hit"], r["fused"]) for r in runs] == [(False, 1), (True, 1)]
    assert all(r["error"] < ATOL for r in runs)


def test_a_residual_that_is_not_float_aligned_is_read_at_its_own_address(rng, monkeypatch) -> None:
    """The search's measuring process receives input arrays at any byte offset of one
    frame: the epilogue reads the residual through its own pointer, not as a float
    distance from the output (which rounded a misaligned array to the wrong bytes)."""
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    shape = (2, 16, 12, 12)
    cx, layer, reference, x = _layer(rng, shape, 16, 1)
    xt = cx.tensor(shape).set(x)
    y = (layer(xt) + xt).relu().retrieve()
    cx.compile(lm.CPUCompiler())
    assert any("winograd_bias_residual_relu" in n for n in _kernel_names(cx))
    raw = np.zeros(x.nbytes + 8, dtype=np.uint8)
    misaligned = raw[3 : 3 + x.nbytes].view(np.float32).reshape(shape)
    misaligned[...] = x
    (node,) = [k for k, v in cx.input_data.items() if np.shape(v) == shape]
    cx.input_data[node] = misaligned
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x)) + torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=ATOL, rtol=RTOL)


def _guarded(values: np.ndarray) -> np.ndarray:
    """`values` (float32) copied to the end of pages followed by a no-access page, so that
    a read or write past its last element faults (malloc'd buffers hide such reads)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page, size = mmap.PAGESIZE, values.size * 4
    pages = -(-size // page)
    read_write, no_access, private_anonymous = mmap.PROT_READ | mmap.PROT_WRITE, 0, 0x22
    base = libc.mmap(None, (pages + 1) * page, read_write, private_anonymous, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    assert libc.mprotect(base + pages * page, page, no_access) == 0
    start = base + pages * page - size  # never unmapped: a few pages per case
    array = np.ctypeslib.as_array((ctypes.c_float * values.size).from_address(start))
    array[:] = values.ravel()
    return array


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(
    "transforms, width",
    [
        (F4, 61),  # 16 tiles a row: one whole vector of lanes, ends at the input's end
        (F4, 57),  # 15 tiles: the last vector's whole loads stop at the buffer's end
        (F4, 18),  # 5 tiles: two rows a vector, blocks ending mid-row
        (F4, 9),  # 3 tiles: four rows a vector
        (F2, 15),  # 8 tiles: two rows a vector
        (F2, 7),  # 4 tiles: four rows a vector
        (F2, 39),  # 20 tiles: two vectors a row, the second partial
    ],
)
def test_the_kernel_stays_inside_its_buffers(rng, count, transforms, width) -> None:  # noqa: ANN001
    """lm_winograd_ep with the padded input, U, bias, residual and output each ending at a
    no-access page: its whole-vector loads near the input's end, masked loads and stores
    of partial rows and the residual's reads stay inside them (1 and 2 threads), and its
    values match torch's conv2d with the epilogue."""
    import ctypes

    from luminal.backends.cpu import toolchain

    from ..backends.gemm_calls import thread_setter

    tile, alpha = transforms.tile, transforms.alpha
    images, channels, outs, height = 2, 3, 13, 9
    x = rng.standard_normal((images, channels, height, width)).astype(np.float32)
    g = (rng.standard_normal((outs, channels, 3, 3)) * 0.1).astype(np.float32)
    rows, cols = -(-height // tile), -(-width // tile)
    hp, wp = rows * tile + 2, cols * tile + 2
    padded = np.zeros((images, channels, hp, wp), np.float32)
    padded[:, :, 1 : 1 + height, 1 : 1 + width] = x
    u = np.einsum("ia,kcab,jb->ijkc", transforms.g, g.astype(np.float64), transforms.g)
    bias = rng.standard_normal(outs).astype(np.float32)
    y_shape = (images, outs, rows * tile, cols * tile)
    residual = rng.standard_normal(y_shape).astype(np.float32)
    xg, ug = _guarded(padded), _guarded(u.reshape(alpha * alpha, outs, channels))
    bg, rg = _guarded(bias), _guarded(residual)
    yg = _guarded(np.full(y_shape, np.nan, np.float32))
    # a kernel naming lm_winograd gets winograd.c's unit linked (toolchain._support_sources)
    probe = "/* calls lm_winograd_ep */ int lm_probe(void) { return 0; }\n"
    path = toolchain.build_shared([("probe", probe)], True)
    function = toolchain.load(path).lm_winograd_ep
    i64, pointer = ctypes.c_longlong, ctypes.c_void_p
    function.argtypes = [i64] * 6 + [pointer] + [i64] * 5 + [pointer, i64, i64, pointer]
    function.argtypes += [i64] * 4 + [pointer, pointer, i64]
    function.restype = i64
    y_k = rows * tile * cols * tile
    setter = thread_setter()
    next(setter)(count)
    try:
        failed = function(
            tile, images, rows, cols, channels, outs,
            xg.ctypes.data, channels * hp * wp, hp * wp, wp, tile * wp, xg.size,
            ug.ctypes.data, outs * channels, channels,
            yg.ctypes.data, outs * y_k, y_k, tile * cols * tile, cols * tile,
            bg.ctypes.data, rg.ctypes.data, 1,
        )  # fmt: skip
    finally:
        next(setter, None)
    assert failed == 0
    conv = torch.nn.functional.conv2d(torch.from_numpy(padded), torch.from_numpy(g)).numpy()
    expected = np.maximum(conv + bias[:, None, None] + residual, 0.0)
    np.testing.assert_allclose(yg.reshape(y_shape), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pads", [[1, 0, 0, 1], [0, 2, 1, 0]], ids=str)
def test_an_onnx_conv_with_asymmetric_pads_fuses_and_matches_torch(rng, pads) -> None:
    """ONNX pads (top, left, bottom, right) that differ per side: the padded input's
    windows (a crop where the tiles overhang) still fuse, and equal torch's conv2d."""
    from onnx import TensorProto, helper, numpy_helper

    weight = uniform(rng, (64, 64, 3, 3)) * 0.05
    bias, x = uniform(rng, (64,)), uniform(rng, (2, 64, 13, 12))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads, kernel_shape=[3, 3])
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(helper.make_model(graph), cx)
    inputs["x"].set(x)
    y = outputs["y"].retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    cx.execute()
    top, left, bottom, right = pads
    padded = torch.nn.functional.pad(torch.from_numpy(x), (left, right, top, bottom))
    expected = torch.nn.functional.conv2d(padded, torch.from_numpy(weight), torch.from_numpy(bias))
    np.testing.assert_allclose(y.numpy(), expected.numpy(), atol=ATOL, rtol=RTOL)


def test_optimal_mode_measures_a_fused_residual_block(rng, monkeypatch) -> None:
    """mode="optimal" runs the static program in its measuring process (inputs at any
    byte offset of one frame): relu(conv(x) + bias + x) fused measures and is searched,
    rather than "measuring failed" and a fall-back to the static program."""
    import warnings

    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: F4)
    shape = (2, 16, 12, 12)
    cx, layer, reference, x = _layer(rng, shape, 16, 1)
    xt = cx.tensor(shape).set(x)
    y = (layer(xt) + xt).relu().retrieve()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cx.compile(lm.CPUCompiler(mode="optimal", cache=False))
    assert not [w for w in caught if "measuring failed" in str(w.message)]
    assert _fused(cx) == 1
    cx.execute()
    expected = torch.relu(reference(torch.from_numpy(x)) + torch.from_numpy(x))
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[4]], ids=lambda c: f"{c[0]}")
def test_the_reference_runtime_and_unfuse_keep_the_semantics(rng, monkeypatch, case) -> None:
    """The fused graph run by the reference runtime (`reference/winograd.py`), and again
    after `unfuse_winograd` gives back the four nodes, equals torch (overhanging tiles,
    F(2x2), batch 1)."""
    from luminal.reference.executor import execute

    shape, outs, padding, transforms = case
    monkeypatch.setattr(CONV_MODULE, "pick", lambda sizes, batch=None: transforms)
    cx, layer, reference, x = _layer(rng, shape, outs, padding)
    y = layer(cx.tensor(shape).set(x)).retrieve()
    cx.compile(lm.CPUCompiler())
    assert _fused(cx) == 1
    expected = reference(torch.from_numpy(x)).detach().numpy()
    cx.compiled = None
    execute(cx)
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert fusion.unfuse_winograd(cx) == 1 and _fused(cx) == 0
    execute(cx)
    np.testing.assert_allclose(y.numpy(), expected, atol=ATOL, rtol=RTOL)

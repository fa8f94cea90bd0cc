"""The bfloat16 matrix product `lm_gemm_bf16` (gemm_bf16.c): called directly (packed
AVX512-BF16 kernel where the CPU has it, and the portable float32 loop everywhere) against
PyTorch's bf16 matmul and numpy float32 on the same bf16 inputs (K tails, tile edges,
transposed operands, NaN); from compiled graphs; and a bf16 MLP trained on the CPU backend
against the same MLP trained by PyTorch in bf16. The float16 product `lm_gemm_f16` (widened
into lm_sgemm) against torch's and numpy's, directly and from a compiled graph."""

from __future__ import annotations

import ctypes
import functools

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm
from luminal.backends.cpu import gemm_bf16, toolchain
from luminal.training import SGD, TrainStep, losses

NO_TRANS, TRANS = 111, 112
I64 = ctypes.c_longlong
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def library():  # noqa: ANN201 - a ctypes library
    # a kernel naming the products, so the library links their unit
    probe = "".join(gemm_bf16.PROTOTYPES.values()) + "int lm_probe(void) { return 0; }\n"
    return _declared(toolchain.build_shared([("probe", probe)], True))


@pytest.fixture(scope="module")
def portable():  # noqa: ANN201 - the unit built as on a CPU without AVX512-BF16
    _, source = gemm_bf16.support_unit()
    # lm_gemm_f16's callee (gemm.c, not linked here): never reached by these tests
    stub = (
        "void lm_sgemm(int ta, int tb, long long m, long long n, long long k, const float* a, "
        "long long lda, const float* b, long long ldb, float* c, long long ldc, long long w, "
        "long long s) { abort(); }\n"
    )
    source = f"#undef __AVX512BF16__\n{source}\n{stub}"
    return _declared(toolchain.build_shared([("nobf16", source)]))


def _declared(path):  # noqa: ANN001, ANN202
    lib = toolchain.load(path)
    pointer = ctypes.c_void_p
    for function in (lib.lm_gemm_bf16, lib.lm_gemm_bf16_rows, lib.lm_gemm_f16):
        function.argtypes = [ctypes.c_int, ctypes.c_int, I64, I64, I64, pointer, I64, pointer]
        function.argtypes += [I64, pointer, I64, I64, I64]
        function.restype = None
    return lib


def operand(rng: np.random.Generator, rows: int, cols: int, trans: bool) -> np.ndarray:
    """A (rows, cols) bf16 matrix, stored transposed (a contiguous (cols, rows)) when asked."""
    matrix = rng.standard_normal((rows, cols)).astype(BF16)
    return np.ascontiguousarray(matrix.T) if trans else matrix


def product(function, a, b, m, n, k, ta, tb, pad=0):  # noqa: ANN001, ANN201
    c = np.full((m, n + pad), 7.0, a.dtype)
    lda, ldb = a.shape[1], b.shape[1]
    function(
        TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, a.ctypes.data, lda,
        b.ctypes.data, ldb, c.ctypes.data, n + pad, n, 0,
    )  # fmt: skip
    assert (c[:, n:] == 7.0).all()
    return c[:, :n].astype(np.float32)


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """`c` against numpy float32 on the bf16 inputs (one bf16 rounding apart, plus float32
    summation order) and against torch's bf16 matmul (both rounded: one bf16 step)."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    exact = a32.astype(np.float64) @ b32.astype(np.float64)
    scale = np.abs(a32).astype(np.float64) @ np.abs(b32).astype(np.float64)
    np.testing.assert_array_less(np.abs(c - exact), 2.0**-8 * np.abs(exact) + 1e-6 * scale + 1e-30)
    theirs = (torch.from_numpy(a32).bfloat16() @ torch.from_numpy(b32).bfloat16()).float()
    np.testing.assert_array_less(
        np.abs(c - theirs.numpy()), 2.0**-7 * np.abs(exact) + 1e-6 * scale + 1e-30
    )


SHAPES = [(1, 1, 1), (13, 50, 3), (64, 512, 784), (37, 70, 129), (8, 48, 64), (100, 10, 512)]
SHAPES += [(1, 300, 1000), (3, 70, 129), (6, 33, 31)]  # few rows: B streamed when transposed


PATHS = ["lm_gemm_bf16", "lm_gemm_bf16_rows", "portable"]


def function(library, portable, path):  # noqa: ANN001, ANN201
    return portable.lm_gemm_bf16 if path == "portable" else getattr(library, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True)])
def test_product_equals_torch_and_numpy(library, portable, path, m, n, k, ta, tb):  # noqa: ANN001
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b = operand(rng, m, k, ta), operand(rng, k, n, tb)
    c = product(function(library, portable, path), a, b, m, n, k, ta, tb, pad=3)
    check(c, a.T if ta else a, b.T if tb else b)


@pytest.mark.parametrize("path", PATHS)
def test_nan_reaches_only_its_row_and_column(library, portable, path):  # noqa: ANN001
    rng = np.random.default_rng(1)
    a, b = operand(rng, 40, 65, False), operand(rng, 65, 60, False)
    a[5, 64] = np.nan  # in the K tail (K odd: the last pair is half padding)
    b[3, 9] = np.nan
    c = product(function(library, portable, path), a, b, 40, 60, 65, False, False)
    nan = np.isnan(c)
    assert nan[5].all() and nan[:, 9].all()
    assert nan.sum() == 60 + 40 - 1


@pytest.mark.parametrize("path", PATHS)
def test_nan_in_few_rows_product(library, portable, path):  # noqa: ANN001
    """x @ W.T with 6 rows (decode): a NaN in x's K tail and one in a row of W."""
    rng = np.random.default_rng(3)
    a, b = operand(rng, 6, 65, False), operand(rng, 65, 21, True)
    a[5, 64] = np.nan
    b[3, 10] = np.nan  # W[3, 10]: output column 3
    c = product(function(library, portable, path), a, b, 6, 21, 65, False, True)
    nan = np.isnan(c)
    assert nan[5].all() and nan[:, 3].all() and nan.sum() == 21 + 6 - 1


def test_compiled_bf16_matmuls_call_lm_gemm_bf16(rng):  # noqa: ANN001
    """x @ W.T (W read transposed in place), a batched product and a product of a
    transposed intermediate, in bf16 on the CPU backend, against torch's bf16 matmul."""
    x = rng.standard_normal((64, 300)).astype(BF16)
    w = rng.standard_normal((200, 300)).astype(BF16)
    p = rng.standard_normal((3, 33, 17)).astype(BF16)
    q = rng.standard_normal((3, 17, 21)).astype(BF16)
    cx = lm.Graph()
    tx = cx.tensor((64, 300), lm.bfloat16).set(x)
    tw = cx.tensor((200, 300), lm.bfloat16).set(w)
    linear = (tx @ tw.T).retrieve()
    batched = (
        cx.tensor((3, 33, 17), lm.bfloat16).set(p) @ cx.tensor((3, 17, 21), lm.bfloat16).set(q)
    ).retrieve()
    chained = ((tx * 2.0).T @ tx).retrieve()  # an inlined producer, packed
    compiled = cx.compile(lm.CPUCompiler())
    cx.execute()
    sources = "\n".join(k.source for s in compiled.segments for k in s.kernels)
    assert sources.count("lm_gemm_bf16(") >= 3
    t = {
        name: torch.from_numpy(v.astype(np.float32)).bfloat16()
        for name, v in dict(x=x, w=w, p=p, q=q).items()
    }
    expected = [t["x"] @ t["w"].T, t["p"] @ t["q"], (t["x"] * 2.0).T @ t["x"]]
    for ours, theirs in zip((linear, batched, chained), expected, strict=True):
        assert ours.numpy().dtype == BF16
        got, want = ours.numpy().astype(np.float32), theirs.float().numpy()
        np.testing.assert_allclose(got, want, rtol=2.0**-7, atol=1e-2)


def torch_bf16_losses(state: dict, x: np.ndarray, y: np.ndarray, steps: int) -> np.ndarray:
    """The MLP in torch: float32 master weights, bf16 forward, SGD with momentum."""
    params = {k: torch.tensor(v, requires_grad=True) for k, v in state.items()}
    opt = torch.optim.SGD(params.values(), lr=0.05, momentum=0.9)
    tx, ty = torch.tensor(x).bfloat16(), torch.tensor(y).long()
    out = []
    for _ in range(steps):
        opt.zero_grad()
        h = tx
        for i in (0, 2, 4):
            h = h @ params[f"{i}.weight"].bfloat16().T + params[f"{i}.bias"].bfloat16()
            h = torch.relu(h) if i < 4 else h
        loss = torch.nn.functional.cross_entropy(h.float(), ty)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return np.array(out)


def test_bf16_mlp_training_tracks_torch_bf16() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    y = (x[:, :3].argmax(1)).astype(np.int32)
    cx = lm.Graph()
    lm.nn.manual_seed(0)
    nn = lm.nn
    model = nn.Sequential(
        cx, nn.Linear(cx, 96, 128), nn.ReLU(), nn.Linear(cx, 128, 128), nn.ReLU(),
        nn.Linear(cx, 128, 3),
    )  # fmt: skip
    state = {k: np.array(v, copy=True) for k, v in model.state_dict().items()}
    step = TrainStep.build(
        model,
        losses.cross_entropy,
        functools.partial(SGD, lr=0.05, momentum=0.9),
        ("batch", 96),
        mixed_precision="bf16",
        compiler=lm.CPUCompiler(),
    )
    sources = "\n".join(k.source for s in step.graph.compiled.segments for k in s.kernels)
    assert "lm_gemm_bf16(" in sources
    ours = np.array([step(x, y) for _ in range(20)])
    theirs = torch_bf16_losses(state, x, y, 20)
    assert ours[-1] < 0.5 * ours[0]
    np.testing.assert_allclose(ours, theirs, atol=5e-3, rtol=0)


@pytest.mark.parametrize("path", PATHS)
def test_column_blocks_write_images_apart(library, portable, path):  # noqa: ANN001
    """C's columns in blocks of `width`, `stride` apart: (channel, image * position) written
    as (image, channel, position), as a convolution of several images writes NCHW."""
    rng = np.random.default_rng(2)
    channels, images, positions, k = 20, 3, 40, 75
    a, b = operand(rng, channels, k, False), operand(rng, k, images * positions, False)
    c = np.full((images, channels, positions), 7.0, BF16)
    function(library, portable, path)(
        NO_TRANS, NO_TRANS, channels, images * positions, k, a.ctypes.data, k, b.ctypes.data,
        images * positions, c.ctypes.data, positions, positions, channels * positions,
    )  # fmt: skip
    got = c.astype(np.float32).transpose(1, 0, 2).reshape(channels, images * positions)
    check(got, a, b)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True)])
def test_float16_product_equals_torch_and_numpy(library, m, n, k, ta, tb):  # noqa: ANN001
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float16)
    a[0, 0] = np.nan if m * n * k > 1 else a[0, 0]
    c = product(library.lm_gemm_f16, a, b, m, n, k, ta, tb, pad=3)
    a32, b32 = (a.T if ta else a).astype(np.float32), (b.T if tb else b).astype(np.float32)
    exact = (a32.astype(np.float64) @ b32.astype(np.float64)).astype(np.float32)
    theirs = (torch.from_numpy(a32).half() @ torch.from_numpy(b32).half()).float().numpy()
    np.testing.assert_allclose(c, exact, rtol=2.0**-10, atol=1e-3 * np.sqrt(k))
    np.testing.assert_allclose(c, theirs, rtol=2.0**-9, atol=1e-3 * np.sqrt(k))
    assert np.isnan(c).any() == np.isnan(exact).any()


def test_compiled_float16_matmul_calls_lm_gemm_f16(rng):  # noqa: ANN001
    x = rng.standard_normal((64, 300)).astype(np.float16)
    w = rng.standard_normal((200, 300)).astype(np.float16)
    cx = lm.Graph()
    tx = cx.tensor((64, 300), lm.float16).set(x)
    out = (tx @ cx.tensor((200, 300), lm.float16).set(w).T).retrieve()
    compiled = cx.compile(lm.CPUCompiler())
    cx.execute()
    sources = "\n".join(k.source for s in compiled.segments for k in s.kernels)
    assert "lm_gemm_f16(111, 112, 64, 200, 300" in sources
    theirs = (torch.from_numpy(x) @ torch.from_numpy(w).T).float().numpy()
    assert out.numpy().dtype == np.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), theirs, rtol=2.0**-9, atol=2e-2)


def test_bf16_convolutions_of_one_input_match_torch() -> None:
    """Two bf16 convolutions of one input (their im2col copy shared): products on
    lm_gemm_bf16, values against torch's bf16 conv2d."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    cx = lm.Graph()
    lm.nn.manual_seed(0)
    convs = [lm.nn.Conv2d(cx, 3, out, 3, padding=1) for out in (8, 5)]
    xb = cx.tensor((2, 3, 12, 12)).set(x).cast(lm.bfloat16)
    outs = []
    for conv in convs:
        with lm.training.autocast(conv, "bf16"):
            outs.append(conv(xb).retrieve())
    compiled = cx.compile(lm.CPUCompiler())
    cx.execute()
    assert "lm_gemm_bf16(" in "\n".join(k.source for s in compiled.segments for k in s.kernels)
    for conv, out in zip(convs, outs, strict=True):
        state = {k: torch.tensor(v).bfloat16() for k, v in conv.state_dict().items()}
        tx = torch.tensor(x).bfloat16()
        ref = torch.nn.functional.conv2d(tx, state["weight"], state["bias"], padding=1)
        np.testing.assert_allclose(
            out.numpy().astype(np.float32), ref.float().numpy(), rtol=2.0**-7, atol=2.0**-6
        )

"""Products whose bias / residual / ReLU reader is fused into the lm_sgemm call
(`sgemm_epilogue.py`): compiled graphs against torch, and the consumer's kernel gone."""

from __future__ import annotations

import numpy as np
import torch

import luminal as lm


def _compiled(cx: lm.Graph, out: lm.GraphTensor) -> tuple[np.ndarray, list[str]]:
    """out's value after compiling for the CPU, and the labels of the kernels run."""
    out.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    names = [k.name for segment in cx.compiled.segments for k in segment.kernels]
    return out.numpy(), [name.removeprefix("lm_").rsplit("_", 1)[0] for name in names]


def test_linear_bias_relu_is_one_kernel(rng) -> None:  # noqa: ANN001
    x, w, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((3, 37, 64), (80, 64), (80,)))
    cx = lm.Graph()
    xt, wt, bt = cx.tensor(x.shape).set(x), cx.tensor(w.shape).set(w), cx.tensor(b.shape).set(b)
    got, labels = _compiled(cx, (xt @ wt.transpose(0, 1) + bt).relu())
    np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    assert labels == ["sgemm_col_relu"]


def test_linear_bias_and_residual_on_symbolic_rows(rng) -> None:  # noqa: ANN001
    """Rows (batch, seq) symbolic, as an ONNX export leaves them: a MatMul, its bias and
    the residual x in one call; run at two sequence lengths."""
    w, b = rng.uniform(-1, 1, (48, 48)).astype(np.float32), rng.uniform(-1, 1, 48).astype("f4")
    cx = lm.Graph()
    xt = cx.tensor(("batch", "seq", 48)).set(rng.uniform(-1, 1, (2, 3, 48)).astype("f4"))
    out = xt @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b) + xt
    out.retrieve()
    cx.compile(lm.CPUCompiler())
    labels = {
        k.name.removeprefix("lm_").rsplit("_", 1)[0]
        for s in cx.compiled.segments
        for k in s.kernels
    }
    assert labels == {"sgemm_col_residual"}
    for seq in (5, 19):
        x = rng.uniform(-1, 1, (2, seq, 48)).astype(np.float32)
        xt.set(x)
        cx.execute()
        np.testing.assert_allclose(out.numpy(), x @ w + b + x, rtol=1e-4, atol=1e-4)


def _conv(cx: lm.Graph, torch_conv: torch.nn.Conv2d) -> lm.nn.Conv2d:
    conv = lm.nn.Conv2d(
        cx, torch_conv.in_channels, torch_conv.out_channels, torch_conv.kernel_size, padding=1
    )
    conv.weight.set(torch_conv.weight.detach().numpy())
    conv.bias.set(torch_conv.bias.detach().numpy())
    return conv


def test_conv_bias_relu_and_residual(rng) -> None:  # noqa: ANN001
    """Two images: the bias is per output channel (C's rows), the residual in C's layout
    (blocks of columns, one per image)."""
    torch.manual_seed(0)
    first, second = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1)
    x = rng.uniform(-1, 1, (2, 8, 12, 12)).astype(np.float32)
    with torch.no_grad():
        h = torch.relu(first(torch.from_numpy(x)))
        expected = torch.relu(second(h) + h).numpy()
    cx = lm.Graph()
    h_lm = _conv(cx, first)(cx.tensor(x.shape).set(x)).relu()
    got, labels = _compiled(cx, (_conv(cx, second)(h_lm) + h_lm).relu())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert "sgemm_row_residual_relu" in labels


def test_a_product_read_twice_keeps_its_buffer(rng) -> None:  # noqa: ANN001
    a, b, c = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((40, 64), (64, 56), (56,)))
    cx = lm.Graph()
    p = cx.tensor(a.shape).set(a) @ cx.tensor(b.shape).set(b)
    first, second = (p + cx.tensor(c.shape).set(c)).relu(), p * 2.0
    first.retrieve()
    got, labels = _compiled(cx, second)
    np.testing.assert_allclose(first.numpy(), np.maximum(a @ b + c, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, (a @ b) * 2, rtol=1e-4, atol=1e-4)
    assert "sgemm" in labels


def test_linear_bias_gelu_in_both_forms(rng) -> None:  # noqa: ANN001
    """GELU-erf as PyTorch's (luminal's gelu) and as an ONNX export writes it (x / 2 (1 +
    erf(x / sqrt 2))): each is recognised and fused, and equals torch's exact GELU."""
    x, w, b = (rng.uniform(-2, 2, s).astype(np.float32) for s in ((24, 64), (64, 80), (80,)))
    expected = torch.nn.functional.gelu(torch.from_numpy(x @ w + b)).numpy()
    forms = {
        "torch": lambda v: v.gelu(approximate="none"),
        "onnx": lambda v: v * 0.5 * ((v / 1.4142135381698608).erf() + 1.0),
    }
    for name, gelu in forms.items():
        cx = lm.Graph()
        value = cx.tensor(x.shape).set(x) @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b)
        got, labels = _compiled(cx, gelu(value))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)
        assert labels == ["sgemm_col_gelu"], name


def test_decoder_linear_on_the_few_rows_path(rng) -> None:  # noqa: ANN001
    """torch's Linear (W as (out, in)) with symbolic rows calls lm_sgemm_rows: its fused
    variant applies the bias and ReLU after the streamed dots (1 and 3 rows) and through
    lm_sgemm_ep for more rows."""
    w = rng.uniform(-1, 1, (320, 64)).astype(np.float32)
    b = rng.uniform(-1, 1, 320).astype(np.float32)
    cx = lm.Graph()
    xt = cx.tensor(("rows", 64)).set(rng.uniform(-1, 1, (2, 64)).astype(np.float32))
    out = (xt @ cx.tensor(w.shape).set(w).transpose(0, 1) + cx.tensor(b.shape).set(b)).relu()
    out.retrieve()
    cx.compile(lm.CPUCompiler())
    (kernel,) = [k for s in cx.compiled.segments for k in s.kernels]
    assert "lm_sgemm_rows_ep(" in kernel.source
    for rows in (1, 3, 37):
        x = rng.uniform(-1, 1, (rows, 64)).astype(np.float32)
        xt.set(x)
        cx.execute()
        np.testing.assert_allclose(out.numpy(), np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_an_activation_near_gelu_is_not_taken_for_it(rng) -> None:  # noqa: ANN001
    """GELU's tanh approximation differs from GELU-erf by up to ~1e-3: the probe must
    not fuse it as GELU-erf (its reader keeps its own kernel, values as torch's)."""
    x, w, b = (rng.uniform(-2, 2, s).astype(np.float32) for s in ((24, 64), (64, 80), (80,)))
    cx = lm.Graph()
    value = cx.tensor(x.shape).set(x) @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b)
    got, labels = _compiled(cx, value.gelu(approximate="tanh"))
    expected = torch.nn.functional.gelu(torch.from_numpy(x @ w + b), approximate="tanh")
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert not any("gelu" in label for label in labels), labels


def test_an_activation_equal_to_gelu_at_the_old_probe_points_is_not_taken_for_it(rng) -> None:  # noqa: ANN001
    """GELU times (1 + a bump on (13, 39)): equal to GELU on [-12, 12] and at the probe's
    special values, different between them. The probe must not fuse it as GELU (it did:
    the compiled values were GELU's, off by up to 338 where the bump is)."""
    x, w = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((24, 64), (64, 80)))
    b = np.full(80, 20.0, np.float32)
    cx = lm.Graph()
    value = cx.tensor(x.shape).set(x) @ cx.tensor(w.shape).set(w) + cx.tensor(b.shape).set(b)
    bump = (value - 13.0).relu().minimum((39.0 - value).relu())
    out = value.gelu(approximate="none") * (bump + 1.0)
    out.retrieve()
    cx.compile(lm.CPUCompiler(verify=False))
    cx.execute()
    pre = x @ w + b
    bump_np = np.minimum(np.maximum(pre - 13, 0), np.maximum(39 - pre, 0))
    expected = torch.nn.functional.gelu(torch.from_numpy(pre)).numpy() * (1 + bump_np)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    labels = [k.name for s in cx.compiled.segments for k in s.kernels]
    assert not any("gelu" in label for label in labels), labels

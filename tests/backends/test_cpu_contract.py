"""Contractions the CPU backend lowers to sgemm: several M axes that do not merge (packed
into one matrix), batch-summed products (`ContractSum`: one sgemm with the batch merged
into K), their loop fallback, and a small convolutional net's gradients against torch."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from luminal.backends.cpu import toolchain
from luminal.backends.cpu.compiler import CPUCompiler
from tests.conftest import uniform


def kernel_sources(compiled) -> list[str]:  # noqa: ANN001 - a CompiledGraph
    return [k.source for s in compiled.segments for k in s.kernels]


def op_names(cx: lm.Graph) -> list[str]:
    return [type(node.op).__name__ for node in cx.nodes.values()]


def calls_sgemm(source: str) -> bool:
    """A call of `lm_sgemm` or `lm_sgemm_gather` (a product packing its columns from the
    source of an im2col copy), or of their `_ep` variants (the reader's bias / ReLU fused
    in); the first argument is a transpose flag, 111 or 112."""
    return any(f"lm_sgemm{kind}(11" in source for kind in ("", "_gather", "_ep", "_gather_ep"))


def test_unmergeable_m_axes_are_packed_into_one_sgemm(rng):
    """(4, 10, 8) read through a permute (strides 8, 32, 1) times W: the two M axes do not
    merge in place, so the operand is packed and the product is one call, no loop."""
    cx = lm.Graph()
    x = cx.tensor((10, 4, 8)).set(uniform(rng, (10, 4, 8)))
    w = cx.tensor((8, 6)).set(uniform(rng, (8, 6)))
    out = (x.permute(1, 0, 2) @ w).retrieve()
    compiled = cx.compile(CPUCompiler())
    sources = kernel_sources(compiled)
    gemm = [s for s in sources if calls_sgemm(s)]
    assert len(gemm) == 1 and "malloc" in gemm[0] and "i0_" not in gemm[0]
    cx.execute()
    expected = torch.tensor(cx.input_data[x.node_id]).permute(1, 0, 2) @ torch.tensor(
        cx.input_data[w.node_id]
    )
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_strided_gradient_times_weight_is_one_sgemm(rng):
    """A convolution's input gradient: (batch, positions, channels) read every other float
    (relu's pair gradient) with channel stride > position stride, times the weight."""
    cx = lm.Graph()
    g = cx.tensor(("b", 5, 4, 2)).set(uniform(rng, (3, 5, 4, 2)))
    w = cx.tensor((5, 7)).set(uniform(rng, (5, 7)))
    a = g[:, :, :, 0].permute(0, 2, 1)  # (b, 4, 5), strides (40, 2, 8)
    out = (a @ w).retrieve()
    compiled = cx.compile(CPUCompiler())
    assert any(calls_sgemm(s) and "malloc" in s for s in kernel_sources(compiled))
    for batch in (3, 6):
        data = uniform(rng, (batch, 5, 4, 2))
        g.set(data)
        cx.execute()
        expected = torch.tensor(data[..., 0]).permute(0, 2, 1) @ torch.tensor(
            cx.input_data[w.node_id]
        )
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_batch_summed_product_is_one_contract_sum(rng):
    """sum over b of a[b]^T g[b] (a weight gradient) is one ContractSum: one sgemm with K =
    batch * positions instead of a product per batch index and a sum."""
    cx = lm.Graph()
    a = cx.tensor(("b", 12, 5)).set(uniform(rng, (4, 12, 5)))
    g = cx.tensor(("b", 12, 7)).set(uniform(rng, (4, 12, 7)))
    out = (a.permute(0, 2, 1) @ g).sum(0).retrieve()
    compiled = cx.compile(CPUCompiler())
    assert "ContractSum" in op_names(cx)
    gemm = [s for s in kernel_sources(compiled) if calls_sgemm(s)]
    assert len(gemm) == 1 and "for (long long i0_" not in gemm[0]
    for batch in (4, 9):
        a_data, g_data = uniform(rng, (batch, 12, 5)), uniform(rng, (batch, 12, 7))
        a.set(a_data)
        g.set(g_data)
        cx.execute()
        expected = torch.einsum("bpk,bpn->kn", torch.tensor(a_data), torch.tensor(g_data))
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_contract_sum_packs_strided_operands(rng):
    """The convolution weight-gradient pattern: the gradient read every other float, the
    columns in place; the batch joins K either way."""
    cx = lm.Graph()
    grad = cx.tensor((3, 6, 9, 2)).set(uniform(rng, (3, 6, 9, 2)))
    cols = cx.tensor((3, 9, 11)).set(uniform(rng, (3, 9, 11)))
    out = (grad[..., 0] @ cols).sum(0).retrieve()  # (6, 11)
    compiled = cx.compile(CPUCompiler())
    assert "ContractSum" in op_names(cx)
    assert any(calls_sgemm(s) and "malloc" in s for s in kernel_sources(compiled))
    cx.execute()
    expected = torch.einsum(
        "bcp,bpn->cn",
        torch.tensor(cx.input_data[grad.node_id][..., 0]),
        torch.tensor(cx.input_data[cols.node_id]),
    )
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_long_k_with_a_small_output_is_split_between_threads(rng):
    """K = 8 * 640 with a 5 x 7 output: one lm_sgemm call over the whole K, which (gemm.c)
    gives each thread a slice of K and adds the slices; on one thread a single call."""
    cx = lm.Graph()
    a = cx.tensor((8, 640, 5)).set(uniform(rng, (8, 640, 5)))
    g = cx.tensor((8, 640, 7)).set(uniform(rng, (8, 640, 7)))
    out = (a.permute(0, 2, 1) @ g).sum(0).retrieve()
    threads = toolchain.get_num_threads().openmp
    try:
        toolchain.set_num_threads(2)
        compiled = cx.compile(CPUCompiler())
        assert any(calls_sgemm(s) and ", 5120, " in s for s in kernel_sources(compiled))
        expected = torch.einsum(
            "bpk,bpn->kn",
            torch.tensor(cx.input_data[a.node_id]),
            torch.tensor(cx.input_data[g.node_id]),
        ).numpy()
        for count in (2, 1):
            toolchain.set_num_threads(count)
            cx.execute()
            np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-3)
    finally:
        toolchain.set_num_threads(threads)


def test_sum_over_an_axis_one_operand_lacks_stays_a_sum(rng):
    """(x @ w).sum(0) sums over an M axis (w does not vary along it): no ContractSum, the
    product and the sum it stands for."""
    cx = lm.Graph()
    x = cx.tensor((6, 8)).set(uniform(rng, (6, 8)))
    w = cx.tensor((8, 5)).set(uniform(rng, (8, 5)))
    out = (x @ w).sum(0).retrieve()
    cx.compile(CPUCompiler())
    assert "ContractSum" not in op_names(cx)
    cx.execute()
    expected = (cx.input_data[x.node_id] @ cx.input_data[w.node_id]).sum(0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_contract_sum_without_blas_runs_as_a_loop(rng):
    """float16 operands have no sgemm: the ContractSum becomes one loop kernel summing
    over both axes."""
    cx = lm.Graph()
    a_data = uniform(rng, (3, 4, 5), -1, 1).astype(np.float16)
    g_data = uniform(rng, (3, 4, 6), -1, 1).astype(np.float16)
    a = cx.tensor((3, 4, 5), dtype=lm.float16).set(a_data)
    g = cx.tensor((3, 4, 6), dtype=lm.float16).set(g_data)
    out = (a.permute(0, 2, 1) @ g).sum(0).retrieve()
    compiled = cx.compile(CPUCompiler(rtol=1e-2, atol=1e-2))
    assert "ContractSum" in op_names(cx)
    assert not any(calls_sgemm(s) for s in kernel_sources(compiled))
    cx.execute()
    expected = np.einsum("bpk,bpn->kn", a_data.astype(np.float32), g_data.astype(np.float32))
    assert out.numpy().dtype == np.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=1e-2, atol=2e-2)


def summed_length(node) -> int:  # noqa: ANN001 - a lowered contraction's Node
    """How many products one output element of a contraction adds up."""
    shape = node.inputs[0].view.shape
    return math.prod(int(shape[d]) for d in node.op.summed)


def test_conv_net_gradients_are_one_sgemm_per_contraction(rng):
    """Conv2d, ReLU, MaxPool2d, Conv2d, Linear: every gradient of the compiled graph
    matches torch; each convolution weight gradient is one contraction over every image
    and position (the batch inside K) and every contraction is one sgemm call with no
    loop over the images, the forward convolutions included."""
    x_data = uniform(rng, (4, 2, 10, 10))
    w1, b1 = uniform(rng, (3, 2, 3, 3), -0.5, 0.5), uniform(rng, (3,), -0.5, 0.5)
    w2, b2 = uniform(rng, (4, 3, 3, 3), -0.5, 0.5), uniform(rng, (4,), -0.5, 0.5)
    fc = uniform(rng, (5, 36), -0.5, 0.5)
    cx = lm.Graph()
    x = cx.tensor(x_data.shape).set(x_data)
    params = [cx.tensor(p.shape).set(p) for p in (w1, b1, w2, b2, fc)]
    conv = lm.nn.conv
    h = conv(x, params[0], params[1], padding=1).relu()
    h = h.reshape((4, 3, 5, 2, 5, 2)).max(5).max(3)  # 2x2 max pool
    h = conv(h, params[2], params[3]).relu()  # (4, 4, 3, 3)
    loss = (h.reshape((4, 36)) @ params[4].T).square().sum()
    grads = cx.compile(lm.training.Autograd(params, loss))
    for grad in grads:
        grad.retrieve()
    compiled = cx.compile(CPUCompiler())
    for grad, positions in ((grads[0], 10 * 10), (grads[2], 3 * 3)):
        node = cx.nodes[grad.node_id]
        assert isinstance(node.op, ops.Contract) and summed_length(node) == 4 * positions
    kernels = [k for s in compiled.segments for k in s.kernels]
    contractions = [n.id for n in cx.nodes.values() if isinstance(n.op, ops.Contract)]
    assert len(contractions) >= 8  # two forward convolutions, two weight gradients, ...
    for node_id in contractions:
        (kernel,) = [k for k in kernels if node_id in k.nodes]
        assert calls_sgemm(kernel.source) and "for (long long i0_" not in kernel.source
    cx.execute()
    tensors = [torch.tensor(p, requires_grad=True) for p in (w1, b1, w2, b2, fc)]
    t = F.relu(F.conv2d(torch.tensor(x_data), tensors[0], tensors[1], padding=1))
    t = F.max_pool2d(t, 2)
    t = F.relu(F.conv2d(t, tensors[2], tensors[3]))
    expected = torch.autograd.grad((t.reshape(4, 36) @ tensors[4].T).square().sum(), tensors)
    for ours, theirs in zip(grads, expected, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-3, atol=1e-3)

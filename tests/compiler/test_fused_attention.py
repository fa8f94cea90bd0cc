"""Fused attention (`ops.FusedAttention`): the attention pass finds softmax(q kᵀ * scale +
mask) v in compiled graphs, and the flash-style kernel equals the unfused graph (the
reference runtime) and torch's scaled_dot_product_attention: causal and padding masks,
grouped-query attention, a KV cache with a symbolic past, odd sizes that leave partial
query and key blocks; its gradient; and a memory plan that grows as O(S·d)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal import ops
from luminal.compiler import attention as attention_pass
from luminal.nn.attention import SelfAttention, scaled_dot_product_attention

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def fuse_short_sequences(monkeypatch):  # noqa: ANN001, ANN201
    """Fuse whatever the key length, so every shape exercises the kernel (the pass leaves
    some unmasked static lengths unfused: `test_midsize_unmasked_attention_stays_unfused`)."""
    monkeypatch.setattr(attention_pass, "UNFUSED_KEYS", range(0))


def fused_nodes(cx: lm.Graph) -> list[bool]:
    """Whether each fused attention of `cx` is causal (held as an offset, not a mask)."""
    return [
        n.op.causal_offset is not None
        for n in cx.nodes.values()
        if isinstance(n.op, ops.FusedAttention)
    ]


def reference(build, arrays):  # noqa: ANN001, ANN201 - a graph builder and its inputs
    """The same graph run uncompiled (the reference runtime)."""
    cx = lm.Graph()
    tensors = [cx.tensor(a.shape, dtype=_dtype(a)).set(a) for a in arrays]
    out = build(*tensors).retrieve()
    cx.execute()
    return out.numpy()


def compiled(build, arrays):  # noqa: ANN001, ANN201
    cx = lm.Graph()
    tensors = [cx.tensor(a.shape, dtype=_dtype(a)).set(a) for a in arrays]
    out = build(*tensors).retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    return out.numpy(), fused_nodes(cx)


def _dtype(array: np.ndarray):  # noqa: ANN202
    return lm.bool if array.dtype == np.bool_ else lm.float32


def qkv(rng, batch, heads, kv_heads, length, keys, depth):  # noqa: ANN001, ANN201
    q = rng.standard_normal((batch, heads, length, depth)).astype(np.float32)
    k = rng.standard_normal((batch, kv_heads, keys, depth)).astype(np.float32)
    v = rng.standard_normal((batch, kv_heads, keys, depth)).astype(np.float32)
    return q, k, v


SHAPES = [
    # batch, heads, kv_heads, queries, keys, head_dim
    (1, 2, 2, 16, 16, 8),
    (2, 3, 3, 33, 33, 20),  # partial query block, one partial key block
    (1, 2, 2, 5, 70, 16),  # cross attention: more keys than one block
    (1, 4, 2, 17, 130, 12),  # grouped-query: 2 query heads per kv head
    (2, 1, 1, 1, 67, 24),  # one query row (decode: dot products on k in place)
    (1, 2, 1, 66, 90, 8),  # a block of 64 rows (packed keys) and one of 2 (in place)
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_torch_and_reference(shape, causal) -> None:  # noqa: ANN001
    batch, heads, kv_heads, length, keys, depth = shape
    arrays = qkv(np.random.default_rng(sum(shape)), *shape)

    def build(q, k, v):  # noqa: ANN001, ANN202
        return scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    out, fused = compiled(build, arrays)
    assert fused == [causal]  # a causal iota mask is held as data (causal_offset)
    np.testing.assert_allclose(out, reference(build, arrays), rtol=RTOL, atol=ATOL)
    q, k, v = (torch.from_numpy(a) for a in arrays)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    np.testing.assert_allclose(out, expected.numpy(), rtol=RTOL, atol=ATOL)


def test_padding_mask_and_causal_mask_together() -> None:
    """A bool padding mask (True = attend) per batch row, plus causal: both are the
    additive mask the kernel reads."""
    rng = np.random.default_rng(3)
    arrays = qkv(rng, 2, 2, 2, 21, 21, 16)
    keep = np.ones((2, 1, 1, 21), np.bool_)
    keep[0, ..., 15:] = False
    keep[1, ..., 7:] = False

    def build(q, k, v, mask):  # noqa: ANN001, ANN202
        return scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)

    out, fused = compiled(build, [*arrays, keep])
    assert len(fused) == 1
    np.testing.assert_allclose(out, reference(build, [*arrays, keep]), rtol=RTOL, atol=ATOL)
    q, k, v = (torch.from_numpy(a) for a in arrays)
    causal = torch.ones(21, 21, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(keep) & causal)
    np.testing.assert_allclose(out, expected.numpy(), rtol=RTOL, atol=ATOL)


def test_kv_cache_with_a_symbolic_past() -> None:
    """SelfAttention with GQA, a causal mask and a KV cache of symbolic length: one
    compiled graph serves the prompt (past = 0) and decode steps (past > 0, one query),
    fused, equal to the reference runtime and to torch on the concatenated cache."""
    rng = np.random.default_rng(5)
    embed, heads, kv_heads = 48, 4, 2
    cx = lm.Graph()
    attention = SelfAttention(cx, embed, heads, kv_heads, bias=False, causal=True)
    weights = {
        name: rng.standard_normal(p.shape).astype(np.float32) * 0.2
        for name, p in attention.state_dict().items()
    }
    attention.load_state_dict(weights)
    x = cx.tensor((1, "seq", embed), name="x")
    cache = attention.cache_inputs(1, "past")
    out, new_cache = attention(x, cache)
    out.retrieve()
    new_cache.retrieve()
    empty = np.zeros((1, kv_heads, 0, embed // heads), np.float32)
    prompt = rng.standard_normal((1, 9, embed)).astype(np.float32)
    x.set(prompt)
    cache.set(empty, empty)
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == [True]
    steps = [prompt] + [rng.standard_normal((1, 1, embed)).astype(np.float32) for _ in range(3)]
    keys = values = empty
    seen = np.zeros((1, 0, embed), np.float32)
    for step in steps:
        x.set(step)
        cache.set(keys, values)
        cx.execute()
        keys, values = new_cache.numpy()
        seen = np.concatenate([seen, step], axis=1)
        np.testing.assert_allclose(
            out.numpy(),
            _torch_self_attention(weights, seen, heads, kv_heads)[:, -step.shape[1] :],
            rtol=RTOL,
            atol=ATOL,
        )


def _torch_self_attention(weights, x, heads, kv_heads):  # noqa: ANN001, ANN202
    """Causal GQA self-attention over the whole sequence `x` in torch (no rotary)."""
    t = torch.from_numpy(x)
    depth = x.shape[-1] // heads

    def project(name, count):  # noqa: ANN001, ANN202
        y = t @ torch.from_numpy(weights[f"{name}.weight"]).T
        return y.reshape(1, -1, count, depth).transpose(1, 2)

    q, k, v = project("q_proj", heads), project("k_proj", kv_heads), project("v_proj", kv_heads)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out = out.transpose(1, 2).reshape(1, -1, heads * depth)
    return (out @ torch.from_numpy(weights["o_proj.weight"]).T).numpy()


def test_gradients_through_fused_attention_match_torch() -> None:
    """A compiled graph holding FusedAttention differentiates (the VJP recomputes the
    softmax from primitives) to torch's gradients for q, k and v."""
    rng = np.random.default_rng(7)
    arrays = qkv(rng, 1, 2, 2, 11, 11, 8)
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a).keep() for a in arrays)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = (out * out).sum().retrieve()
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == [True]
    grads = cx.compile(lm.training.Autograd([q, k, v], loss))
    for g in grads:
        g.retrieve()
    cx.compile(lm.CPUCompiler())
    cx.execute()
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in arrays)
    tout = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    expected = torch.autograd.grad((tout * tout).sum(), [tq, tk, tv])
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-3, atol=1e-4)


def test_retrieved_weights_are_not_fused() -> None:
    """The softmax weights are an output (need_weights): the pattern is not private, so
    the unfused graph stays and still computes both."""
    arrays = qkv(np.random.default_rng(9), 1, 2, 2, 6, 6, 4)
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a) for a in arrays)
    from luminal.nn.attention import attend

    out, weights = attend(q, k, v)
    out.retrieve()
    weights.retrieve()
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == []
    cx.execute()
    expected = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in arrays))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def _attention_layer(seq) -> tuple[lm.Graph, object]:  # noqa: ANN001
    cx = lm.Graph()
    attention = SelfAttention(cx, 256, 4, bias=False, causal=True)
    x = cx.tensor((1, seq, 256), name="x")
    out, _ = attention(x)
    out.retrieve()
    return cx, x


def test_prefill_memory_plan_grows_as_s_times_d() -> None:
    """One attention layer (4 heads of 64) compiled once for a symbolic length: the arena
    planned for a 4,096-token prefill is about 4x the 1,024-token one (O(S·d)), and far
    below one head's 4096² float32 scores (64 MiB), which the unfused graph stores for
    every head. The big plan is only planned, never run."""
    cx, x = _attention_layer("seq")
    cx.compile(lm.CPUCompiler())  # verified at a small length
    assert fused_nodes(cx) == [True]
    arenas = {}
    for seq in (1024, 4096):
        x.set(np.zeros((1, seq, 256), np.float32))
        arenas[seq] = cx.memory_report()["arena_bytes"]
    assert arenas[4096] <= 4.5 * arenas[1024]
    assert arenas[4096] < 4096 * 4096 * 4


def test_every_layer_of_a_llama_fuses() -> None:
    """A 3-layer Llama (GQA, rotary, one causal mask shared by the layers) compiles to one
    fused attention per layer; the compiled logits equal the reference runtime's (the
    compiler verifies them) at two sequence lengths of one compiled graph."""
    config = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
    }
    rng = np.random.default_rng(11)
    cx = lm.Graph()
    model = lm.models.Llama(cx, config)
    state = {
        name: (rng.standard_normal(p.shape) * 0.3).astype(np.float32)
        for name, p in model.state_dict().items()
    }
    model.load_state_dict(state)
    ids = cx.tensor((1, "seq"), dtype=lm.int32)
    logits = model(ids).retrieve()
    tokens = rng.integers(0, 64, (1, 19)).astype(np.int32)
    ids.set(tokens)
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == [True] * 3
    for length in (19, 4):
        ids.set(tokens[:, :length])
        cx.execute()
        ref = lm.Graph()
        ref_model = lm.models.Llama(ref, config)
        ref_model.load_state_dict(state)
        ref_logits = ref_model(ref.tensor((1, length), dtype=lm.int32).set(tokens[:, :length]))
        ref_logits.retrieve()
        ref.execute()
        np.testing.assert_allclose(logits.numpy(), ref_logits.numpy(), rtol=RTOL, atol=1e-4)


def test_midsize_unmasked_attention_stays_unfused(monkeypatch) -> None:  # noqa: ANN001
    """Unmasked attention over a static key length in UNFUSED_KEYS (where two sgemms were
    faster) keeps the unfused graph; masked attention of that length, shorter or longer
    sequences and a symbolic length are fused."""
    monkeypatch.setattr(attention_pass, "UNFUSED_KEYS", range(129, 2048))
    rng = np.random.default_rng(13)
    cases = ((200, False, []), (128, False, [False]), (200, True, [True]), (2048, False, [False]))
    for keys, causal, expected in cases:
        arrays = qkv(rng, 1, 1, 1, 2, keys, 4)

        def build(q, k, v, causal=causal):  # noqa: ANN001, ANN202
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

        assert compiled(build, arrays)[1] == expected
    cx = lm.Graph()
    q, k, v = (cx.tensor((1, 2, "seq", 8)) for _ in range(3))
    scaled_dot_product_attention(q, k, v).retrieve()
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == [False]


def test_unfuse_gives_back_an_equal_graph() -> None:
    """`unfuse_attention` (for lowerings without a kernel for the op, e.g. the GPU's)
    rewrites causal and masked FusedAttention nodes into products and a softmax that the
    reference runtime runs to the same values."""
    rng = np.random.default_rng(17)
    arrays = qkv(rng, 2, 4, 2, 9, 9, 8)
    keep = np.ones((2, 1, 1, 9), np.bool_)
    keep[1, ..., 6:] = False
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a) for a in arrays)
    other = cx.tensor(arrays[0].shape).set(arrays[0][:, ::-1].copy())  # scores of its own
    mask = cx.tensor(keep.shape, dtype=lm.bool).set(keep)
    causal = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).retrieve()
    padded = scaled_dot_product_attention(other, k, v, attn_mask=mask, enable_gqa=True)
    padded.retrieve()
    cx.compile(lm.CPUCompiler())
    assert sorted(fused_nodes(cx)) == [False, True]
    cx.execute()
    fused = causal.numpy(), padded.numpy()
    assert attention_pass.unfuse_attention(cx) == 2
    assert fused_nodes(cx) == []
    from luminal.reference.executor import execute

    cx.compiled = None
    execute(cx)
    for before, after in zip(fused, (causal.numpy(), padded.numpy()), strict=True):
        np.testing.assert_allclose(after, before, rtol=RTOL, atol=ATOL)


def test_infinite_masks_keep_the_unfused_semantics() -> None:
    """A float mask with -inf: a partly masked row ignores those keys (exp gives 0, not
    NaN, while the running max is still -inf), a fully masked row is NaN and a huge finite
    mask leaves uniform weights, exactly where the unfused graph has them."""
    rng = np.random.default_rng(19)
    arrays = qkv(rng, 1, 2, 2, 5, 70, 8)
    mask = np.zeros((1, 1, 5, 70), np.float32)
    mask[..., 0, :66] = -np.inf  # the first key block is all -inf for row 0
    mask[..., 1, :] = -np.inf  # row 1 sees nothing
    mask[..., 2, :] = -1e30  # row 2: every key equally (very) unlikely
    mask[..., 3, 3] = 2.0

    def build(q, k, v, m):  # noqa: ANN001, ANN202
        return scaled_dot_product_attention(q, k, v, attn_mask=m)

    out, fused = compiled(build, [*arrays, mask])
    assert fused == [False]
    expected = reference(build, [*arrays, mask])
    assert np.isnan(expected[..., 1, :]).all()
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)  # NaN where NaN


def test_the_kernel_is_ir_any_c_renderer_writes() -> None:
    """The fused kernel is kernel IR: the portable CRenderer (no OpenMP, no pragmas) renders
    it too, and that C computes the same attention."""
    from luminal.backends.cpu.lowering import assemble, lower_kernels
    from luminal.compiler.egraph import EGraphCompiler
    from luminal.render.c import CRenderer

    arrays = qkv(np.random.default_rng(23), 1, 4, 2, 37, 37, 8)
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a) for a in arrays)
    out = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).retrieve()
    cx.compile(lm.GenericCompiler())
    cx.compile(EGraphCompiler(rulesets=("algebra", "structure", "cpu")))
    compiled = assemble(lower_kernels(cx, renderer=CRenderer(), blas=False))
    (kernel,) = [k for s in compiled.segments for k in s.kernels if "fused_attention" in k.name]
    assert "#pragma" not in kernel.source
    compiled.build()
    cx.compiled = compiled
    cx.execute()
    tq, tk, tv = (torch.from_numpy(a) for a in arrays)
    expected = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def test_a_graph_compiled_for_the_cpu_renders_for_a_gpu() -> None:
    """The GPU lowering has no FusedAttention kernel: it unfuses first, so a graph the
    CPU compiler fused still renders as OpenCL (no device needed)."""
    rng = np.random.default_rng(5)
    cx = lm.Graph()
    q, k, v = (cx.tensor(a.shape).set(a) for a in qkv(rng, 1, 2, 2, 70, 70, 8))
    scaled_dot_product_attention(q, k, v, is_causal=True).retrieve()
    cx.compile(lm.CPUCompiler())
    assert fused_nodes(cx) == [True]
    sources = lm.OpenCLCompiler().render(cx)
    assert "__kernel" in (sources if isinstance(sources, str) else "\n".join(map(str, sources)))

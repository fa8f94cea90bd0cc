"""Attention against PyTorch and transformers with copied weights: rotary embeddings,
scaled dot-product attention (causal, masks, grouped-query), both attention modules,
TransformerEncoderLayer, the Llama decoder block, and KV-cache decoding in one graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own alias
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf

import luminal as lm
from tests.conftest import assert_matches_torch, uniform

ATOL, RTOL = 1e-5, 1e-3


def _randomize(module: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = (torch.rand(p.shape, generator=generator) * 2 - 1) * scale
            p.copy_(1 + noise if "norm" in name else noise)
    return module.eval()


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array)


# ---------------------------------------------------------------- rotary, masks, sdpa
def test_rotary_matches_transformers_at_a_symbolic_offset():
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=500.0)
    rotary = hf.LlamaRotaryEmbedding(config)
    cx = lm.Graph()
    x = cx.tensor((2, 4, "seq", 16))
    cos, sin = lm.nn.RotaryEmbedding(16, base=500.0)(cx, "seq", offset="past")
    out = lm.nn.apply_rotary(x, cos, sin).retrieve()
    cos.retrieve()
    rng = np.random.default_rng(0)
    for past, seq in [(0, 5), (7, 3)]:
        data = uniform(rng, (2, 4, seq, 16))
        x.set(data)
        cx.set_dim("past", past)
        cx.execute()
        positions = torch.arange(past, past + seq)[None]
        their_cos, their_sin = rotary(_t(data), positions)
        assert_matches_torch(cos.numpy(), their_cos[0], atol=1e-6)
        expected, _ = hf.apply_rotary_pos_emb(_t(data), _t(data), their_cos, their_sin)
        assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_rotary_with_given_inv_freq_matches_scaled_rope():
    """Scaled RoPE variants: transformers computes inv_freq, luminal takes it as data."""
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    )
    rotary = hf.LlamaRotaryEmbedding(config)
    ours = lm.nn.RotaryEmbedding(16, inv_freq=rotary.inv_freq.numpy())
    cx = lm.Graph()
    cos, sin = ours(cx, 6, offset=3)
    again, _ = ours(cx, 6)
    labels = [getattr(node.op, "label", None) for node in cx.nodes.values()]
    assert labels.count("rotary.inv_freq") == 1  # one input per graph, shared by calls
    cos.retrieve()
    sin.retrieve()
    again.retrieve()
    cx.execute()
    their_cos, their_sin = rotary(torch.zeros(1), torch.arange(3, 9)[None])
    assert_matches_torch(cos.numpy(), their_cos[0], atol=1e-6)
    assert_matches_torch(sin.numpy(), their_sin[0], atol=1e-6)


def test_causal_mask_with_offset():
    cx = lm.Graph()
    mask = lm.nn.causal_mask(cx, 2, 5).retrieve()  # last two of five positions
    top_left = lm.nn.causal_mask(cx, 2, 5, offset=0).retrieve()
    cx.execute()
    expected = np.triu(np.ones((2, 5), bool), 4)
    np.testing.assert_array_equal(mask.numpy() < 0, expected)
    np.testing.assert_array_equal(top_left.numpy() < 0, np.triu(np.ones((2, 5), bool), 1))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [8, 4])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_sdpa_matches_torch(causal, kv_heads, mask):
    rng = np.random.default_rng(1)
    q, k, v = (uniform(rng, (2, h, 6, 8)) for h in (8, kv_heads, kv_heads))
    masks = {
        "bool": rng.random((2, 1, 6, 6)) < 0.7,
        "float": uniform(rng, (6, 6)),
    }
    cx = lm.Graph()
    inputs = [cx.tensor(a.shape).set(a) for a in (q, k, v)]
    attn_mask = None
    if mask is not None:
        masks["bool"][..., 0] = True  # no fully masked rows (torch gives NaN there)
        dtype = lm.bool if mask == "bool" else lm.float32
        attn_mask = cx.tensor(masks[mask].shape, dtype=dtype).set(masks[mask])
    out = lm.nn.scaled_dot_product_attention(
        *inputs, attn_mask=attn_mask, is_causal=causal and mask is None, enable_gqa=True
    ).retrieve()
    cx.execute()
    expected = F.scaled_dot_product_attention(
        _t(q),
        _t(k),
        _t(v),
        attn_mask=None if mask is None else _t(masks[mask]),
        is_causal=causal and mask is None,
        enable_gqa=True,
    )
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_sdpa_without_head_dim():
    rng = np.random.default_rng(12)
    q, k, v = uniform(rng, (4, 8)), uniform(rng, (6, 8)), uniform(rng, (6, 3))
    cx = lm.Graph()
    inputs = [cx.tensor(a.shape).set(a) for a in (q, k, v)]
    out = lm.nn.scaled_dot_product_attention(*inputs, is_causal=True, scale=0.5).retrieve()
    cx.execute()
    expected = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), is_causal=True, scale=0.5)
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_sdpa_needs_enable_gqa_for_fewer_kv_heads():
    cx = lm.Graph()
    q, k = cx.tensor((1, 4, 3, 8)), cx.tensor((1, 2, 3, 8))
    with pytest.raises(lm.ShapeError, match="enable_gqa"):
        lm.nn.scaled_dot_product_attention(q, k, k)


# ---------------------------------------------------------------- SelfAttention
def _torch_attention(
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    heads: int,
    kv_heads: int,
    causal: bool,
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The same projections, then F.scaled_dot_product_attention."""
    batch, seq, _ = x.shape

    def project(name: str, n: int) -> torch.Tensor:
        y = F.linear(x, state[f"{name}.weight"], state.get(f"{name}.bias"))
        return y.view(batch, seq, n, -1).transpose(1, 2)

    q, k, v = project("q_proj", heads), project("k_proj", kv_heads), project("v_proj", kv_heads)
    if rotary is not None:
        q, k = hf.apply_rotary_pos_emb(q, k, *rotary)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    out = out.transpose(1, 2).reshape(batch, seq, -1)
    return F.linear(out, state["o_proj.weight"], state.get("o_proj.bias"))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, kv_heads", [(8, 8), (8, 4)])
def test_self_attention_matches_sdpa(causal, heads, kv_heads):
    cx = lm.Graph()
    attn = lm.nn.SelfAttention(cx, 32, heads, kv_heads, bias=True, causal=causal)
    state = {name: _t(array) for name, array in attn.state_dict().items()}
    x = cx.tensor(("batch", "seq", 32))
    out, cache = attn(x)
    out.retrieve()
    cache.retrieve()
    rng = np.random.default_rng(2)
    for shape in [(2, 5, 32), (3, 2, 32)]:
        data = uniform(rng, shape)
        x.set(data)
        cx.execute()
        expected = _torch_attention(state, _t(data), heads, kv_heads, causal)
        assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)
        assert cache.key.numpy().shape == (shape[0], kv_heads, shape[1], 32 // heads)


def test_self_attention_with_rotary_and_unbatched_input():
    cx = lm.Graph()
    rotary = lm.nn.RotaryEmbedding(8)
    attn = lm.nn.SelfAttention(cx, 32, 4, 2, bias=False, causal=True, rotary=rotary)
    assert "q_proj.bias" not in attn.state_dict()
    state = {name: _t(array) for name, array in attn.state_dict().items()}
    data = uniform(np.random.default_rng(3), (6, 32))
    out, _ = attn(cx.tensor((6, 32)).set(data))
    out.retrieve()
    cx.execute()
    config = LlamaConfig(hidden_size=32, num_attention_heads=4)
    cos_sin = hf.LlamaRotaryEmbedding(config)(_t(data)[None], torch.arange(6)[None])
    expected = _torch_attention(state, _t(data)[None], 4, 2, True, cos_sin)[0]
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_self_attention_errors_name_layer_and_shapes():
    cx = lm.Graph()
    attn = lm.nn.SelfAttention(cx, 32, 8, 4)
    with pytest.raises(lm.ShapeError, match=r"SelfAttention\(embed_dim=32.*\(2, 5, 30\)"):
        attn(cx.tensor((2, 5, 30)))
    bad = lm.nn.KVCache(cx.tensor((2, 8, "past", 4)), cx.tensor((2, 8, "past", 4)))
    with pytest.raises(lm.ShapeError, match=r"cache tensors must be \(batch, 4, past, 4\)"):
        attn(cx.tensor((2, 5, 32)), bad)
    with pytest.raises(lm.ShapeError):
        lm.nn.SelfAttention(cx, 32, 8, 3)
    with pytest.raises(lm.ShapeError, match="q_proj.weight"):
        attn.load_state_dict({**attn.state_dict(), "q_proj.weight": np.zeros((32, 31))})


def test_multi_head_attention_is_the_deprecated_name_of_self_attention():
    cx = lm.Graph()
    with pytest.warns(DeprecationWarning, match="SelfAttention"):
        attn = lm.nn.MultiHeadAttention(cx, 16, 4, 2)
    assert isinstance(attn, lm.nn.SelfAttention)
    assert set(attn.state_dict()) == set(lm.nn.SelfAttention(cx, 16, 4, 2).state_dict())


def _decode_matches_full_run(module: lm.nn.Module, cache: lm.nn.KVCache, width: int) -> None:
    """One graph: a prompt of 5 tokens, then 3 single-token steps feeding the cache back,
    against all 8 tokens at once (past = 0)."""
    cx = module.graph
    x = cx.tensor((cache.key.shape[0], "seq", width))  # the cache's batch, maybe symbolic
    out, new_cache = module(x, cache)
    out.retrieve()
    new_cache.retrieve()
    kv_heads, head_dim = cache.key.shape[1], cache.key.shape[3]
    empty = np.zeros((2, kv_heads, 0, head_dim), np.float32)
    tokens = uniform(np.random.default_rng(4), (2, 8, width))

    cache.set(empty, empty)
    x.set(tokens)
    cx.execute()
    full = out.numpy()

    cache.set(empty, empty)
    x.set(tokens[:, :5])
    cx.execute()
    np.testing.assert_allclose(out.numpy(), full[:, :5], atol=1e-5, rtol=1e-4)
    for step in range(5, 8):
        cache.set(*new_cache.numpy())
        x.set(tokens[:, step : step + 1])
        cx.execute()
        assert new_cache.key.numpy().shape == (2, kv_heads, step + 1, head_dim)
        np.testing.assert_allclose(out.numpy()[:, 0], full[:, step], atol=1e-5, rtol=1e-4)


def test_kv_cache_decoding_equals_full_run():
    cx = lm.Graph()
    attn = lm.nn.SelfAttention(
        cx, 32, 8, 4, causal=True, rotary=lm.nn.RotaryEmbedding(4, base=100.0)
    )
    _decode_matches_full_run(attn, attn.cache_inputs(), 32)  # batch and past symbolic


def test_kv_cache_decoding_through_llama_layer():
    cx = lm.Graph()
    layer = lm.nn.LlamaDecoderLayer(cx, 64, 4, 2, 128)
    _randomize_luminal(layer)
    _decode_matches_full_run(layer, layer.self_attn.cache_inputs(batch=2), 64)


def _randomize_luminal(module: lm.nn.Module, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    for name, tensor in module.named_parameters():
        noise = rng.uniform(-0.3, 0.3, tensor.shape).astype(np.float32)
        tensor.set(1 + noise if "norm" in name else noise)


# ---------------------------------------------------------------- torch-style modules
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(batch_first):
    """Cross-attention with a key padding mask and a bool attention mask (True = blocked)."""
    torch.manual_seed(6)
    theirs = _randomize(torch.nn.MultiheadAttention(16, 4, batch_first=batch_first))
    cx = lm.Graph()
    ours = lm.nn.MultiheadAttention(cx, 16, 4, batch_first=batch_first)
    ours.load_state_dict(theirs.state_dict())
    rng = np.random.default_rng(6)
    shape = (2, 5, 16) if batch_first else (5, 2, 16)
    q, kv = uniform(rng, shape), uniform(rng, shape[:1] + (7,) + shape[2:])
    if not batch_first:
        kv = uniform(rng, (7, 2, 16))
    padding = np.zeros((2, 7), bool)
    padding[0, 5:] = True
    attn_mask = rng.random((5, 7)) < 0.3
    attn_mask[:, 0] = False
    inputs = [cx.tensor(a.shape).set(a) for a in (q, kv)]
    out, weights = ours(
        inputs[0],
        inputs[1],
        inputs[1],
        key_padding_mask=cx.tensor((2, 7), dtype=lm.bool).set(padding),
        attn_mask=cx.tensor((5, 7), dtype=lm.bool).set(attn_mask),
    )
    out.retrieve()
    weights.retrieve()
    cx.execute()
    with torch.no_grad():
        expected, expected_weights = theirs(
            _t(q), _t(kv), _t(kv), key_padding_mask=_t(padding), attn_mask=_t(attn_mask)
        )
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert_matches_torch(weights.numpy(), expected_weights, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    "activation, norm_first, batch_first",
    [("relu", False, True), ("gelu", False, True), ("relu", True, True), ("gelu", False, False)],
)
def test_transformer_encoder_layer_matches_torch(activation, norm_first, batch_first):
    torch.manual_seed(7)
    theirs = torch.nn.TransformerEncoderLayer(
        32,
        4,
        dim_feedforward=64,
        dropout=0.0,
        activation=activation,
        batch_first=batch_first,
        norm_first=norm_first,
    )
    _randomize(theirs)
    cx = lm.Graph()
    ours = lm.nn.TransformerEncoderLayer(
        cx, 32, 4, 64, 0.0, activation, batch_first=batch_first, norm_first=norm_first
    )
    ours.load_state_dict(theirs.state_dict())
    shape = ("batch", 6, 32) if batch_first else (6, "batch", 32)
    x = cx.tensor(shape)
    out = ours(x).retrieve()
    rng = np.random.default_rng(7)
    for batch in (2, 3):
        data = uniform(rng, (batch, 6, 32) if batch_first else (6, batch, 32))
        x.set(data)
        cx.execute()
        with torch.no_grad():
            expected = theirs(_t(data))
        assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_transformer_encoder_layer_with_masks():
    torch.manual_seed(8)
    theirs = _randomize(torch.nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True))
    cx = lm.Graph()
    ours = lm.nn.TransformerEncoderLayer(cx, 16, 2, 32, 0.0, batch_first=True)
    ours.load_state_dict(theirs.state_dict())
    data = uniform(np.random.default_rng(8), (2, 5, 16))
    padding = np.zeros((2, 5), np.float32)
    padding[1, 3:] = -np.inf  # float masks are added, -inf included
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)  # float, -inf above
    out = ours(
        cx.tensor((2, 5, 16)).set(data),
        src_mask=cx.tensor((5, 5)).set(causal.numpy()),
        src_key_padding_mask=cx.tensor((2, 5)).set(padding),
    ).retrieve()
    cx.execute()
    with torch.no_grad():
        expected = theirs(_t(data), src_mask=causal, src_key_padding_mask=_t(padding))
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------- Llama decoder block
def test_llama_decoder_layer_matches_transformers():
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        rms_norm_eps=1e-6,
    )
    config._attn_implementation = "eager"
    theirs = _randomize(hf.LlamaDecoderLayer(config, layer_idx=0))
    rotary = hf.LlamaRotaryEmbedding(config)
    cx = lm.Graph()
    ours = lm.nn.LlamaDecoderLayer.from_config(cx, config.to_dict())
    names = {name for name, _ in ours.named_parameters()}
    assert names == set(theirs.state_dict())
    assert "self_attn.q_proj.weight" in names and "mlp.gate_proj.weight" in names
    ours.load_state_dict(theirs.state_dict())
    x = cx.tensor(("batch", "seq", 64))
    out, _ = ours(x)
    out.retrieve()
    rng = np.random.default_rng(9)
    for batch, seq in [(2, 7), (1, 3)]:
        data = uniform(rng, (batch, seq, 64))
        x.set(data)
        cx.execute()
        mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)[None, None]
        with torch.no_grad():
            position_embeddings = rotary(_t(data), torch.arange(seq)[None])
            expected = theirs(
                _t(data), attention_mask=mask, position_embeddings=position_embeddings
            )
        assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)


def test_llama_decoder_layer_takes_position_embeddings():
    """A model computes cos/sin once and passes them to every layer (HF's layout)."""
    cx = lm.Graph()
    layer = lm.nn.LlamaDecoderLayer(cx, 32, 4, 2, 64, rope_theta=100.0)
    _randomize_luminal(layer)
    data = uniform(np.random.default_rng(10), (1, 4, 32))
    x = cx.tensor((1, 4, 32)).set(data)
    own, _ = layer(x)
    cos, sin = lm.nn.RotaryEmbedding(8, base=100.0)(cx, 4)
    given, _ = layer(x, position_embeddings=(cos.unsqueeze(0), sin.unsqueeze(0)))
    own.retrieve()
    given.retrieve()
    cx.execute()
    np.testing.assert_allclose(given.numpy(), own.numpy(), atol=1e-6, rtol=0)


def test_multihead_attention_unbatched_per_head_weights():
    torch.manual_seed(11)
    theirs = _randomize(torch.nn.MultiheadAttention(16, 2))
    cx = lm.Graph()
    ours = lm.nn.MultiheadAttention(cx, 16, 2)
    ours.load_state_dict(theirs.state_dict())
    data = uniform(np.random.default_rng(11), (4, 16))
    x = cx.tensor((4, 16)).set(data)
    out, weights = ours(x, x, x, average_attn_weights=False, is_causal=True)
    out.retrieve()
    weights.retrieve()
    cx.execute()
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    with torch.no_grad():
        expected, expected_weights = theirs(
            _t(data), _t(data), _t(data), attn_mask=mask, average_attn_weights=False
        )
    assert_matches_torch(out.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert_matches_torch(weights.numpy(), expected_weights, atol=ATOL, rtol=RTOL)

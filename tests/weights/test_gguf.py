"""GGUF: block formats against gguf's own dequantisation, files written with GGUFWriter,
metadata, llama.cpp -> Hugging Face names and the inverse of llama.cpp's q/k permutation."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import luminal as lm
from luminal.weights import (
    LlamaConfig,
    dequantize,
    dequantize_q4_0,
    dequantize_q8_0,
    gguf_llama_config,
    gguf_llama_state_dict,
    gguf_to_hf_name,
    load_gguf,
    unpermute_rope,
)
from tests.conftest import write_gguf


def permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, written from its definition."""
    dim = weights.shape[0]
    return (
        weights.reshape(n_head, 2, dim // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _block_absmax(x: np.ndarray) -> np.ndarray:
    """max |x| of the 32-value block each element belongs to, broadcast to x's shape."""
    blocks = np.abs(x).reshape(-1, 32).max(axis=1, keepdims=True)
    return np.broadcast_to(blocks, (blocks.shape[0], 32)).reshape(x.shape)


# ---------------------------------------------------------------- block formats


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0])
@pytest.mark.parametrize("shape", [(64,), (3, 96), (2, 5, 32)])
def test_dequantize_matches_gguf(qtype: Q, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 10)).astype(np.float32)
    x.reshape(-1)[:32] = 0.0  # an all-zero block: scale 0
    packed = gguf.quants.quantize(x, qtype)
    ours = dequantize(packed, qtype, shape)
    theirs = gguf.quants.dequantize(packed, qtype)
    assert ours.shape == shape and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)
    # within the quantisation step of each block (8-bit: absmax/127, 4-bit: absmax/8)
    # (Q8_0 rounds to the nearest step; Q4_0's range [-8d, 7d] clips one side by a step;
    # the float16 scale adds a little)
    step = _block_absmax(x) / (127.0 if qtype == Q.Q8_0 else 8.0)
    bound = step * (0.6 if qtype == Q.Q8_0 else 1.1)
    assert np.all(np.abs(ours - x) <= bound)


def test_q8_0_block_layout() -> None:
    q = np.arange(-16, 16, dtype=np.int8)
    block = np.concatenate([np.array([0.5], "<f2").view(np.uint8), q.view(np.uint8)])
    np.testing.assert_array_equal(dequantize_q8_0(block), q.astype(np.float32) * 0.5)


def test_q4_0_block_layout_low_nibbles_first() -> None:
    low = np.arange(16, dtype=np.uint8)
    high = 15 - low
    block = np.concatenate([np.array([2.0], "<f2").view(np.uint8), low | (high << 4)])
    expected = np.concatenate([low.astype(np.float32) - 8, high.astype(np.float32) - 8]) * 2
    np.testing.assert_array_equal(dequantize_q4_0(block), expected)


def test_dequantize_errors() -> None:
    with pytest.raises(lm.ShapeError, match="whole blocks of 32"):
        dequantize(np.zeros(34 * 2, np.uint8), Q.Q8_0, (2, 33))
    with pytest.raises(lm.ShapeError, match="got 35 bytes"):
        dequantize(np.zeros(35, np.uint8), Q.Q8_0, (32,))
    with pytest.raises(lm.DTypeError, match="Q4_1 is not supported.*Q8_0"):
        dequantize(np.zeros(20, np.uint8), Q.Q4_1, (32,))


# ---------------------------------------------------------------- files


def _data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w_f32": rng.standard_normal((6, 64)).astype(np.float32),
        "w_f16": rng.standard_normal((5, 32)).astype(np.float32),
        "w_q8": rng.standard_normal((8, 96)).astype(np.float32),
        "w_q4": rng.standard_normal((4, 3, 64)).astype(np.float32),
        "vec": rng.standard_normal(10).astype(np.float32),
        "ids": np.arange(12, dtype=np.int32).reshape(3, 4),
    }


def _write(path: Path, data: dict[str, np.ndarray]) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_head_count(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(500000.0)
    writer.add_string("general.name", "tiny")
    writer.add_bool("test.flag", True)
    writer.add_uint64("test.big", 2**40)
    writer.add_int32("test.neg", -3)
    writer.add_float64("test.f64", 0.1)
    writer.add_array("test.ints", [1, 2, 3])
    writer.add_array("test.floats", [0.5, 0.25])
    writer.add_token_list(["<s>", "</s>", "héllo"])
    writer.add_tensor("w_f32", data["w_f32"])
    writer.add_tensor("w_f16", data["w_f16"].astype(np.float16))
    writer.add_tensor("w_q8", gguf.quants.quantize(data["w_q8"], Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("w_q4", gguf.quants.quantize(data["w_q4"], Q.Q4_0), raw_dtype=Q.Q4_0)
    writer.add_tensor("vec", data["vec"])
    writer.add_tensor("ids", data["ids"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_load_gguf_tensors(tmp_path: Path) -> None:
    data = _data(np.random.default_rng(1))
    path = tmp_path / "tiny.gguf"
    _write(path, data)
    tensors, _ = load_gguf(path)
    assert {name: t.shape for name, t in tensors.items()} == {n: d.shape for n, d in data.items()}
    np.testing.assert_array_equal(tensors["w_f32"], data["w_f32"])
    np.testing.assert_array_equal(tensors["vec"], data["vec"])
    np.testing.assert_array_equal(tensors["w_f16"], data["w_f16"].astype(np.float16))
    np.testing.assert_array_equal(tensors["ids"], data["ids"])
    assert tensors["ids"].dtype == np.int32
    for name, scale in (("w_q8", 127.0), ("w_q4", 8.0)):
        assert tensors[name].dtype == np.float32
        step = _block_absmax(data[name]) / scale
        assert np.all(np.abs(tensors[name] - data[name]) <= step * 1.1), name
    # the same as gguf's reader followed by gguf's own dequantisation
    reader = gguf.GGUFReader(path)
    for info in reader.tensors:
        if info.tensor_type == Q.I32:  # gguf's dequantize knows only float formats
            reference = np.asarray(info.data)
        else:
            reference = gguf.quants.dequantize(info.data, info.tensor_type).astype(np.float32)
        np.testing.assert_array_equal(tensors[info.name], reference, err_msg=info.name)
        assert tensors[info.name].flags.writeable
        assert not np.shares_memory(tensors[info.name], reader.data)  # not the memory map


def test_load_gguf_dtype(tmp_path: Path) -> None:
    data = _data(np.random.default_rng(2))
    _write(tmp_path / "t.gguf", data)
    tensors, _ = load_gguf(tmp_path / "t.gguf", dtype=lm.float16)
    assert tensors["w_q4"].dtype == np.float16 and tensors["ids"].dtype == np.int32
    np.testing.assert_array_equal(tensors["w_f16"], data["w_f16"].astype(np.float16))


def test_metadata_round_trip(tmp_path: Path) -> None:
    _write(tmp_path / "t.gguf", _data(np.random.default_rng(3)))
    _, metadata = load_gguf(tmp_path / "t.gguf")
    assert metadata == {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.attention.head_count": 4,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,  # float32 shown as its short decimal
        "llama.rope.freq_base": 500000.0,
        "general.name": "tiny",
        "test.flag": True,
        "test.big": 2**40,
        "test.neg": -3,
        "test.f64": 0.1,
        "test.ints": [1, 2, 3],
        "test.floats": [0.5, 0.25],
        "tokenizer.ggml.tokens": ["<s>", "</s>", "héllo"],
    }


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(lm.LuminalError, match="no such file"):
        load_gguf(tmp_path / "absent.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all" * 4)
    with pytest.raises(lm.LuminalError, match="not a readable GGUF"):
        load_gguf(tmp_path / "junk.gguf")
    _write(tmp_path / "whole.gguf", _data(np.random.default_rng(0)))
    whole = (tmp_path / "whole.gguf").read_bytes()
    for size in (0, 20, len(whole) - 40):  # (the last 16 bytes are alignment padding)
        (tmp_path / "cut.gguf").write_bytes(whole[:size])
        with pytest.raises(lm.LuminalError, match="not a readable GGUF|truncated"):
            load_gguf(tmp_path / "cut.gguf")
    q41 = gguf.quants.quantize(np.ones((2, 32), np.float32), Q.Q4_1)
    write_gguf(tmp_path / "q41.gguf", "llama", {"odd": q41}, raw_dtype=Q.Q4_1)
    with pytest.raises(lm.DTypeError, match="'odd'.*Q4_1"):
        load_gguf(tmp_path / "q41.gguf")
    with pytest.raises(lm.DTypeError, match="not a floating type"):
        load_gguf(tmp_path / "q41.gguf", dtype=np.int32)


# ---------------------------------------------------------------- llama.cpp -> Hugging Face


def test_name_mapping() -> None:
    expected = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
        "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
        "blk.11.attn_q.weight": "model.layers.11.self_attn.q_proj.weight",
        "blk.1.attn_k.weight": "model.layers.1.self_attn.k_proj.weight",
        "blk.1.attn_v.weight": "model.layers.1.self_attn.v_proj.weight",
        "blk.1.attn_q.bias": "model.layers.1.self_attn.q_proj.bias",
        "blk.2.attn_output.weight": "model.layers.2.self_attn.o_proj.weight",
        "blk.2.ffn_norm.weight": "model.layers.2.post_attention_layernorm.weight",
        "blk.3.ffn_gate.weight": "model.layers.3.mlp.gate_proj.weight",
        "blk.3.ffn_up.weight": "model.layers.3.mlp.up_proj.weight",
        "blk.3.ffn_down.weight": "model.layers.3.mlp.down_proj.weight",
    }
    for name, hf_name in expected.items():
        assert gguf_to_hf_name(name) == hf_name
    for bad in ("blk.0.attn_qkv.weight", "tok_embeddings.weight", "blk.x.attn_q.weight"):
        with pytest.raises(lm.LuminalError, match="not a llama.cpp Llama tensor name"):
            gguf_to_hf_name(bad)


@pytest.mark.parametrize("n_head, head_dim, rest", [(4, 16, (24,)), (2, 8, ()), (1, 2, (3,))])
def test_unpermute_inverts_llama_cpp_permute(n_head: int, head_dim: int, rest: tuple) -> None:
    w = np.random.default_rng(4).standard_normal((n_head * head_dim, *rest)).astype(np.float32)
    np.testing.assert_array_equal(unpermute_rope(permute(w, n_head), n_head), w)
    np.testing.assert_array_equal(permute(unpermute_rope(w, n_head), n_head), w)
    if head_dim > 2:  # a real reordering, not the identity
        assert not np.array_equal(permute(w, n_head), w)
    with pytest.raises(lm.ShapeError, match="heads of an even size"):
        unpermute_rope(w[:-1], n_head)


def _rope_halves(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Hugging Face: rotate element i with element i + d/2 of each head."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _rope_pairs(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """llama.cpp (normal RoPE): rotate elements 2i and 2i+1 of each head."""
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = np.cos(angles), np.sin(angles)
    return np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)


def test_permutation_is_the_rope_layout_change() -> None:
    """Why the permutation exists: interleaved RoPE on llama.cpp's rows gives the same
    numbers as Hugging Face's rotate-half RoPE on the original rows, reordered."""
    rng = np.random.default_rng(5)
    n_head, head_dim, hidden = 3, 8, 12
    w_hf = rng.standard_normal((n_head * head_dim, hidden))
    x = rng.standard_normal(hidden)
    angles = rng.uniform(0, 6, head_dim // 2)
    hf = _rope_halves((w_hf @ x).reshape(n_head, head_dim), angles)
    cpp = _rope_pairs((permute(w_hf, n_head) @ x).reshape(n_head, head_dim), angles)
    np.testing.assert_allclose(permute(hf.reshape(-1), n_head), cpp.reshape(-1), atol=1e-12)
    np.testing.assert_allclose(unpermute_rope(cpp.reshape(-1), n_head), hf.reshape(-1), atol=1e-12)


def _hf_to_gguf_name(hf_name: str) -> str:
    """The converter's direction, for writing test files."""
    for gguf_name in (
        "token_embd.weight",
        "output_norm.weight",
        "output.weight",
        *(
            f"blk.{i}.{p}.weight"
            for i in range(2)
            for p in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output")
            + ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
        ),
    ):
        if gguf_to_hf_name(gguf_name) == hf_name:
            return gguf_name
    raise AssertionError(hf_name)


@pytest.mark.parametrize("tied", [False, True])
def test_llama_checkpoint_round_trip(tmp_path: Path, tied: bool) -> None:
    """A transformers Llama state dict, converted as llama.cpp does (renamed, q/k permuted,
    Q8_0 for the big matrices), comes back under HF names in HF layout."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf_config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=tied,
    )
    state = {k: v.numpy() for k, v in transformers.LlamaForCausalLM(hf_config).state_dict().items()}
    if tied:
        del state["lm_head.weight"]
    writer = gguf.GGUFWriter(tmp_path / "llama.gguf", "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(96)
    writer.add_block_count(2)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_tensor("rope_freqs.weight", np.ones(8, np.float32))  # derived; dropped
    quantized = set()
    for hf_name, array in state.items():
        name = _hf_to_gguf_name(hf_name)
        if ".attn_q." in name:
            array = permute(array, 4)
        elif ".attn_k." in name:
            array = permute(array, 2)
        if name.endswith("ffn_up.weight"):  # one quantised kind of matrix
            quantized.add(hf_name)
            writer.add_tensor(name, gguf.quants.quantize(array, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tensors, metadata = load_gguf(tmp_path / "llama.gguf")
    loaded = gguf_llama_state_dict(tensors, metadata)
    assert set(loaded) == set(state)
    for name, array in state.items():
        if name in quantized:
            assert np.all(np.abs(loaded[name] - array) <= _block_absmax(array) / 127 * 0.6)
        else:
            np.testing.assert_array_equal(loaded[name], array, err_msg=name)

    config = LlamaConfig.from_dict(gguf_llama_config(metadata, tensors))
    expected = LlamaConfig.from_dict(hf_config.to_dict())
    assert config == expected


def test_llama_helpers_check_architecture() -> None:
    with pytest.raises(lm.LuminalError, match="architecture 'qwen2'"):
        gguf_llama_state_dict({}, {"general.architecture": "qwen2"})
    with pytest.raises(lm.LuminalError, match="no 'llama.attention.head_count'"):
        gguf_llama_state_dict({}, {"general.architecture": "llama"})
    metadata = {
        "general.architecture": "llama",
        "llama.attention.head_count": 4,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 96,
        "llama.block_count": 2,
    }
    with pytest.raises(lm.LuminalError, match="vocabulary size"):
        gguf_llama_config(metadata)
    config = gguf_llama_config({**metadata, "tokenizer.ggml.tokens": ["a", "b", "c"]})
    assert config["vocab_size"] == 3 and config["num_key_value_heads"] == 4
    assert "tie_word_embeddings" not in config  # unknown without the tensors

"""The Llama family against transformers (tiny seeded configs, every parameter random):
Mistral (a sliding window shorter than the sequence), Qwen2 (q/k/v biases, full and
sliding layers), Phi-3 (fused projections, partial rotary, LongRoPE switching factors
during generation), Gemma (scaled embeddings, 1 + weight norms, GeGLU) and GPT-2 (learned
positions, Conv1D, tied head). Each is loaded by `lm.models.from_pretrained` from a
save_pretrained folder; logits on the reference runtime; greedy tokens and every step's
logits from one compiled decode session; plus the registry, GGUF dispatch, tokenizers,
checkpoint name mapping and rollback."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers as tf
from safetensors.numpy import save_file

import luminal as lm
from luminal.models import GPT2, Gemma, Llama, Mistral, Phi3, Qwen2
from luminal.nn.layers import default_generator
from luminal.weights import gguf_to_hf_name
from tests.conftest import write_gguf
from tests.models.conftest import hf_greedy_continuation, hf_logits

ATOL, RTOL = 1e-4, 1e-3
VOCAB, PROMPT_LEN, NEW_TOKENS = 128, 7, 8
BASE = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    attn_implementation="eager",
)
# LongRoPE switches factors once the sequence passes 8 positions: the prompt (7) does not,
# generation does, and the session must then rerun the sequence as transformers does
PHI3_ROPE = {"type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [3.0, 5.0]}

FAMILIES = {
    "mistral": (tf.MistralConfig, tf.MistralForCausalLM, Mistral, dict(sliding_window=4)),
    "qwen2": (
        tf.Qwen2Config,
        tf.Qwen2ForCausalLM,
        Qwen2,
        dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
    ),
    "phi3": (
        tf.Phi3Config,
        tf.Phi3ForCausalLM,
        Phi3,
        dict(
            max_position_embeddings=32,
            original_max_position_embeddings=8,
            partial_rotary_factor=0.5,
            rope_scaling=PHI3_ROPE,
        ),
    ),
    "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM, Gemma, dict(head_dim=16)),
    "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, GPT2, None),
}


def hf_model(family: str) -> torch.nn.Module:
    """A transformers model of the family with every parameter drawn from N(0, 0.15^2)
    (norm scales around 1, Gemma's around 0 as it adds 1), so biases and norms matter and
    greedy decoding picks varied tokens."""
    config_cls, model_cls, _, extra = FAMILIES[family]
    if extra is None:  # GPT-2's own names
        config = config_cls(
            n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB, bos_token_id=1,
            eos_token_id=2, attn_implementation="eager",
        )  # fmt: skip
    else:
        config = config_cls(**{**BASE, **extra})
    model = model_cls(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * 0.15
            unit = "norm" in name or ".ln_" in name
            scale = unit and name.endswith("weight") and family != "gemma"
            param.copy_(noise + 1.0 if scale else noise)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """transformers' model, its folder, luminal's model loaded from it, and transformers'
    greedy continuation with every step's logits."""
    name = request.param
    hf = hf_model(name)
    folder = tmp_path_factory.mktemp(name)
    hf.save_pretrained(folder)
    prompt = np.random.default_rng(0).integers(3, VOCAB, (2, PROMPT_LEN)).astype(np.int32)
    tokens, step_logits = hf_greedy_continuation(hf, prompt, NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    return {
        "name": name,
        "hf": hf,
        "folder": folder,
        "model": lm.models.from_pretrained(folder),
        "prompt": prompt,
        "tokens": tokens,
        "step_logits": step_logits,
    }


# ---------------------------------------------------------------- per family
def test_from_pretrained_picks_the_class_and_names_parameters_as_transformers(family):
    model, hf = family["model"], family["hf"]
    assert type(model) is FAMILIES[family["name"]][2]
    theirs = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    if model.config.tie_word_embeddings:
        del theirs["lm_head.weight"]
    assert {k: tuple(t.shape) for k, t in model.named_parameters()} == theirs


def test_loading_and_sessions_draw_no_random_weights(family):
    generator = default_generator().bit_generator
    before = generator.state
    model = lm.models.from_pretrained(family["folder"])
    model.session(compile=False)
    assert generator.state == before


def test_logits_match_transformers_on_the_reference_runtime(family):
    model, prompt = family["model"], family["prompt"]
    ids = model.graph.tensor(("batch", "seq"), dtype=lm.int32)
    logits = model(ids).retrieve()
    ids.set(prompt)
    model.graph.execute()
    np.testing.assert_allclose(logits.numpy(), hf_logits(family["hf"], prompt), ATOL, ATOL)


def test_compiled_greedy_decoding_matches_generate(family):
    """One compiled session: the prompt's last logits, then each greedy step's logits
    with the KV cache, and the tokens, against transformers' generate(do_sample=False)."""
    session = family["model"].session(compile=True)
    steps = [session.prefill(family["prompt"])]
    for _ in range(NEW_TOKENS - 1):
        steps.append(session.step(steps[-1].argmax(-1)))
    np.testing.assert_allclose(np.stack(steps, 1), family["step_logits"], rtol=RTOL, atol=ATOL)
    tokens = lm.models.generate(session, family["prompt"], NEW_TOKENS, ignore_eos=True)
    np.testing.assert_array_equal(tokens, family["tokens"])
    assert session.compile_count == 1


# ---------------------------------------------------------------- what the configs switch
def test_sliding_window_mask_keeps_the_last_window_positions():
    cx = lm.Graph()
    mask = lm.nn.causal_mask(cx, 3, 7, offset=4, window=3).retrieve()
    cx.execute()
    query = np.arange(3)[:, None] + 4
    key = np.arange(7)[None]
    expected = np.where((key <= query) & (key > query - 3), 0.0, -1e9)
    np.testing.assert_array_equal(mask.numpy(), expected.astype(np.float32))


def test_windows_and_rope_come_from_the_configs():
    qwen = Qwen2(lm.Graph(), {**BASE, "use_sliding_window": True, "sliding_window": 4})
    assert [layer.parts[0].sliding_window for layer in qwen.model.layers] == [None, None]
    types = {"layer_types": ["sliding_attention", "full_attention"]}
    qwen = Qwen2(lm.Graph(), {**BASE, "use_sliding_window": True, "sliding_window": 4, **types})
    assert [layer.parts[0].sliding_window for layer in qwen.model.layers] == [4, None]
    with pytest.raises(lm.LuminalError, match="layer_types"):
        Qwen2(lm.Graph(), {**BASE, "layer_types": ["full_attention"]})
    gemma = Gemma(lm.Graph(), {**BASE, "head_dim": 8, "hidden_act": "gelu"})
    assert gemma.config.hidden_act == "gelu_pytorch_tanh"  # transformers reads Gemma so
    legacy = {**BASE, "original_max_position_embeddings": 8, "partial_rotary_factor": 0.5}
    legacy["rope_scaling"] = {**PHI3_ROPE}
    legacy["rope_scaling"]["type"] = "su"
    assert Phi3(lm.Graph(), legacy).rotary.long_after == 8
    with pytest.raises(lm.LuminalError, match="long_factor"):
        Phi3(lm.Graph(), {**legacy, "rope_scaling": {**PHI3_ROPE, "long_factor": [1.0]}})
    with pytest.raises(lm.ShapeError, match="sliding_window"):
        Mistral(lm.Graph(), {**BASE, "sliding_window": 0})


def test_gpt2_loads_a_gpt2model_checkpoint_and_drops_mask_buffers():
    hf = hf_model("gpt2")
    state = {k: v for k, v in hf.transformer.state_dict().items()}  # no "transformer."
    state["h.0.attn.bias"] = torch.ones(1, 1, 64, 64)  # the mask buffer of old checkpoints
    model = GPT2(lm.Graph(), hf.config.to_dict())
    model.load_state_dict(state)
    ids = np.arange(3, 9, dtype=np.int32)[None]
    logits = model(model.graph.tensor((1, 6), dtype=lm.int32).set(ids)).retrieve()
    model.graph.execute()
    np.testing.assert_allclose(logits.numpy(), hf_logits(hf, ids), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------- loading
def test_register_extends_from_pretrained(tmp_path: Path):
    hf = hf_model("mistral")
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "my_mistral"}))
    with pytest.raises(lm.LuminalError, match="'my_mistral' is not registered"):
        lm.models.from_pretrained(tmp_path)

    class MyMistral(Mistral):
        pass

    try:
        assert lm.models.register("my_mistral")(MyMistral) is MyMistral
        assert type(lm.models.from_pretrained(tmp_path)) is MyMistral
    finally:
        lm.models.registry.MODEL_TYPES.pop("my_mistral")
    with pytest.raises(lm.LuminalError, match="from_pretrained"):
        lm.models.register("thing", object())


def test_tokenizer_comes_from_the_folder(tmp_path: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf_model("gemma").save_pretrained(tmp_path)
    assert lm.models.from_pretrained(tmp_path).tokenizer is None
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "hello": 3, "world": 4, "[UNK]": 5}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = lm.models.from_pretrained(tmp_path)
    assert model.tokenizer.encode("hello world again").ids == [3, 4, 5]
    (tmp_path / "tokenizer.json").write_text("{not json")
    cx = lm.Graph()
    with pytest.raises(lm.LuminalError, match="tokenizer.json"):
        lm.models.from_pretrained(tmp_path, cx)
    assert cx.num_nodes == 0


def test_a_bad_checkpoint_leaves_the_graph_as_it_was(tmp_path: Path):
    hf = hf_model("qwen2")
    hf.save_pretrained(tmp_path)
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    state["model.layers.1.self_attn.k_proj.bias"] = np.zeros(5, np.float32)
    good = tmp_path / "model.safetensors"
    original = good.read_bytes()
    save_file(state, str(good))
    cx = lm.Graph()
    with pytest.raises(lm.ShapeError, match="k_proj.bias"):
        lm.models.from_pretrained(tmp_path, cx)
    assert cx.num_nodes == 0
    good.write_bytes(original)
    model = lm.models.from_pretrained(tmp_path, cx)
    ids = np.arange(3, 8, dtype=np.int32)[None]
    logits = model(cx.tensor((1, 5), dtype=lm.int32).set(ids)).retrieve()
    cx.execute()
    np.testing.assert_allclose(logits.numpy(), hf_logits(hf, ids), rtol=RTOL, atol=ATOL)


def _llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    rows = weight.shape[0]
    split = weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def _gguf_name(hf_name: str) -> str:
    parts = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm")
    parts += ("ffn_gate", "ffn_up", "ffn_down")
    names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    names += [f"blk.{i}.{part}.weight" for i in range(2) for part in parts]
    return next(name for name in names if gguf_to_hf_name(name) == hf_name)


def test_from_pretrained_reads_gguf_by_architecture(tmp_path: Path):
    config = tf.LlamaConfig(**{**BASE, "rms_norm_eps": 1e-5})
    hf = tf.LlamaForCausalLM(config).eval()
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for add, value in [
        (writer.add_context_length, 64), (writer.add_embedding_length, 32),
        (writer.add_feed_forward_length, 64), (writer.add_block_count, 2),
        (writer.add_head_count, 4), (writer.add_head_count_kv, 2),
        (writer.add_layer_norm_rms_eps, 1e-5), (writer.add_rope_freq_base, 10000.0),
    ]:  # fmt: skip
        add(value)
    for name, tensor in hf.state_dict().items():
        array = tensor.numpy()
        if ".q_proj." in name or ".k_proj." in name:
            array = _llama_cpp_permute(array, 4 if ".q_proj." in name else 2)
        writer.add_tensor(_gguf_name(name), array)
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file):
        write()
    writer.write_tensors_to_file()
    writer.close()
    model = lm.models.from_pretrained(path)
    assert type(model) is Llama
    ids = np.arange(3, 9, dtype=np.int32)[None]
    logits = model(model.graph.tensor((1, 6), dtype=lm.int32).set(ids)).retrieve()
    model.graph.execute()
    np.testing.assert_allclose(logits.numpy(), hf_logits(hf, ids), rtol=RTOL, atol=ATOL)

    other = tmp_path / "other.gguf"
    write_gguf(other, "gpt2", {"token_embd.weight": np.zeros((4, 4), np.float32)})
    with pytest.raises(lm.LuminalError, match="'gpt2'.*not supported"):
        lm.models.from_pretrained(other)

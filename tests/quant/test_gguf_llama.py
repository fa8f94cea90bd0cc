"""Tiny Llama GGUF files (Q8_0, Q4_0, Q4_K, Q6_K) built with GGUFWriter from seeded
weights: packed luminal against the reference runtime and against transformers run
on the dequantised weights; greedy tokens; load errors; quantizing at load."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

import luminal as lm
from luminal.quant import PackedTensor, QuantEmbedding, QuantLinear, load_gguf_model, read_gguf
from luminal.quant.writing import save_gguf_llama
from luminal.weights.gguf_io import gguf_llama_state_dict
from tests.conftest import write_gguf

CONFIG = {
    "vocab_size": 96,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
PROMPT = np.array([3, 17, 90, 5, 64, 2, 8, 33, 41, 1], np.int32)  # 10 rows: the panel path


def _hf_model(config: dict, state: dict | None = None):  # noqa: ANN202 - torch types
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    if state is not None:
        tensors = {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
        model.load_state_dict(tensors, strict=False)
    return model


def _dequantised_state(path: Path) -> dict[str, np.ndarray]:
    """The file's weights in float32, through the format decoders (bit-exact with gguf)."""
    tensors, metadata = read_gguf(path)
    dense = {}
    for name, tensor in tensors.items():
        if isinstance(tensor, PackedTensor):
            raw = tensor.data.reshape(-1, tensor.format.block_bytes)
            tensor = tensor.format.dequantize_blocks(raw).reshape(tensor.shape)
        dense[name] = np.asarray(tensor)
    return gguf_llama_state_dict(dense, metadata)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    state = {k: v.numpy() for k, v in _hf_model(CONFIG).state_dict().items()}
    folder = tmp_path_factory.mktemp("gguf")
    paths = {}
    for kind in ("q8_0", "q4_0", "q4_k", "q6_k"):
        paths[kind] = folder / f"tiny-{kind}.gguf"
        save_gguf_llama(paths[kind], CONFIG, state, kind)
    return paths


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


COSINES = [("q8_0", 0.999), ("q4_0", 0.99), ("q4_k", 0.99), ("q6_k", 0.99)]


@pytest.mark.parametrize(("kind", "cosine"), COSINES)
def test_packed_llama_matches_reference_and_transformers(
    files: dict[str, Path], kind: str, cosine: float
) -> None:
    import torch

    cx = lm.Graph()
    model = lm.models.from_pretrained(files[kind], cx)
    packed = dict(model.named_modules())
    assert isinstance(packed["model.layers.1.self_attn.q_proj"], QuantLinear)
    assert isinstance(packed["lm_head"], QuantLinear)
    # a Q6_K row of 256 values is 210 bytes, not whole int32 words: that table loads as float
    embedding = lm.nn.Embedding if kind == "q6_k" else QuantEmbedding
    assert type(packed["model.embed_tokens"]) is embedding
    hf = _hf_model(CONFIG, _dequantised_state(files[kind]))
    with torch.no_grad():
        expected = hf(torch.from_numpy(PROMPT[None]).long()).logits.numpy()[0]

    ids = cx.tensor((len(PROMPT),), dtype="int32").set(PROMPT)
    logits = model(ids).retrieve()
    cx.execute()  # the reference runtime
    reference = logits.numpy().copy()
    assert _cosine(reference, expected) >= cosine
    np.testing.assert_allclose(reference, expected, rtol=1e-3, atol=1e-4)

    # decoding through a compiled session: prompt (panel path) then single tokens
    session = model.session()
    steps = [session.prefill(PROMPT[:6])[0]]
    steps += [session.step([int(token)])[0] for token in PROMPT[6:]]
    assert session.compile_count == 1
    np.testing.assert_allclose(np.stack(steps), reference[5:], rtol=1e-3, atol=1e-4)
    assert _cosine(np.stack(steps), expected[5:]) >= cosine


@pytest.mark.parametrize("int8", [False, True])
def test_greedy_tokens_equal_transformers(tmp_path: Path, int8: bool) -> None:
    """8 greedy tokens from a Q4_0 file, luminal's compiled session against transformers
    on the dequantised weights, where the top two logits are apart by a safe margin (the
    head is scaled up so that random weights give decided tokens); also with llama.cpp's
    8-bit activations (prefill on the integer tiles), both under the default check."""
    import torch

    state = {k: v.numpy() for k, v in _hf_model(CONFIG).state_dict().items()}
    state["lm_head.weight"] = state["lm_head.weight"] * 30
    save_gguf_llama(tmp_path / "greedy.gguf", CONFIG, state, "q4_0")
    model = load_gguf_model(tmp_path / "greedy.gguf", quantized_activations=int8)
    hf = _hf_model(CONFIG, _dequantised_state(tmp_path / "greedy.gguf"))
    session = model.session()
    logits = session.prefill(PROMPT)[0]
    tokens, ids = [], list(PROMPT)
    for _ in range(8):
        with torch.no_grad():
            expected = hf(torch.tensor([ids])).logits[0, -1].numpy()
        top = np.sort(expected)[-2:]
        assert top[1] - top[0] > 1e-2  # a margin luminal's float error cannot cross
        assert int(logits.argmax()) == int(expected.argmax())
        tokens.append(int(logits.argmax()))
        ids.append(tokens[-1])
        logits = session.step([tokens[-1]])[0]
    assert len(tokens) == 8


@pytest.mark.parametrize(("kind", "cosine"), COSINES[:2])
def test_quantized_activations_prefill(files: dict[str, Path], kind: str, cosine: float) -> None:
    """load_gguf_model(quantized_activations=True): every packed linear layer rounds its
    activations to 8 bits, on the prompt too (Q8_0/Q4_0's integer prefill tiles): the
    compiled last logits stay close to transformers on the dequantised weights and to the
    reference runtime's (which rounds the same way; a float difference upstream can
    flip a rounding, so not to float tolerance), and differ from the float path's."""
    import torch

    model = load_gguf_model(files[kind], quantized_activations=True)
    linears = [m for _, m in model.named_modules() if isinstance(m, QuantLinear)]
    assert linears and all(m.quantized_activations for m in linears)
    hf = _hf_model(CONFIG, _dequantised_state(files[kind]))
    with torch.no_grad():
        expected = hf(torch.from_numpy(PROMPT[None]).long()).logits.numpy()[0, -1]
    compiled = model.session().prefill(PROMPT)
    reference = model.session(compile=False).prefill(PROMPT)
    assert _cosine(compiled, expected) >= cosine
    assert _cosine(compiled, reference) >= 0.9995  # measured: 1 - 3e-15 (Q8_0), 0.99993
    assert np.abs(compiled - expected).max() > 1e-3 * np.abs(expected).max()  # rounded


def test_load_errors_name_the_problem(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["q8_0"].read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[: len(data) - 1000])
    cx = lm.Graph()
    before = cx.num_nodes
    with pytest.raises(lm.LuminalError, match="truncated|not a readable"):
        load_gguf_model(truncated, cx)

    embedding = {"token_embd.weight": np.zeros((4, 32), np.float32)}
    write_gguf(tmp_path / "qwen.gguf", "qwen2", embedding)
    with pytest.raises(lm.LuminalError, match="architecture 'qwen2'.*supported: llama"):
        load_gguf_model(tmp_path / "qwen.gguf", cx)

    q5 = gguf.quants.quantize(np.ones((4, 32), np.float32), gguf.GGMLQuantizationType.Q5_0)
    write_gguf(
        tmp_path / "q5.gguf",
        "llama",
        {"token_embd.weight": q5},
        raw_dtype=gguf.GGMLQuantizationType.Q5_0,
    )
    with pytest.raises(lm.DTypeError, match="is Q5_0; packed weights support Q8_0, Q4_0, Q4_K"):
        load_gguf_model(tmp_path / "q5.gguf", cx)
    assert cx.num_nodes == before
    model = load_gguf_model(files["q8_0"], cx)  # the graph still loads a good file
    assert isinstance(model.lm_head, QuantLinear)


def test_quantize_at_load(tmp_path: Path) -> None:
    """A float checkpoint folder quantized to Q8_0 as it loads (tied embeddings: the head
    reads the packed table), against the float model it came from."""
    import torch

    config = {**CONFIG, "tie_word_embeddings": True, "num_hidden_layers": 1}
    hf = _hf_model(config)
    hf.save_pretrained(tmp_path)
    model = lm.models.from_pretrained(tmp_path, quantize="q8_0")
    assert isinstance(model.lm_head, QuantLinear)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with torch.no_grad():
        expected = hf(torch.from_numpy(PROMPT[None]).long()).logits.numpy()[0]
    ids = model.graph.tensor((len(PROMPT),), dtype="int32").set(PROMPT)
    logits = model(ids).retrieve()
    model.graph.compile(lm.CPUCompiler())
    model.graph.execute()
    assert _cosine(logits.numpy(), expected) >= 0.999

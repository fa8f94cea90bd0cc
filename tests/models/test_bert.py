"""BERT against transformers' BertModel with copied weights: a small random model on the
reference runtime and compiled for the CPU (padding masks, symbolic batch and seq), weight
loading (prefixes, buffers, pooler, from_pretrained), mean pooling, and the real
all-MiniLM-L6-v2 sentence embeddings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own alias
import transformers

import luminal as lm
from luminal.models import SentenceEncoder, l2_normalize, mean_pooling
from luminal.models.bert import default_minilm_folder
from luminal.weights import save_safetensors
from tests.conftest import assert_matches_torch, uniform

ATOL, RTOL = 1e-4, 1e-3
SMALL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    vocab_size=500,
)


@pytest.fixture(scope="module")
def small() -> transformers.BertModel:
    """A small BertModel with every parameter randomised (norms around 1)."""
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**SMALL)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = (torch.rand(p.shape) * 2 - 1) * 0.2
            p.copy_(1 + noise if "LayerNorm.weight" in name else noise)
    return model


def _batch(rng: np.random.Generator, batch: int, seq: int) -> tuple[np.ndarray, ...]:
    """ids, a right-padding mask with rows of different lengths, token types."""
    ids = rng.integers(1, SMALL["vocab_size"], (batch, seq)).astype(np.int32)
    lengths = rng.integers(1, seq + 1, batch)
    lengths[0] = seq
    mask = (np.arange(seq) < lengths[:, None]).astype(np.int32)
    types = rng.integers(0, 2, (batch, seq)).astype(np.int32)
    return ids * mask, mask, types


def _expected(model: transformers.BertModel, ids, mask=None, types=None) -> torch.Tensor:
    as_long = lambda a: None if a is None else torch.from_numpy(a).long()  # noqa: E731
    with torch.no_grad():
        out = model(
            input_ids=as_long(ids), attention_mask=as_long(mask), token_type_ids=as_long(types)
        )
    return out.last_hidden_state


def _symbolic_model(model: transformers.BertModel) -> tuple:
    cx = lm.Graph()
    bert = lm.models.Bert(cx, model.config.to_dict())
    bert.load_state_dict(model.state_dict())
    ids, mask, types = (cx.tensor(("batch", "seq"), lm.int32) for _ in range(3))
    return cx, (ids, mask, types), bert(ids, mask, types).retrieve()


# ---------------------------------------------------------------- small random model
def test_parameter_names_are_hugging_faces(small):
    bert = lm.models.Bert(lm.Graph(), small.config.to_dict())
    ours = {name: tuple(p.shape) for name, p in bert.named_parameters()}
    theirs = {
        n: tuple(p.shape) for n, p in small.state_dict().items() if not n.startswith("pooler.")
    }
    assert ours == theirs


def test_reference_runtime_matches_with_padding(small, rng):
    cx, inputs, out = _symbolic_model(small)
    for batch, seq in ((3, 9), (2, 4)):  # one graph, two shapes
        arrays = _batch(rng, batch, seq)
        for tensor, array in zip(inputs, arrays, strict=True):
            tensor.set(array)
        cx.execute()
        assert_matches_torch(out.numpy(), _expected(small, *arrays), ATOL, RTOL)


def test_without_mask_and_token_types(small, rng):
    cx = lm.Graph()
    bert = lm.models.Bert(cx, small.config.to_dict())
    bert.load_state_dict(small.state_dict())
    ids = rng.integers(0, SMALL["vocab_size"], (2, 6)).astype(np.int32)
    out = bert(cx.tensor((2, 6), lm.int32).set(ids)).retrieve()
    cx.execute()
    assert_matches_torch(out.numpy(), _expected(small, ids), ATOL, RTOL)


def test_cpu_compiled_matches_with_padding(small, rng):
    cx, inputs, out = _symbolic_model(small)
    for tensor, array in zip(inputs, _batch(rng, 2, 5), strict=True):
        tensor.set(array)
    cx.compile(lm.CPUCompiler())
    for batch, seq in ((4, 11), (1, 3)):
        arrays = _batch(rng, batch, seq)
        for tensor, array in zip(inputs, arrays, strict=True):
            tensor.set(array)
        cx.execute()
        assert_matches_torch(out.numpy(), _expected(small, *arrays), ATOL, RTOL)


# ---------------------------------------------------------------- weights
def test_prefixed_checkpoint_buffers_and_pooler(small, rng):
    state = {f"bert.{n}": p for n, p in small.state_dict().items()}
    state["bert.embeddings.position_ids"] = torch.arange(512)[None]
    state["cls.predictions.bias"] = torch.zeros(SMALL["vocab_size"])  # a task head: ignored
    cx = lm.Graph()
    bert = lm.models.Bert(cx, small.config.to_dict(), add_pooling_layer=True)
    bert.load_state_dict(state)
    ids, mask, _ = _batch(rng, 3, 5)
    hidden = bert(cx.tensor((3, 5), lm.int32).set(ids), cx.tensor((3, 5), lm.int32).set(mask))
    pooled = bert.pool(hidden).retrieve()
    cx.execute()
    with torch.no_grad():
        expected = small(torch.from_numpy(ids).long(), torch.from_numpy(mask).long())
    assert_matches_torch(pooled.numpy(), expected.pooler_output, ATOL, RTOL)


def test_from_pretrained_reads_config_and_safetensors(small, rng, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(small.config.to_dict()))
    save_safetensors(small.state_dict(), tmp_path / "model.safetensors")
    cx = lm.Graph()
    bert = lm.models.Bert.from_pretrained(tmp_path, cx)
    ids, mask, _ = _batch(rng, 2, 4)
    out = bert(cx.tensor((2, 4), lm.int32).set(ids), cx.tensor((2, 4), lm.int32).set(mask))
    out.retrieve()
    cx.execute()
    assert_matches_torch(out.numpy(), _expected(small, ids, mask), ATOL, RTOL)


def test_errors_name_the_problem(small):
    cx = lm.Graph()
    bert = lm.models.Bert(cx, small.config.to_dict())
    with pytest.raises(lm.DTypeError, match="input_ids must be int32"):
        bert(cx.tensor((2, 4)))
    with pytest.raises(lm.ShapeError, match="attention_mask has shape"):
        bert(cx.tensor((2, 4), lm.int32), cx.tensor((2, 5), lm.int32))
    with pytest.raises(lm.ShapeError, match="max_position_embeddings=512"):
        bert(cx.tensor((1, 513), lm.int32))
    state = small.state_dict()
    del state["encoder.layer.1.output.dense.bias"]
    with pytest.raises(lm.ShapeError, match="encoder.layer.1.output.dense.bias"):
        bert.load_state_dict(state)
    with pytest.raises(lm.LuminalError, match="relative_key"):
        lm.models.Bert(cx, {**SMALL, "position_embedding_type": "relative_key"})


# ---------------------------------------------------------------- pooling
def test_mean_pooling_and_normalize_match_torch(rng):
    hidden = uniform(rng, (3, 5, 8))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)
    cx = lm.Graph()
    h, m = cx.tensor((3, 5, 8)).set(hidden), cx.tensor((3, 5), lm.int32).set(mask)
    pooled = mean_pooling(h, m).retrieve()
    unit = l2_normalize(pooled).retrieve()
    plain = mean_pooling(h).retrieve()
    cx.execute()
    weights = torch.from_numpy(mask).float().unsqueeze(-1)
    expected = (torch.from_numpy(hidden) * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    assert_matches_torch(pooled.numpy(), expected, 1e-6)
    assert_matches_torch(unit.numpy(), F.normalize(expected, dim=-1), 1e-6)
    assert_matches_torch(plain.numpy(), torch.from_numpy(hidden).mean(1), 1e-6)


# ---------------------------------------------------------------- real MiniLM-L6
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a white horse on an enclosed ground.",
    "Hi",
]


@pytest.fixture(scope="module")
def minilm():
    """(folder, sentence-transformers' pipeline rebuilt from transformers: its tokenizer,
    BertModel, masked mean pooling, normalisation)."""
    folder = default_minilm_folder()
    model = transformers.BertModel.from_pretrained(str(folder)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    tokens = tokenizer(
        SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="np"
    )
    ids, mask = tokens["input_ids"], tokens["attention_mask"]
    hidden = _expected(model, ids, mask)
    weights = torch.from_numpy(mask).float().unsqueeze(-1)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return folder, F.normalize(pooled, dim=-1).numpy()


@pytest.mark.parametrize("compile", [False, True], ids=["reference", "cpu"])
def test_minilm_sentence_embeddings_match_transformers(minilm, compile):
    folder, expected = minilm
    encoder = SentenceEncoder(folder, compile=compile)
    ours = encoder.encode(SENTENCES, batch_size=3)  # two batches of different lengths
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    cosine = (
        (ours * expected).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(expected, axis=1)
    )
    assert cosine.min() >= 0.9999, cosine
    assert abs(float(ours[0] @ ours[1]) - float(expected[0] @ expected[1])) < 1e-4

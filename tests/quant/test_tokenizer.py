"""The tokenizer embedded in a GGUF file: Hugging Face tokenizers of two kinds (a
SentencePiece-style BPE with byte fallback, as Llama 2 / TinyLlama, and a byte-level
BPE, as Llama 3) are trained on a small corpus, written into tiny Llama GGUF files by
save_gguf_llama as llama.cpp's converter does, and read back by from_pretrained: the
tokenizer encodes and decodes as the original does, and as transformers' own GGUF
tokenizer reads the same file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.quant.tokenizer import gguf_tokenizer
from luminal.quant.writing import save_gguf_llama
from luminal.weights.gguf_io import open_gguf

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Packed weights are read in place; the file is memory-mapped.",
    "Tokens per second depend on the bytes of weights read per token.",
    "llama.cpp stores the vocabulary as metadata, with scores and token types.",
    "Numbers like 1234 and 56.78 appear, as do symbols: (a + b) * c = d!",
] * 20
TEXTS = [
    "The lazy fox reads packed weights.",
    "  leading spaces and  double  spaces",
    "unseen words: zebra, quixotic, Übergröße, 東京, emoji 🦙",
    "per token\nnew lines\n\nand tabs\tinside",
    "1234567 + 89 = ?",
]
CONFIG = {
    "vocab_size": 0,  # set from the tokenizer
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SPECIALS = ["<unk>", "<s>", "</s>"]


def _sentencepiece_style():  # noqa: ANN202 - tokenizers types
    """Llama 2's layout: <unk> <s> </s>, the 256 byte pieces, then the learned ones."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme="first", split=True)
    trained.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=350, special_tokens=SPECIALS)
    )
    spec = json.loads(trained.to_str())["model"]
    pieces = [f"<0x{i:02X}>" for i in range(256)] + list(spec["vocab"])[len(SPECIALS) :]
    vocab = {token: index for index, token in enumerate(SPECIALS + pieces)}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in spec["merges"]]
    tokenizer = Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tokenizer.add_special_tokens(SPECIALS)
    # as Llama's tokenizer.json: no split on spaces at inference, BOS added, "▁" decoded
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    return tokenizer


def _byte_level():  # noqa: ANN202
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|pad|>", "<|begin|>", "<|end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def _write(path: Path, tokenizer) -> Path:  # noqa: ANN001
    config = {**CONFIG, "vocab_size": tokenizer.get_vocab_size()}
    rng = np.random.default_rng(0)
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    shapes |= {"lm_head.weight": (v, h), "model.layers.0.input_layernorm.weight": (h,)}
    shapes |= {f"model.layers.0.self_attn.{n}_proj.weight": (h, h) for n in "qkvo"}
    shapes |= {"model.layers.0.post_attention_layernorm.weight": (h,)}
    shapes |= {f"model.layers.0.mlp.{n}_proj.weight": (f, h) for n in ("gate", "up")}
    shapes |= {"model.layers.0.mlp.down_proj.weight": (h, f)}
    state = {n: (0.02 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}
    save_gguf_llama(path, config, state, "q8_0", tokenizer=tokenizer)
    return path


@pytest.mark.parametrize("build", [_sentencepiece_style, _byte_level])
def test_gguf_tokenizer_equals_the_original(tmp_path: Path, build) -> None:  # noqa: ANN001
    original = build()
    model = lm.models.from_pretrained(_write(tmp_path / "tiny.gguf", original))
    ours = model.tokenizer
    assert ours.get_vocab_size() == original.get_vocab_size()
    for text in TEXTS:
        expected = original.encode(text).ids
        assert ours.encode(text).ids == expected, text
        assert ours.decode(expected) == original.decode(expected)
        assert ours.decode(expected).strip() == text.strip()  # Llama drops the first space
    # special tokens stay whole and are skipped when decoding
    end = "</s>" if build is _sentencepiece_style else "<|end|>"
    ids = ours.encode(f"the end{end}").ids
    assert ids[-1] == ours.token_to_id(end) == original.encode(f"the end{end}").ids[-1]
    assert end not in ours.decode(ids)
    # the model's config carries the file's special token ids
    assert (model.config.bos_token_id, model.config.eos_token_id) == (1, 2)


@pytest.mark.parametrize("build", [_sentencepiece_style, _byte_level])
def test_gguf_tokenizer_equals_transformers_reading_the_file(tmp_path: Path, build) -> None:  # noqa: ANN001
    """transformers' own GGUF tokenizer conversion, on the same file, as an oracle for
    what the metadata means (merges recovered from SentencePiece scores included)."""
    from transformers import AutoTokenizer

    path = _write(tmp_path / "tiny.gguf", build())
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    metadata, _ = open_gguf(path, "test")
    ours = gguf_tokenizer(metadata)
    for text in TEXTS:
        assert ours.encode(text).ids == theirs(text)["input_ids"], text


def test_gguf_tokenizer_absent_or_unsupported(tmp_path: Path) -> None:
    assert gguf_tokenizer({"general.architecture": "llama"}) is None
    metadata = {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["[CLS]", "a"]}
    with pytest.raises(lm.LuminalError, match="'bert' is not supported; supported: llama, gpt2"):
        gguf_tokenizer(metadata)
    metadata = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b", "ab"]}
    with pytest.raises(lm.LuminalError, match=r"merges or one score per token \(3 tokens, no"):
        gguf_tokenizer(metadata)

"""The tokenizer a GGUF file embeds (llama.cpp's `tokenizer.ggml.*` metadata) as a
`tokenizers.Tokenizer`, so a `.gguf` model encodes and decodes text with no other file.

- `llama` (SentencePiece BPE: Llama 1/2, TinyLlama, Mistral): BPE with byte fallback
  over the file's pieces; merges from `tokenizer.ggml.merges`, or recovered from the
  pieces' scores the way transformers converts a SentencePiece model (every split of a
  piece into two pieces, best score first); "▁" for spaces and before the text unless
  `tokenizer.ggml.add_space_prefix` is false.
- `gpt2` (byte-level BPE: Llama 3, Qwen2, ...): the file's merges, text split by the
  regular expression its `tokenizer.ggml.pre` names (GPT-2's when unknown).

Tokens the file marks as control or unknown (`<s>`, `<|eot_id|>`, `<unk>`) are special
tokens, user-defined ones are added whole; `tokenizer.ggml.add_bos_token` /
`add_eos_token` (llama.cpp's defaults: BOS for `llama`, none for `gpt2`) become a
post-processor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from luminal.errors import LuminalError

UNKNOWN, CONTROL, USER_DEFINED = 2, 3, 4  # gguf.TokenType values

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPLITS = {  # tokenizer.ggml.pre -> the regular expression its merges were learned on
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}


def gguf_tokenizer(metadata: Mapping[str, Any], where: str = "gguf_tokenizer") -> Any:
    """A `tokenizers.Tokenizer` from a GGUF file's metadata, or None when it has no
    vocabulary. LuminalError for a tokenizer model other than `llama` and `gpt2`."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    kind = metadata.get("tokenizer.ggml.model")
    builders = {"llama": _sentencepiece, "gpt2": _byte_level}
    if kind not in builders:
        raise LuminalError(
            f"{where}: tokenizer.ggml.model {kind!r} is not supported; supported: "
            f"{', '.join(builders)}"
        )
    tokens = [str(t) for t in tokens]
    tokenizer = builders[kind](metadata, tokens)
    _add_special_tokens(tokenizer, tokens, metadata.get("tokenizer.ggml.token_type") or ())
    _post_processor(tokenizer, metadata, tokens, default_bos=kind == "llama")
    return tokenizer


def _sentencepiece(metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: index for index, token in enumerate(tokens)}
    merges = _merges(metadata, vocab)
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None
    model = models.BPE(vocab, merges, unk_token=unk_token, fuse_unk=True, byte_fallback=True)
    tokenizer = Tokenizer(model)
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    scheme = "first" if prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme=scheme, split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] * prefix)
    return tokenizer


def _merges(metadata: Mapping[str, Any], vocab: dict[str, int]) -> list[tuple[str, str]]:
    """The file's merges, or every split of a piece into two pieces of the vocabulary,
    ranked by the piece's score (then the shorter left part), as transformers does."""
    listed = metadata.get("tokenizer.ggml.merges")
    if listed:
        return [tuple(str(m).split(" ", 1)) for m in listed]  # type: ignore[misc]
    scores = metadata.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(vocab):
        raise LuminalError(
            "gguf_tokenizer: a SentencePiece vocabulary needs tokenizer.ggml.merges or one "
            f"score per token ({len(vocab)} tokens, "
            f"{'no' if scores is None else len(scores)} scores)"
        )
    ranked = []
    for piece, score in zip(vocab, scores, strict=True):
        splits = [
            (piece[:i], piece[i:])
            for i in range(1, len(piece))
            if {piece[:i], piece[i:]} <= vocab.keys()
        ]
        splits.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        ranked += [(left, right, float(score)) for left, right in splits]
    ranked.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in ranked]


def _byte_level(metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    merges = [tuple(str(m).split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges") or ()]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, merges))  # type: ignore[arg-type]
    split = SPLITS.get(str(metadata.get("tokenizer.ggml.pre")))
    if split is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _add_special_tokens(tokenizer: Any, tokens: list[str], types: Sequence[int]) -> None:
    from tokenizers import AddedToken

    kinds = list(zip(tokens, (int(t) for t in types), strict=False))
    control = [
        AddedToken(t, normalized=False, special=True) for t, k in kinds if k in (UNKNOWN, CONTROL)
    ]
    user = [AddedToken(t, normalized=False, special=False) for t, k in kinds if k == USER_DEFINED]
    tokenizer.add_special_tokens(control)
    tokenizer.add_tokens(user)


def _post_processor(
    tokenizer: Any, metadata: Mapping[str, Any], tokens: list[str], default_bos: bool
) -> None:
    from tokenizers import processors

    def special(name: str, default: bool) -> tuple[str, int] | None:
        index = metadata.get(f"tokenizer.ggml.{name}_token_id")
        wanted = bool(metadata.get(f"tokenizer.ggml.add_{name}_token", default))
        if not wanted or not isinstance(index, int) or not 0 <= index < len(tokens):
            return None
        return tokens[index], index

    bos, eos = special("bos", default_bos), special("eos", False)
    if bos is None and eos is None:
        return

    def template(sequence: str, type_id: int) -> list[str]:
        first = [f"{bos[0]}:{type_id}"] if bos else []
        last = [f"{eos[0]}:{type_id}"] if eos else []
        return [*first, f"{sequence}:{type_id}", *last]

    tokenizer.post_processor = processors.TemplateProcessing(
        single=template("$A", 0),
        pair=template("$A", 0) + template("$B", 1),
        special_tokens=[t for t in (bos, eos) if t is not None],
    )

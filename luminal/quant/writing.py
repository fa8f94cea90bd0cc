"""Writing a Llama checkpoint as a GGUF file the way llama.cpp's converter does: llama.cpp
tensor names, q/k rows permuted to its RoPE order, matrices packed in a block format.

Tensors stream to the file one at a time (a value may be a `(shape, make)` pair whose
`make()` is called only when the tensor is written), so a checkpoint larger than memory
can be written; the tests and bench/quantized.py build their files with it. A
`tokenizers.Tokenizer` is written as llama.cpp's converter does (`tokenizer_metadata`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import gguf
import numpy as np

from luminal.errors import LuminalError, ShapeError
from luminal.quant.formats import block_format, quantize

PathLike = str | os.PathLike[str]
Lazy = tuple[tuple[int, ...], Callable[[], np.ndarray]]

_GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_BLOCK = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_name(hf_name: str) -> str:
    """model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight."""
    path, kind = hf_name.rsplit(".", 1)
    if path in _GLOBAL:
        return f"{_GLOBAL[path]}.{kind}"
    parts = path.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _BLOCK:
        return f"blk.{parts[2]}.{_BLOCK[parts[3]]}.{kind}"
    raise ShapeError(f"save_gguf_llama: {hf_name!r} is not a Llama parameter name")


def permute_rope(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (the inverse of gguf_io.unpermute_rope)."""
    rows = weight.shape[0]
    split = weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def save_gguf_llama(
    path: PathLike,
    config: Mapping[str, Any],
    state: Mapping[str, np.ndarray | Lazy],
    kind: str | None = "q8_0",
    kinds: Mapping[str, str | None] | None = None,
    tokenizer: Any = None,
) -> None:
    """Write a Hugging Face Llama `state` (name -> array or (shape, make)) with its
    `config.json` mapping to `path`. 2-D weights whose rows are whole blocks are packed
    in `kind` (None: float32) unless `kinds` names another for that HF name;
    `tokenizer` (a `tokenizers.Tokenizer`) is embedded as GGUF metadata."""
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    writer = gguf.GGUFWriter(path, "llama")
    _metadata(writer, config, heads, kv_heads)
    if tokenizer is not None:
        _tokenizer(writer, tokenizer_metadata(tokenizer, config))
    plan = []
    for name, value in state.items():
        shape = value[0] if isinstance(value, tuple) else value.shape
        chosen = (kinds or {}).get(name, kind) if len(shape) == 2 else None
        fmt = block_format(chosen) if chosen is not None else None
        if fmt is not None and shape[-1] % fmt.block_values:
            fmt = None
        gguf_shape = (*shape[:-1], fmt.row_bytes(shape[-1])) if fmt else tuple(shape)
        nbytes = int(np.prod(gguf_shape)) * (1 if fmt else 4)
        dtype = np.dtype(np.uint8) if fmt else np.dtype(np.float32)
        raw = fmt.ggml_type if fmt else None
        writer.add_tensor_info(llama_cpp_name(name), gguf_shape, dtype, nbytes, raw_dtype=raw)
        plan.append((name, value, fmt))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, value, fmt in plan:
        array = np.asarray(value[1]() if isinstance(value, tuple) else value, np.float32)
        if ".q_proj." in name:
            array = permute_rope(array, heads)
        elif ".k_proj." in name:
            array = permute_rope(array, kv_heads)
        writer.write_tensor_data(quantize(array, fmt) if fmt else np.ascontiguousarray(array))
    writer.close()


def _metadata(writer: gguf.GGUFWriter, config: Mapping[str, Any], heads: int, kv: int) -> None:
    writer.add_context_length(int(config.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_vocab_size(int(config["vocab_size"]))


def tokenizer_metadata(tokenizer: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """llama.cpp's `tokenizer.ggml.*` keys for a Hugging Face BPE `tokenizers.Tokenizer`:
    with byte fallback (SentencePiece style) model "llama", one score per piece (-id:
    a piece made by a later merge ranks lower) and no merges, as converting a
    SentencePiece model gives; byte-level ones model "gpt2" with their merges. Token
    types: control for special added tokens, byte for <0xNN>, unknown for the unk
    token. BOS/EOS ids from `config`."""
    import json

    spec = json.loads(tokenizer.to_str())
    model = spec["model"]
    if model.get("type") != "BPE":
        raise LuminalError(
            f"tokenizer_metadata: a BPE tokenizer is needed, got {model.get('type')}"
        )
    tokens = [""] * tokenizer.get_vocab_size(with_added_tokens=True)
    for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
        tokens[index] = token
    special = {t["content"] for t in spec.get("added_tokens") or () if t.get("special")}
    types = [_token_type(t, t in special, t == model.get("unk_token")) for t in tokens]
    out: dict[str, Any] = {"tokens": tokens, "token_types": types}
    if model.get("byte_fallback"):
        out["model"] = "llama"
        out["scores"] = [
            -float(i) if k == gguf.TokenType.NORMAL else 0.0 for i, k in enumerate(types)
        ]
    else:
        out["model"] = "gpt2"
        out["merges"] = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    if gguf.TokenType.UNKNOWN in types:
        out["unknown_token_id"] = types.index(gguf.TokenType.UNKNOWN)
    for name in ("bos", "eos"):
        if isinstance(config.get(f"{name}_token_id"), int):
            out[f"{name}_token_id"] = config[f"{name}_token_id"]
    return out


def _token_type(token: str, special: bool, unknown: bool) -> int:
    if unknown:
        return gguf.TokenType.UNKNOWN
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return gguf.TokenType.BYTE
    return gguf.TokenType.CONTROL if special else gguf.TokenType.NORMAL


def _tokenizer(writer: gguf.GGUFWriter, metadata: Mapping[str, Any]) -> None:
    writer.add_tokenizer_model(metadata["model"])
    writer.add_token_list(metadata["tokens"])
    writer.add_token_types(metadata["token_types"])
    if "scores" in metadata:
        writer.add_token_scores(metadata["scores"])
    if "merges" in metadata:
        writer.add_token_merges(metadata["merges"])
    if "unknown_token_id" in metadata:
        writer.add_unk_token_id(metadata["unknown_token_id"])
    if "bos_token_id" in metadata:
        writer.add_bos_token_id(metadata["bos_token_id"])
    if "eos_token_id" in metadata:
        writer.add_eos_token_id(metadata["eos_token_id"])

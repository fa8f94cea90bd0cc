"""Reading GGUF (llama.cpp) files: tensors dequantised to float32, plus their metadata.

The `gguf` package parses the container (key/value metadata, tensor table, alignment);
the block formats are decoded here, in numpy, so what a weight means is written down in
this file. GGUF lists dimensions innermost first (ggml's `ne[0]` is the row length), so a
PyTorch `(out_features, in_features)` weight is stored as `[in, out]`: we reverse them,
and the tensors come out in PyTorch's shapes.

For Llama checkpoints, `gguf_llama_state_dict` renames llama.cpp tensors to Hugging Face
names and undoes the q/k row permutation llama.cpp's converter applies for its RoPE
layout; `gguf_llama_config` turns the metadata into a `config.json`-style dict.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.weights.safetensors_io import as_float_dtype

PathLike = str | os.PathLike[str]

QK = 32  # values per block in Q8_0 and Q4_0
Q8_0_BLOCK_BYTES = 2 + QK  # float16 scale d, then 32 int8 values
Q4_0_BLOCK_BYTES = 2 + QK // 2  # float16 scale d, then 16 bytes of 4-bit values


# ---------------------------------------------------------------- block formats


def _blocks(raw: np.ndarray, block_bytes: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Split raw bytes into (float32 scales of shape (n, 1), payload bytes (n, k))."""
    if raw.size % block_bytes:
        raise ShapeError(
            f"{what}: {raw.size} bytes is not a whole number of {block_bytes}-byte blocks"
        )
    blocks = raw.reshape(-1, block_bytes)
    scales = blocks[:, :2].view("<f2").astype(np.float32)
    return scales, blocks[:, 2:]


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    """Q8_0: per block of 32, x = d * q with d a float16 and q 32 int8 values."""
    scales, payload = _blocks(raw, Q8_0_BLOCK_BYTES, "Q8_0")
    values = payload.view(np.int8).astype(np.float32)
    values *= scales
    return values.reshape(-1)


def dequantize_q4_0(raw: np.ndarray) -> np.ndarray:
    """Q4_0: per block of 32, x = d * (q - 8) with q unsigned 4-bit values packed two to a
    byte: the 16 low nibbles are elements 0..15, the 16 high nibbles elements 16..31."""
    scales, payload = _blocks(raw, Q4_0_BLOCK_BYTES, "Q4_0")
    values = np.empty((payload.shape[0], 2, QK // 2), np.float32)
    np.bitwise_and(payload, 0x0F, out=values[:, 0], casting="unsafe")
    np.right_shift(payload, 4, out=values[:, 1], casting="unsafe")
    values -= 8.0
    values *= scales[:, :, None]
    return values.reshape(-1)


def _plain(storage: str) -> Callable[[np.ndarray], np.ndarray]:
    return lambda raw: raw.view(storage)


def _bfloat16(raw: np.ndarray) -> np.ndarray:
    # bfloat16 is the top half of a float32
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


# ggml type -> (decoder from raw bytes to a flat array, floating?, values and bytes per block)
DECODERS: dict[GGMLQuantizationType, tuple[Callable[[np.ndarray], np.ndarray], bool, int, int]] = {
    GGMLQuantizationType.F32: (_plain("<f4"), True, 1, 4),
    GGMLQuantizationType.F16: (_plain("<f2"), True, 1, 2),
    GGMLQuantizationType.BF16: (_bfloat16, True, 1, 2),
    GGMLQuantizationType.F64: (_plain("<f8"), True, 1, 8),
    GGMLQuantizationType.Q8_0: (dequantize_q8_0, True, QK, Q8_0_BLOCK_BYTES),
    GGMLQuantizationType.Q4_0: (dequantize_q4_0, True, QK, Q4_0_BLOCK_BYTES),
    GGMLQuantizationType.I8: (_plain("i1"), False, 1, 1),
    GGMLQuantizationType.I16: (_plain("<i2"), False, 1, 2),
    GGMLQuantizationType.I32: (_plain("<i4"), False, 1, 4),
    GGMLQuantizationType.I64: (_plain("<i8"), False, 1, 8),
}


def dequantize(
    raw: np.ndarray, ggml_type: GGMLQuantizationType | int, shape: tuple[int, ...]
) -> np.ndarray:
    """Decode the raw little-endian bytes of one tensor of `ggml_type` into `shape`
    (PyTorch order) as a new array. Float formats come out float32 (float64 stays)."""
    ggml_type = GGMLQuantizationType(ggml_type)
    if ggml_type not in DECODERS:
        raise DTypeError(
            f"GGUF tensor type {ggml_type.name} is not supported; supported: "
            f"{', '.join(t.name for t in DECODERS)}"
        )
    decode, floating, block_values, block_bytes = DECODERS[ggml_type]
    count = int(np.prod(shape, dtype=np.int64))
    row = shape[-1] if shape else 1
    expected = count // block_values * block_bytes
    if row % block_values or raw.size != expected:
        raise ShapeError(
            f"GGUF {ggml_type.name} tensor of shape {shape}: rows must be whole blocks of "
            f"{block_values} values ({block_bytes} bytes each), so {expected} bytes, "
            f"got {raw.size} bytes"
        )
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    flat = decode(raw)
    if floating and flat.dtype != np.float64:
        flat = flat.astype(np.float32, copy=False)
    if np.may_share_memory(flat, raw):  # own the memory: the source may be a memory map
        flat = flat.copy()
    return flat.reshape(shape)


# ---------------------------------------------------------------- reading a file


def load_gguf(path: PathLike, dtype: Any = np.float32) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors by llama.cpp name in PyTorch shapes, metadata by key) of a GGUF file.

    Floating and quantised tensors are dequantised and returned as `dtype` (float32 by
    default); integer tensors keep their type. Metadata values are Python scalars, strings
    or lists (token tables); float32 scalars are given as the shortest decimal that
    rounds to the same float32 (`1e-05`, not `9.999999747378752e-06`).
    """
    target = as_float_dtype(dtype, "load_gguf")
    metadata, raw_tensors = open_gguf(path, "load_gguf")
    tensors: dict[str, np.ndarray] = {}
    for tensor in raw_tensors:
        try:
            array = dequantize(tensor.data, tensor.kind, tensor.shape)
        except (DTypeError, ShapeError) as error:
            raise type(error)(
                f"load_gguf: tensor {tensor.name!r} in {str(Path(path))!r}: {error}"
            ) from None
        if array.dtype.kind == "f" and array.dtype != target:
            array = array.astype(target)
        tensors[tensor.name] = array
    return tensors, metadata


class RawTensor(NamedTuple):
    """One tensor of a GGUF file, not yet decoded: `data` is a view of the memory map."""

    name: str
    kind: GGMLQuantizationType
    shape: tuple[int, ...]  # PyTorch order (GGUF lists dims innermost first)
    data: np.ndarray


def open_gguf(path: PathLike, caller: str) -> tuple[dict[str, Any], Iterator[RawTensor]]:
    """(metadata by key, the tensors in file order) of a GGUF file, memory-mapped, once
    the header is readable and little-endian and the tensor table is laid out as
    llama.cpp requires; a tensor past the end of the file raises when it is reached.
    Both loaders read through here; errors start with `caller` and the path."""
    path = Path(path)
    where = f"{caller}: {str(path)!r}"
    if not path.is_file():
        raise LuminalError(f"{caller}: no such file {str(path)!r}")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as error:  # a hostile header trips the reader in many ways
        raise LuminalError(
            f"{where} is not a readable GGUF file: {type(error).__name__}: {error}"
        ) from None
    if reader.byte_order != "I":
        raise LuminalError(f"{where} is big-endian; only little-endian is read")
    check_layout(reader, where)
    metadata = {
        name: field_value(field)
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")  # the reader's own version / count pseudo-fields
    }
    return metadata, _raw_tensors(reader, where)


def _raw_tensors(reader: gguf.GGUFReader, where: str) -> Iterator[RawTensor]:
    for info in reader.tensors:
        raw = reader.data[info.data_offset : info.data_offset + info.n_bytes]
        if raw.size != info.n_bytes:
            raise LuminalError(
                f"{where} is truncated: tensor {info.name!r} needs bytes {info.data_offset}.."
                f"{info.data_offset + info.n_bytes} of {reader.data.size}"
            )
        shape = tuple(int(d) for d in reversed(info.shape.tolist()))
        yield RawTensor(info.name, GGMLQuantizationType(info.tensor_type), shape, raw)


GGML_MAX_DIMS = 4


def check_layout(reader: gguf.GGUFReader, where: str) -> None:
    """The tensor table as llama.cpp requires it: every name non-empty, at most 4 dims,
    each tensor's data starting exactly where the previous one's ends rounded up to the
    alignment (so none is misaligned, overlapping or out of order), and no bytes after
    the last tensor beyond its padding. A wrong tensor count breaks one of these: too
    many reads tensor data as a table entry (a phantom tensor), too few reads the
    rest of the table as data."""
    align = int(reader.alignment)
    expected = 0
    for index, info in enumerate(reader.tensors):
        what = f"{where}: tensor {index} of {len(reader.tensors)} ({info.name!r})"
        if not info.name:
            raise LuminalError(f"{what} has an empty name; is the tensor count wrong?")
        if len(info.shape) > GGML_MAX_DIMS:
            raise LuminalError(f"{what} has {len(info.shape)} dims; GGUF allows at most 4")
        offset = info.data_offset - reader.data_offset
        if offset % align:
            raise LuminalError(f"{what} starts at offset {offset}, not a multiple of {align}")
        if offset != expected:
            raise LuminalError(
                f"{what} starts at offset {offset}, but the previous tensor ends at "
                f"{expected} (tensors must follow each other without gaps or overlaps)"
            )
        expected = -(-(offset + info.n_bytes) // align) * align
    extra = reader.data.size - reader.data_offset - expected
    if reader.tensors and extra > 0:
        raise LuminalError(
            f"{where}: {extra} bytes after the last tensor belong to no tensor; is the "
            f"tensor count ({len(reader.tensors)}) wrong?"
        )


_SCALARS: dict[GGUFValueType, Callable[[Any], Any]] = {
    **{t: int for t in (GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16)},
    **{t: int for t in (GGUFValueType.INT16, GGUFValueType.UINT32, GGUFValueType.INT32)},
    **{t: int for t in (GGUFValueType.UINT64, GGUFValueType.INT64)},
    GGUFValueType.FLOAT32: lambda v: float(str(np.float32(v))),
    GGUFValueType.FLOAT64: float,
    GGUFValueType.BOOL: bool,
}


def field_value(field: Any) -> Any:
    """The Python value of one `gguf.ReaderField` (scalar, str, or list)."""
    if not field.types:
        return None
    kind = field.types[0]
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[-1]).decode("utf-8", errors="replace")
    if kind != GGUFValueType.ARRAY:
        return _SCALARS[kind](field.parts[-1][0])
    items = [field.parts[index] for index in field.data]
    item_kind = field.types[-1]
    if len(field.types) > 2:  # arrays of arrays: keep the raw parts
        return [np.asarray(item).tolist() for item in items]
    if item_kind == GGUFValueType.STRING:
        return [bytes(item).decode("utf-8", errors="replace") for item in items]
    if not items:
        return []
    values = np.concatenate([np.asarray(item).reshape(-1) for item in items])
    if item_kind == GGUFValueType.FLOAT32:
        return values.astype(np.float64).tolist()
    return values.tolist()


# ---------------------------------------------------------------- llama.cpp -> Hugging Face

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_GLOBAL = re.compile(r"(\w+)\.(weight|bias)")
# tensors llama.cpp stores that Hugging Face computes instead (Llama 3 RoPE frequencies)
DERIVED_TENSORS = frozenset({"rope_freqs.weight"})


def gguf_to_hf_name(name: str) -> str:
    """The Hugging Face Llama name of a llama.cpp tensor name, e.g.
    blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight."""
    if match := _BLOCK.fullmatch(name):
        layer, part, kind = match.groups()
        if part in _BLOCK_NAMES:
            return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    elif (match := _GLOBAL.fullmatch(name)) and match.group(1) in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[match.group(1)]}.{match.group(2)}"
    raise LuminalError(
        f"gguf_to_hf_name: {name!r} is not a llama.cpp Llama tensor name; known: "
        f"{', '.join(_GLOBAL_NAMES)} and blk.N.{{{', '.join(_BLOCK_NAMES)}}} (.weight/.bias)"
    )


def unpermute_rope(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k permutation: its converter reorders each head's rows from
    Hugging Face's "rotate halves" RoPE layout to interleaved pairs, via
    `w.reshape(n_head, 2, rows // n_head // 2, *rest).swapaxes(1, 2)`. Works for weights
    (rows, in) and biases (rows,)."""
    rows = weight.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        raise ShapeError(
            f"unpermute_rope: {rows} rows do not split into {n_head} heads of an even size"
        )
    split = weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def _meta(metadata: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in metadata:
        raise LuminalError(f"{what}: GGUF metadata has no {key!r}")
    return metadata[key]


def _architecture(metadata: Mapping[str, Any], what: str) -> str:
    arch = _meta(metadata, "general.architecture", what)
    if arch != "llama":
        raise LuminalError(
            f"{what}: architecture {arch!r} is not supported; expected 'llama' (other "
            "architectures use other tensor layouts)"
        )
    return arch


def gguf_llama_state_dict(
    tensors: Mapping[str, np.ndarray], metadata: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """A Hugging Face Llama state dict from `load_gguf`'s output: renamed, with q/k rows
    un-permuted using the head counts in the metadata. Tensors Hugging Face derives
    (`rope_freqs.weight`) are dropped; a missing `output.weight` means tied embeddings."""
    what = "gguf_llama_state_dict"
    arch = _architecture(metadata, what)
    n_head = int(_meta(metadata, f"{arch}.attention.head_count", what))
    n_head_kv = int(metadata.get(f"{arch}.attention.head_count_kv", n_head))
    out = {}
    for name, array in tensors.items():
        if name in DERIVED_TENSORS:
            continue
        hf_name = gguf_to_hf_name(name)
        if ".self_attn.q_proj." in hf_name:
            array = unpermute_rope(array, n_head)
        elif ".self_attn.k_proj." in hf_name:
            array = unpermute_rope(array, n_head_kv)
        out[hf_name] = array
    return out


def gguf_llama_config(
    metadata: Mapping[str, Any], tensors: Mapping[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """A Hugging Face `config.json`-style dict for a llama GGUF file (feed it to
    `LlamaConfig.from_dict`). `tensors` supplies what the metadata may leave out: the
    vocabulary size and whether the output layer is tied to the embedding."""
    what = "gguf_llama_config"
    arch = _architecture(metadata, what)
    n_head = int(_meta(metadata, f"{arch}.attention.head_count", what))
    hidden = int(_meta(metadata, f"{arch}.embedding_length", what))
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_meta(metadata, f"{arch}.feed_forward_length", what)),
        "num_hidden_layers": int(_meta(metadata, f"{arch}.block_count", what)),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(metadata.get(f"{arch}.attention.head_count_kv", n_head)),
        "hidden_act": "silu",
    }
    optional = {
        "max_position_embeddings": f"{arch}.context_length",
        "rms_norm_eps": f"{arch}.attention.layer_norm_rms_epsilon",
        "rope_theta": f"{arch}.rope.freq_base",
        "head_dim": f"{arch}.attention.key_length",
        "bos_token_id": "tokenizer.ggml.bos_token_id",
        "eos_token_id": "tokenizer.ggml.eos_token_id",
    }
    for hf_key, gguf_key in optional.items():
        if gguf_key in metadata:
            config[hf_key] = metadata[gguf_key]
    vocab = metadata.get(f"{arch}.vocab_size")
    if vocab is None and "tokenizer.ggml.tokens" in metadata:
        vocab = len(metadata["tokenizer.ggml.tokens"])
    if vocab is None and tensors is not None and "token_embd.weight" in tensors:
        vocab = tensors["token_embd.weight"].shape[0]
    if vocab is None:
        raise LuminalError(
            f"{what}: cannot tell the vocabulary size: no {arch}.vocab_size, no "
            "tokenizer.ggml.tokens, and no token_embd.weight tensor given"
        )
    config["vocab_size"] = int(vocab)
    if tensors is not None:
        config["tie_word_embeddings"] = "output.weight" not in tensors
    return config

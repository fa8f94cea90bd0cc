"""Models with packed weights: from a GGUF file used in place, or quantized at load.

`load_gguf_model(path, cx)` memory-maps the file: packed tensors stay the file's bytes
(resident memory ~ file size), float32 tensors are views of it too. Which modules are
packed is a `layout` (module path -> format); `quantized_class(Llama, layout)` is the
model class that builds those modules as QuantLinear / QuantEmbedding. The layout is
part of the class, so `model.session()` (which rebuilds `type(model)(graph, config)`)
gets the same packed modules and shares the same bytes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType

from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.graph import Graph
from luminal.nn.layers import Embedding, Linear
from luminal.nn.module import Module, build_then_load, skip_init
from luminal.quant.formats import SUPPORTED, BlockFormat, block_format, quantize
from luminal.quant.modules import QuantEmbedding, QuantLinear
from luminal.quant.tokenizer import gguf_tokenizer
from luminal.weights.gguf_io import (
    DERIVED_TENSORS,
    dequantize,
    gguf_to_hf_name,
    open_gguf,
    unpermute_rope,
)

PathLike = str | os.PathLike[str]
FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


@dataclass(frozen=True)
class PackedTensor:
    """A tensor kept packed: logical (rows, values) and its bytes (rows, row_bytes)."""

    format: BlockFormat
    shape: tuple[int, ...]
    data: np.ndarray


@dataclass(frozen=True, order=True)
class PackedModule:
    """One packed module of a layout: its path (`model.layers.0.mlp.up_proj`), format,
    llama.cpp RoPE row order (heads) if any, the embedding a tied head reads, and
    whether a linear layer rounds its activations to 8 bits when decoding."""

    path: str
    format: str
    rope_heads: int | None = None
    tied_to: str | None = None
    quantized_activations: bool = False


# ---------------------------------------------------------------- reading a file
def read_gguf(path: PathLike) -> tuple[dict[str, np.ndarray | PackedTensor], dict[str, Any]]:
    """(tensors by llama.cpp name, metadata) of a GGUF file, memory-mapped: packed
    formats as PackedTensor, float32 as read-only views of the file, float16/bfloat16
    converted to float32. Other types raise DTypeError naming the supported ones."""
    where = f"read_gguf: {str(Path(path))!r}"
    metadata, raw_tensors = open_gguf(path, "read_gguf")
    tensors = {t.name: _tensor(t.data, t.kind, t.shape, t.name, where) for t in raw_tensors}
    return tensors, metadata


def _tensor(
    raw: np.ndarray, kind: GGMLQuantizationType, shape: tuple[int, ...], name: str, where: str
) -> np.ndarray | PackedTensor:
    if kind == GGMLQuantizationType.F32 and raw.size == 4 * int(np.prod(shape)):
        return raw.view("<f4").reshape(shape)  # in place
    if kind in FLOAT_TYPES:
        return dequantize(raw, kind, shape)
    try:
        fmt = block_format(int(kind))
    except DTypeError:
        raise DTypeError(
            f"{where}: tensor {name!r} is {kind.name}; packed weights support {SUPPORTED} "
            "(and F32/F16/BF16)"
        ) from None
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    if len(shape) > 2 or rows * fmt.row_bytes(shape[-1]) != raw.size:
        raise ShapeError(
            f"{where}: tensor {name!r} ({fmt.name}, shape {shape}) must be a matrix of whole "
            f"blocks: {raw.size} bytes"
        )
    return PackedTensor(fmt, (rows, shape[-1]), raw.reshape(rows, -1))


# ---------------------------------------------------------------- model classes
@functools.cache
def quantized_class(base: type, layout: tuple[PackedModule, ...]) -> type:
    """`base` (a model class taking (graph, config)) whose modules at the layout's paths
    are packed. Built without initial weights (a loader fills them)."""

    def __init__(self: Any, graph: Graph, config: Any) -> None:
        with skip_init():
            base.__init__(self, graph, config)
        swap_modules(self, layout)

    name = f"Quantized{base.__name__}"
    namespace = {"__init__": __init__, "packed_layout": layout, "__qualname__": name}
    return type(name, (base,), namespace)


def swap_modules(model: Module, layout: tuple[PackedModule, ...]) -> None:
    """Replace each layout path's Linear / Embedding by its packed twin, removing the
    old float parameters from the graph (nothing reads them yet). Tied heads go last,
    after the table they share."""
    for entry in sorted(layout, key=lambda e: e.tied_to is not None):
        parent, attribute = _parent(model, entry.path)
        old = getattr(parent, attribute, None)
        if entry.tied_to is not None:
            table = _parent(model, entry.tied_to)[0]._modules[entry.tied_to.rsplit(".", 1)[-1]]
            new: Module = QuantLinear(
                model.graph,
                table.embedding_dim,
                table.num_embeddings,
                entry.format,
                weight=table.weight,
                quantized_activations=entry.quantized_activations,
            )
        elif isinstance(old, Embedding):
            new = QuantEmbedding(model.graph, old.num_embeddings, old.embedding_dim, entry.format)
        elif isinstance(old, Linear):
            new = QuantLinear(
                model.graph,
                old.in_features,
                old.out_features,
                entry.format,
                bias=old.bias is not None,
                rope_heads=entry.rope_heads,
                quantized_activations=entry.quantized_activations,
            )
        else:
            raise LuminalError(
                f"{type(model).__name__}: {entry.path!r} is not a Linear or Embedding"
            )
        if isinstance(old, Module):
            for _, tensor in old.named_parameters():
                model.graph.remove(tensor.node_id)
        setattr(parent, attribute, new)


def _parent(model: Module, path: str) -> tuple[Module, str]:
    *parts, attribute = path.split(".")
    module = model
    for part in parts:
        module = module._modules[part]
    return module, attribute


def packable(cls: type, config: Any) -> dict[str, type]:
    """Paths of the Linear and Embedding modules of `cls(config)` (built in a scratch
    graph without weights) -> their class."""
    with skip_init():
        skeleton = cls(Graph(), config)
    return {
        path: type(module)
        for path, module in skeleton.named_modules()
        if type(module) in (Linear, Embedding)
    }


def _packs(modules: Mapping[str, type], path: str, tensor: PackedTensor) -> bool:
    """Whether the module at `path` takes `tensor` packed (an embedding needs its rows
    in whole int32 words; otherwise it is dequantised at load)."""
    module_type = modules.get(path)
    if module_type is Embedding:
        return tensor.format.storage(tensor.shape[-1])[0] == "int32"
    return module_type is Linear


# ---------------------------------------------------------------- GGUF models
def gguf_architectures() -> dict[str, tuple[Any, Any, Any]]:
    """The registry's GGUF table: architecture -> (class, config converter, ...)."""
    from luminal.models.registry import GGUF_ARCHITECTURES

    return GGUF_ARCHITECTURES


def load_gguf_model(
    path: PathLike, graph: Graph | None = None, quantized_activations: bool = False
) -> Any:
    """The model a GGUF file holds, its Q8_0/Q4_0/Q4_K/Q6_K matrices kept packed in the
    memory-mapped file. `quantized_activations`: decode (and, for Q8_0/Q4_0, prefill)
    with llama.cpp's 8-bit activations and integer dot products (a step function of the
    activations: CPUCompiler's check runs those matmuls on the compiled program's own
    inputs, `QuantMatmul.step_function`).
    The file's embedded vocabulary, if any, becomes `model.tokenizer`
    (`luminal.quant.tokenizer`). On any error the graph is left as it was."""
    graph = Graph() if graph is None else graph
    tensors, metadata = read_gguf(path)
    arch = metadata.get("general.architecture")
    classes = gguf_architectures()
    if arch not in classes:
        raise LuminalError(
            f"load_gguf_model: GGUF architecture {arch!r} of {str(path)!r} is not supported; "
            f"supported: {', '.join(sorted(classes))}"
        )
    cls, to_config = classes[arch][:2]
    config = cls.config_class.from_dict(to_config(metadata, tensors))
    heads = {
        "q_proj": config.num_attention_heads,
        "k_proj": config.num_key_value_heads,
    }
    modules = packable(cls, config)
    layout, state = [], {}
    for name, tensor in tensors.items():
        if name in DERIVED_TENSORS:
            continue
        hf_name = gguf_to_hf_name(name)
        path_, kind = hf_name.rsplit(".", 1)
        rope = heads.get(path_.rsplit(".", 1)[-1])
        if isinstance(tensor, PackedTensor) and kind == "weight" and _packs(modules, path_, tensor):
            fmt = tensor.format.name.lower()
            layout.append(PackedModule(path_, fmt, rope, None, quantized_activations))
            state[hf_name] = tensor.format.as_storage(tensor.data, tensor.shape[-1])
            continue
        if isinstance(tensor, PackedTensor):  # a vector or a tensor no layer packs
            tensor = tensor.format.dequantize_blocks(
                tensor.data.reshape(-1, tensor.format.block_bytes)
            ).reshape(tensor.shape if len(tensor.shape) > 1 else tensor.shape[-1:])
        state[hf_name] = unpermute_rope(tensor, rope) if rope is not None else tensor
    if config.tie_word_embeddings:
        embed = next((e for e in layout if e.path.endswith("embed_tokens")), None)
        if embed is not None:
            tied = PackedModule("lm_head", embed.format, None, embed.path, quantized_activations)
            layout.append(tied)
            state["lm_head.weight"] = state[f"{embed.path}.weight"]
    tokenizer = gguf_tokenizer(metadata, f"load_gguf_model: {str(path)!r}")
    model_cls = quantized_class(cls, tuple(sorted(layout))) if layout else cls
    model = build_then_load(graph, lambda: model_cls(graph, config), lambda: state)
    model.tokenizer = tokenizer
    return model


# ---------------------------------------------------------------- quantizing at load
def quantize_state(
    cls: type, config: Any, state: Mapping[str, np.ndarray], kind: str
) -> tuple[tuple[PackedModule, ...], dict[str, np.ndarray]]:
    """(layout, new state) packing every Linear and Embedding weight whose rows are
    whole blocks of `kind`; a tied head shares the packed embedding."""
    fmt = block_format(kind)
    layout, out = [], dict(state)
    for path, module_type in packable(cls, config).items():
        name = f"{path}.weight"
        weight = state.get(name)
        if weight is None or weight.ndim != 2 or weight.shape[1] % fmt.block_values:
            continue
        if module_type is Embedding and fmt.storage(weight.shape[1])[0] != "int32":
            continue
        layout.append(PackedModule(path, fmt.name.lower()))
        out[name] = fmt.as_storage(quantize(weight, fmt), weight.shape[1])
    tied = getattr(config, "tie_word_embeddings", False)
    embed = next((e for e in layout if e.path.endswith("embed_tokens")), None)
    if tied and embed is not None:
        layout.append(PackedModule("lm_head", embed.format, tied_to=embed.path))
        out["lm_head.weight"] = out[f"{embed.path}.weight"]
    return tuple(sorted(layout)), out


def quantize_pretrained(cls: type, folder: PathLike, graph: Graph, kind: str) -> Any:
    """`cls.from_pretrained(folder, graph)` with its Linear/Embedding weights quantized
    to `kind` ("q8_0", "q4_0", ...) as they load."""
    from luminal.models.decoder import load_tokenizer
    from luminal.weights import load_hf_config, load_safetensors

    config = cls.config_class.from_dict(load_hf_config(folder))
    raw = load_safetensors(folder, dtype=np.float32)
    layout, packed = quantize_state(cls, config, raw, kind)
    model_cls = quantized_class(cls, layout)
    model = build_then_load(graph, lambda: model_cls(graph, config), lambda: packed)
    model.tokenizer = load_tokenizer(folder)
    return model

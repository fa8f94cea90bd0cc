"""Which class loads which checkpoint: one visible table, extended with `register`.

`from_pretrained(path, cx)` reads a Hugging Face folder's `config.json` and looks its
`model_type` up in `MODEL_TYPES`; a `.gguf` file is looked up by its
`general.architecture` in `GGUF_ARCHITECTURES`. The built-in rows are written out here
(not filled in by importing model modules), so what loads what never depends on import
order; `register("my_type", MyModel)` (or `@register("my_type")` on the class) adds or
replaces a row at run time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from luminal.errors import LuminalError
from luminal.graph import Graph
from luminal.models.bert import Bert
from luminal.models.gemma import Gemma
from luminal.models.gpt2 import GPT2
from luminal.models.llama import Llama
from luminal.models.mistral import Mistral
from luminal.models.phi3 import Phi3
from luminal.models.qwen2 import Qwen2
from luminal.models.whisper import Whisper
from luminal.weights import gguf_llama_config, gguf_llama_state_dict, load_hf_config

PathLike = str | os.PathLike[str]
T = TypeVar("T")

# config.json "model_type" -> a class with from_pretrained(folder, graph, ...)
MODEL_TYPES: dict[str, Any] = {
    "llama": Llama,
    "mistral": Mistral,
    "qwen2": Qwen2,
    "phi3": Phi3,
    "gemma": Gemma,
    "gpt2": GPT2,
    "bert": Bert,
    "whisper": Whisper,
}

# GGUF "general.architecture" -> (class, config from metadata, state dict from tensors);
# luminal.quant.load_gguf_model uses the class and the config converter
GGUF_ARCHITECTURES: dict[str, tuple[Any, Callable[..., Any], Callable[..., Any]]] = {
    "llama": (Llama, gguf_llama_config, gguf_llama_state_dict),
}


def register(model_type: str, cls: Any = None) -> Any:
    """Map `model_type` (a config.json value) to `cls`, whose `from_pretrained(folder,
    graph, **options)` builds it; a later registration replaces an earlier one. Without
    `cls`, a class decorator. Returns `cls`."""
    if not isinstance(model_type, str) or not model_type:
        raise LuminalError(f"register: model_type must be a non-empty str, got {model_type!r}")

    def add(target: T) -> T:
        if not callable(getattr(target, "from_pretrained", None)):
            raise LuminalError(
                f"register({model_type!r}): {target!r} has no from_pretrained(folder, graph)"
            )
        MODEL_TYPES[model_type] = target
        return target

    return add if cls is None else add(cls)


def model_class(model_type: str) -> Any:
    """The class registered for `model_type` (LuminalError listing the known ones)."""
    cls = MODEL_TYPES.get(model_type)
    if cls is None:
        raise LuminalError(
            f"from_pretrained: model_type {model_type!r} is not registered; known: "
            f"{sorted(MODEL_TYPES)} (add one with lm.models.register)"
        )
    return cls


def from_pretrained(path: PathLike, cx: Graph | None = None, **options: Any) -> Any:
    """The model a Hugging Face folder (by `config.json`'s `model_type`) or a `.gguf`
    file (by `general.architecture`) holds, built into `cx` (a new Graph when None) by
    its class's `from_pretrained`; `options` go to that method. On any error the graph
    is left as it was."""
    graph = Graph() if cx is None else cx
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _from_gguf(path, graph)
    config = load_hf_config(path)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise LuminalError(
            f"from_pretrained: {str(path)!r} config.json has no model_type string "
            f"(got {model_type!r}); known: {sorted(MODEL_TYPES)}"
        )
    quantize = options.pop("quantize", None)
    if quantize is not None and options:
        raise LuminalError(
            f"from_pretrained: quantize={quantize!r} takes no other options, got {sorted(options)}"
        )
    if quantize is not None:  # Linear/Embedding weights packed as they load
        from luminal.quant import quantize_pretrained

        return quantize_pretrained(model_class(model_type), path, graph, quantize)
    return model_class(model_type).from_pretrained(path, graph, **options)


def _from_gguf(path: Path, graph: Graph) -> Any:
    """A GGUF file, memory-mapped, its Q8_0/Q4_0/Q4_K/Q6_K matrices kept packed
    (luminal.quant), built by its architecture's row of GGUF_ARCHITECTURES."""
    from luminal.quant import load_gguf_model

    return load_gguf_model(path, graph)


__all__ = [
    "GGUF_ARCHITECTURES",
    "MODEL_TYPES",
    "from_pretrained",
    "model_class",
    "register",
]

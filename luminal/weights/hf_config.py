"""Hugging Face `config.json` files and the typed configs luminal's models are built from.

`LlamaConfig.from_dict` / `BertConfig.from_dict` take a `config.json` mapping (as written by
transformers 4.x or 5.x) and keep the fields a model needs. The sizes that define the
architecture are required (a config without them is almost surely not the model's);
everything else defaults to what transformers uses. Unknown keys are ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from luminal.errors import LuminalError, ShapeError

PathLike = str | os.PathLike[str]


def load_hf_config(source: PathLike) -> dict[str, Any]:
    """The `config.json` of a model folder (or the JSON file given directly) as a dict."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise LuminalError(f"load_hf_config: no such file {str(path)!r}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LuminalError(f"load_hf_config: {str(path)!r} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise LuminalError(
            f"load_hf_config: {str(path)!r} holds a {type(config).__name__}, not an object"
        )
    return config


def _check_type(cls_name: str, name: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    """Values from JSON: ints for sizes (2.0 is not a size), int or float for floats."""
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool):
        value = None  # bool is an int subclass; refuse it below
    if not isinstance(value, kind):
        expected = (
            kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        )
        raise LuminalError(f"{cls_name}.from_dict: {name!r} must be {expected}, got {value!r}")
    return value


# the sizes every transformer config must state (the rest has transformers' defaults)
TRANSFORMER_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)


class _FromDict:
    """from_dict/to_dict shared by the config dataclasses."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> Self:
        if not isinstance(config, Mapping):
            raise LuminalError(
                f"{cls.__name__}.from_dict: expected a mapping, got {type(config).__name__}"
            )
        config = cls._normalise(dict(config))
        missing = [name for name in cls.REQUIRED if config.get(name) is None]
        if missing:
            raise LuminalError(
                f"{cls.__name__}.from_dict: config lacks required field(s) {missing}; "
                f"required: {list(cls.REQUIRED)}"
            )
        values = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            name, hint = field.name, field.type
            if name not in config or (config[name] is None and name not in cls.REQUIRED):
                continue  # keep the default
            values[name] = _check_type(cls.__name__, name, config[name], _KINDS[str(hint)])
        instance = cls(**values)
        instance.validate()
        return instance

    @classmethod
    def _normalise(cls, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def validate(self) -> None:
        """Sizes positive and bounded, floats finite: a config is read before anything is
        built, so an absurd one (10**7 layers, a negative eps, a NaN theta) fails here
        with its field named instead of hanging, exhausting memory or making NaNs."""
        name = type(self).__name__
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if str(field.type) == "int" and field.name.endswith(_POSITIVE):
                limit = MAX_LAYERS if field.name == "num_hidden_layers" else MAX_SIZE
                if value <= 0:
                    raise ShapeError(f"{name}: {field.name} must be positive, got {value}")
                if value > limit:
                    raise ShapeError(f"{name}: {field.name} must be at most {limit}, got {value}")
            if str(field.type) == "float":
                positive = field.name in _POSITIVE_FLOATS
                if not math.isfinite(value) or value < 0 or (positive and value == 0):
                    need = "positive" if positive else "non-negative"
                    raise LuminalError(
                        f"{name}: {field.name} must be a finite {need} number, got {value}"
                    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


_POSITIVE = ("_size", "_layers", "_heads", "_embeddings", "head_dim")
_POSITIVE_FLOATS = frozenset({"rope_theta"})  # eps fields may be 0, never negative
MAX_SIZE = 2**31 - 1  # token ids are int32 and BLAS sizes C ints
MAX_LAYERS = 1024  # 8x the deepest published LLM; each layer is graph nodes to build
_KINDS: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "int | None": (int, type(None)),
    "dict[str, Any] | None": (dict, type(None)),
    "int | list[int] | None": (int, list, type(None)),
    "list[str] | None": (list, type(None)),
}


# the numbers each supported rope_scaling type reads
_ROPE_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


@dataclasses.dataclass(frozen=True)
class LlamaConfig(_FromDict):
    """What a Llama model needs from its config (defaults: transformers' LlamaConfig).
    `num_key_value_heads` defaults to `num_attention_heads` and `head_dim` to
    `hidden_size // num_attention_heads`."""

    REQUIRED: ClassVar[tuple[str, ...]] = TRANSFORMER_SIZES

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    pad_token_id: int | None = None
    bos_token_id: int | list[int] | None = 1
    eos_token_id: int | list[int] | None = 2

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None and self.num_attention_heads > 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    @classmethod
    def _normalise(cls, config: dict[str, Any]) -> dict[str, Any]:
        # transformers 5 nests rope_theta (and the scaling) in "rope_parameters"
        rope = config.get("rope_parameters")
        if isinstance(rope, Mapping):
            if "rope_theta" in rope and "rope_theta" not in config:
                config["rope_theta"] = rope["rope_theta"]
            if rope.get("rope_type", "default") != "default" and config.get("rope_scaling") is None:
                config["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
        return config

    def validate(self) -> None:
        super().validate()
        heads, kv_heads = self.num_attention_heads, self.num_key_value_heads
        assert kv_heads is not None
        if kv_heads <= 0 or heads % kv_heads:
            raise ShapeError(
                f"LlamaConfig: num_attention_heads={heads} is not a multiple of "
                f"num_key_value_heads={kv_heads}"
            )
        if self.head_dim is None or self.head_dim <= 0 or self.head_dim % 2:
            raise ShapeError(
                f"LlamaConfig: head_dim={self.head_dim} must be even for rotary embeddings"
            )
        self._check_rope_scaling()

    def _check_rope_scaling(self) -> None:
        """The numbers a scaled RoPE reads must be there, finite and positive (a missing
        factor would surface as a KeyError while building, a zero one as NaN logits)."""
        scaling = self.rope_scaling
        if scaling is None:
            return
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        for key in _ROPE_KEYS.get(kind, ()):
            value = scaling.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise LuminalError(
                    f"LlamaConfig: rope_scaling {kind!r} needs {key!r}, got {value!r}"
                )
            if not math.isfinite(value) or value <= 0:
                raise LuminalError(
                    f"LlamaConfig: rope_scaling {key!r} must be finite and positive, got {value}"
                )
        if kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
            raise LuminalError(
                "LlamaConfig: rope_scaling 'high_freq_factor' must exceed 'low_freq_factor', "
                f"got {scaling['high_freq_factor']} <= {scaling['low_freq_factor']}"
            )


@dataclasses.dataclass(frozen=True)
class BertConfig(_FromDict):
    """What a BERT encoder needs from its config (defaults: transformers' BertConfig)."""

    REQUIRED: ClassVar[tuple[str, ...]] = TRANSFORMER_SIZES

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    position_embedding_type: str = "absolute"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        super().validate()
        if self.hidden_size % self.num_attention_heads:
            raise ShapeError(
                f"BertConfig: hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )

"""Hugging Face configs: agreement with transformers' own config classes, defaults, errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import transformers

import luminal as lm
from luminal.weights import BertConfig, LlamaConfig, load_hf_config

SIZES = {
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
}


def _rope_theta(config: Any) -> float:
    """transformers 5 keeps rope_theta in rope_parameters, 4.x as an attribute."""
    params = getattr(config, "rope_parameters", None)
    return params["rope_theta"] if params else config.rope_theta


def _assert_llama_matches(ours: LlamaConfig, theirs: transformers.LlamaConfig) -> None:
    for field in dataclasses.fields(LlamaConfig):
        if field.name == "rope_theta":
            assert ours.rope_theta == _rope_theta(theirs)
        elif field.name == "rope_scaling":
            continue  # compared by the tests that set it
        else:
            assert getattr(ours, field.name) == getattr(theirs, field.name), field.name


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"num_key_value_heads": 2, "rope_theta": 500000.0, "tie_word_embeddings": True},
        {"head_dim": 16, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096},
        {"attention_bias": True, "mlp_bias": True, "pad_token_id": 0, "eos_token_id": [2, 7]},
    ],
)
def test_llama_from_transformers(extra: dict[str, Any]) -> None:
    theirs = transformers.LlamaConfig(**SIZES, **extra)
    ours = LlamaConfig.from_dict(theirs.to_dict())
    _assert_llama_matches(ours, theirs)
    assert LlamaConfig.from_dict(ours.to_dict()) == ours  # our own round trip
    # and through a config.json file, as from_pretrained reads it
    assert LlamaConfig.from_dict(json.loads(theirs.to_json_string())) == ours


def test_llama_defaults_are_transformers_defaults() -> None:
    ours = LlamaConfig.from_dict(SIZES)
    _assert_llama_matches(ours, transformers.LlamaConfig(**SIZES))
    assert ours.num_key_value_heads == 8 and ours.head_dim == 8


def test_llama_rope_forms() -> None:
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    # a transformers 4.x config.json: top-level rope_theta and rope_scaling
    v4 = LlamaConfig.from_dict({**SIZES, "rope_theta": 500000.0, "rope_scaling": scaling})
    assert v4.rope_theta == 500000.0 and v4.rope_scaling == scaling
    # transformers 5: both nested in rope_parameters
    theirs = transformers.LlamaConfig(**SIZES, rope_parameters={**scaling, "rope_theta": 5e5})
    v5 = LlamaConfig.from_dict(theirs.to_dict())
    assert v5.rope_theta == 500000.0
    assert v5.rope_scaling is not None and v5.rope_scaling["factor"] == 8.0
    assert v5.rope_scaling["rope_type"] == "llama3"


@pytest.mark.parametrize(
    "extra",
    [{}, {"type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "hidden_act": "relu"}],
)
def test_bert_from_transformers(extra: dict[str, Any]) -> None:
    theirs = transformers.BertConfig(**SIZES, **extra)
    ours = BertConfig.from_dict(theirs.to_dict())
    for field in dataclasses.fields(BertConfig):
        if hasattr(theirs, field.name):  # transformers 5 dropped position_embedding_type
            assert getattr(ours, field.name) == getattr(theirs, field.name), field.name
    assert ours.head_dim == 8
    assert BertConfig.from_dict(ours.to_dict()) == ours


def test_bert_defaults_are_transformers_defaults() -> None:
    ours, theirs = BertConfig.from_dict(SIZES), transformers.BertConfig(**SIZES)
    for field in dataclasses.fields(BertConfig):
        if hasattr(theirs, field.name):
            assert getattr(ours, field.name) == getattr(theirs, field.name), field.name
    assert ours.position_embedding_type == "absolute"


@pytest.mark.parametrize("cls", [LlamaConfig, BertConfig])
def test_missing_required_fields(cls: type) -> None:
    partial = {k: v for k, v in SIZES.items() if k not in ("hidden_size", "vocab_size")}
    with pytest.raises(
        lm.LuminalError, match=r"lacks required field\(s\) \['vocab_size', 'hidden_size'\]"
    ):
        cls.from_dict(partial)
    with pytest.raises(lm.LuminalError, match="lacks required"):
        cls.from_dict({**SIZES, "hidden_size": None})
    with pytest.raises(lm.LuminalError, match="expected a mapping"):
        cls.from_dict([("vocab_size", 3)])


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"hidden_size": 64.0}, "'hidden_size' must be int, got 64.0"),
        ({"num_hidden_layers": True}, "'num_hidden_layers' must be int"),
        ({"rms_norm_eps": "small"}, "'rms_norm_eps' must be float"),
        ({"tie_word_embeddings": 1}, "'tie_word_embeddings' must be bool"),
        ({"hidden_act": None, "vocab_size": "10"}, "'vocab_size' must be int"),
    ],
)
def test_wrong_types(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(lm.LuminalError, match=message):
        LlamaConfig.from_dict({**SIZES, **bad})


def test_inconsistent_sizes() -> None:
    with pytest.raises(lm.ShapeError, match="num_attention_heads=8 is not a multiple of num_key"):
        LlamaConfig.from_dict({**SIZES, "num_key_value_heads": 3})
    with pytest.raises(lm.ShapeError, match="head_dim=9 must be even"):
        LlamaConfig.from_dict({**SIZES, "head_dim": 9})
    with pytest.raises(lm.ShapeError, match="hidden_size must be positive, got 0"):
        LlamaConfig.from_dict({**SIZES, "hidden_size": 0})
    with pytest.raises(lm.ShapeError, match="hidden_size=60 is not a multiple"):
        BertConfig.from_dict({**SIZES, "hidden_size": 60})
    ints = LlamaConfig.from_dict({**SIZES, "rms_norm_eps": 0})  # an int where a float goes
    assert ints.rms_norm_eps == 0.0 and isinstance(ints.rms_norm_eps, float)


def test_load_hf_config(tmp_path: Path) -> None:
    config = transformers.LlamaConfig(**SIZES)
    config.save_pretrained(tmp_path)
    loaded = load_hf_config(tmp_path)
    assert loaded == load_hf_config(tmp_path / "config.json")
    assert loaded["model_type"] == "llama" and loaded["hidden_size"] == 64
    _assert_llama_matches(LlamaConfig.from_dict(loaded), config)
    with pytest.raises(lm.LuminalError, match="no such file"):
        load_hf_config(tmp_path / "sub")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(lm.LuminalError, match="not valid JSON"):
        load_hf_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(lm.LuminalError, match="holds a list"):
        load_hf_config(tmp_path / "list.json")


def test_real_minilm_config() -> None:
    from luminal.models.bert import default_minilm_folder

    config = BertConfig.from_dict(load_hf_config(default_minilm_folder()))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (
        384,
        6,
        12,
    )
    assert config.layer_norm_eps == 1e-12 and config.vocab_size == 30522

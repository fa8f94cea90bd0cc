"""Weights load all or nothing and bounded (issue 11, item 6): load_state_dict checks every
entry before changing a parameter; from_pretrained validates the config first, draws no
random initial weights and leaves the graph as it was when anything fails; a sharded index
cannot name files outside its folder; safetensors and GGUF tables are validated (overlaps,
offsets, alignment, tensor counts). After each error, the next load or run is checked."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.layers as layers
from luminal.models import Bert, Llama
from luminal.weights import load_gguf, load_safetensors, save_safetensors

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 50,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
IDS = np.array([[3, 7, 1, 49, 0]], np.int32)


def _logits(model: Llama) -> np.ndarray:
    ids = model.graph.tensor((1, 5), dtype=lm.int32).set(IDS)
    logits = model(ids).retrieve()
    model.graph.execute()
    return logits.numpy()


@pytest.fixture(scope="module")
def source() -> Llama:
    lm.nn.manual_seed(5)
    return Llama(lm.Graph(), TINY_LLAMA)


@pytest.fixture
def folder(tmp_path: Path, source: Llama) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    save_safetensors(source.state_dict(), tmp_path / "model.safetensors")
    return tmp_path


# ---------------------------------------------------------------- load_state_dict
def _torch_linear_reference(state: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    net.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in state.items()})
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


BAD_LAST_ENTRIES = {
    "complex": (np.ones(2, np.complex64), lm.DTypeError, "complex64"),
    "string": (np.array(["a", "b"]), lm.DTypeError, "<U1"),
    "object": (np.array([None, 1.0], dtype=object), lm.DTypeError, "object"),
    "ragged": ([[1.0], [1.0, 2.0]], lm.DTypeError, "not an array"),
    "float64 beyond float32": (np.array([1.0, 1e300]), lm.DTypeError, "outside its range"),
    "wrong shape": (np.ones(3, np.float32), lm.ShapeError, r"has shape \(2,\), got \(3,\)"),
}


@pytest.mark.parametrize("case", list(BAD_LAST_ENTRIES))
def test_load_state_dict_checks_every_entry_before_setting_any(case):
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    model = lm.nn.Sequential(cx, lm.nn.Linear(cx, 3, 4), lm.nn.ReLU(), lm.nn.Linear(cx, 4, 2))
    x = cx.tensor((5, 3)).set(rng.standard_normal((5, 3)).astype(np.float32))
    y = model(x).retrieve()
    good = {k: rng.standard_normal(v.shape) for k, v in model.state_dict().items()}  # float64
    before = model.state_dict()
    value, error, match = BAD_LAST_ENTRIES[case]
    with pytest.raises(error, match=match):
        model.load_state_dict({**good, "2.bias": value})  # the last entry is the bad one
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    model.load_state_dict(good)
    cx.execute()
    np.testing.assert_allclose(
        y.numpy(), _torch_linear_reference(good, x.numpy()), rtol=1e-5, atol=1e-6
    )


def test_load_state_dict_names_and_int_ranges():
    cx = lm.Graph()
    model = lm.nn.Linear(cx, 2, 2)
    counts = model.param("counts", (2,), np.array([1, 2], np.int32), dtype=lm.int32)
    state = model.state_dict()
    with pytest.raises(lm.ShapeError, match=r"missing \['bias'\], unexpected \['extra'\]"):
        model.load_state_dict({"weight": state["weight"], "counts": state["counts"], "extra": 1})
    with pytest.raises(lm.DTypeError, match=r"outside \[-2147483648, 2147483647\]"):
        model.load_state_dict({**state, "counts": np.array([1, 2**32 + 7], np.int64)})
    with pytest.raises(lm.DTypeError, match="is int32, got data of dtype float32"):
        model.load_state_dict({**state, "counts": np.array([1.5, 2], np.float32)})
    np.testing.assert_array_equal(model.state_dict()["counts"], [1, 2])
    model.load_state_dict({**state, "counts": np.array([7, 2**31 - 1], np.int64)})
    out = (counts + 0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), [7, 2**31 - 1])


# ---------------------------------------------------------------- from_pretrained
def test_from_pretrained_draws_no_random_weights(folder, source, monkeypatch):
    def refuse(*args: object) -> np.ndarray:
        raise AssertionError("from_pretrained initialised a parameter randomly")

    monkeypatch.setattr(layers, "uniform_init", refuse)
    monkeypatch.setattr(layers, "_normal_init", refuse)
    with pytest.raises(AssertionError, match="randomly"):  # the patch is on the path
        Llama(lm.Graph(), TINY_LLAMA)
    model = Llama.from_pretrained(folder)
    loaded = model.state_dict()
    assert loaded.keys() == source.state_dict().keys()
    monkeypatch.undo()
    reference = Llama(lm.Graph(), TINY_LLAMA)
    reference.load_state_dict(source.state_dict())
    np.testing.assert_allclose(_logits(model), _logits(reference), rtol=1e-5, atol=1e-5)


def test_from_pretrained_failure_leaves_the_graph_as_it_was(folder, source):
    cx = lm.Graph()
    x = cx.tensor((2,)).set(np.array([1.0, 2.0], np.float32))
    y = (x * 3).retrieve()
    before = (cx.num_nodes, dict(cx.input_data))
    state = source.state_dict()
    del state["model.layers.1.mlp.up_proj.weight"]
    save_safetensors(state, folder / "model.safetensors")
    with pytest.raises(lm.ShapeError, match="missing.*up_proj"):
        Llama.from_pretrained(folder, cx)
    assert (cx.num_nodes, cx.input_data.keys()) == (before[0], before[1].keys())
    cx.execute()
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])
    save_safetensors(source.state_dict(), folder / "model.safetensors")
    model = Llama.from_pretrained(folder, cx)
    assert cx.num_nodes == before[0] + len(source.state_dict())
    reference = Llama(lm.Graph(), TINY_LLAMA)
    reference.load_state_dict(source.state_dict())
    np.testing.assert_allclose(_logits(model), _logits(reference), rtol=1e-5, atol=1e-5)


ABSURD = {
    "10**7 layers": (
        {"num_hidden_layers": 10**7},
        lm.ShapeError,
        "num_hidden_layers must be at most",
    ),
    "1e7 layers": ({"num_hidden_layers": 1e7}, lm.LuminalError, "'num_hidden_layers' must be int"),
    "huge vocab": ({"vocab_size": 2**40}, lm.ShapeError, "vocab_size must be at most"),
    "negative eps": ({"rms_norm_eps": -1e-6}, lm.LuminalError, "rms_norm_eps must be a finite"),
    "NaN theta": (
        {"rope_theta": math.nan},
        lm.LuminalError,
        "rope_theta must be a finite positive",
    ),
    "inf theta": (
        {"rope_theta": math.inf},
        lm.LuminalError,
        "rope_theta must be a finite positive",
    ),
    "zero theta": ({"rope_theta": 0}, lm.LuminalError, "rope_theta must be a finite positive"),
    "scaling without factor": (
        {"rope_scaling": {"rope_type": "linear"}},
        lm.LuminalError,
        "needs 'factor'",
    ),
    "llama3 high <= low": (
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 64,
            }
        },
        lm.LuminalError,
        "must exceed",
    ),
}


@pytest.mark.parametrize("case", list(ABSURD))
def test_absurd_configs_are_rejected_before_anything_is_built(folder, case):
    change, error, match = ABSURD[case]
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **change}))  # NaN: "NaN"
    cx = lm.Graph()
    with pytest.raises(error, match=match):
        Llama.from_pretrained(folder, cx)
    assert cx.num_nodes == 0
    with pytest.raises(error, match=match):
        Llama(cx, {**TINY_LLAMA, **change})
    assert cx.num_nodes == 0
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    model = Llama.from_pretrained(folder, cx)
    assert np.isfinite(_logits(model)).all()


def test_bert_configs_are_checked_too():
    sizes = {
        "vocab_size": 30,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    cx = lm.Graph()
    with pytest.raises(lm.LuminalError, match="layer_norm_eps must be a finite non-negative"):
        Bert(cx, {**sizes, "layer_norm_eps": float("nan")})
    with pytest.raises(lm.ShapeError, match="num_hidden_layers must be at most 1024"):
        Bert(cx, {**sizes, "num_hidden_layers": 5000})
    assert cx.num_nodes == 0
    assert len(Bert(cx, sizes).state_dict()) > 0


# ---------------------------------------------------------------- sharded checkpoints
def _sharded(folder: Path, source: Llama, shard_name: str) -> None:
    state = source.state_dict()
    names = sorted(state)
    save_safetensors({n: state[n] for n in names[:5]}, folder / "model-1.safetensors")
    save_safetensors({n: state[n] for n in names[5:]}, folder / "model-2.safetensors")
    (folder / "model.safetensors").unlink(missing_ok=True)
    weight_map = {n: "model-1.safetensors" for n in names[:5]}
    weight_map.update({n: shard_name for n in names[5:]})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


@pytest.mark.parametrize(
    "shard_name",
    ["../outside/model-2.safetensors", "/etc/passwd", "sub/../../x.safetensors", "..\\x"],
)
def test_an_index_cannot_name_files_outside_its_folder(folder, source, shard_name):
    outside = folder.parent / "outside"
    outside.mkdir(exist_ok=True)
    save_safetensors(source.state_dict(), outside / "model-2.safetensors")
    _sharded(folder, source, shard_name)
    cx = lm.Graph()
    with pytest.raises(lm.LuminalError, match="outside its folder"):
        Llama.from_pretrained(folder, cx)
    assert cx.num_nodes == 0
    _sharded(folder, source, "model-2.safetensors")
    model = Llama.from_pretrained(folder, cx)
    for name, array in source.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], array, err_msg=name)


# ---------------------------------------------------------------- safetensors tables
def _write_raw(path: Path, header: dict, data: bytes) -> None:
    """A safetensors file written by hand, so that its header can say anything."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"data_offsets": [0, 16]}, "overlap"),
        ({"data_offsets": [8, 24]}, "overlap"),
        ({"shape": [2**32, 2**32]}, "needs"),  # the element count must not wrap
        ({"shape": [2.0, 2]}, "not a list of non-negative ints"),
        ({"shape": [-4]}, "not a list of non-negative ints"),
        ({"data_offsets": [16, -1]}, "not a pair of non-negative ints"),
        ({"data_offsets": [16]}, "not a pair of non-negative ints"),
    ],
    ids=["same range", "overlap", "huge shape", "float dim", "negative dim", "negative", "one"],
)
def test_safetensors_tables_are_validated(tmp_path, change, match):
    path = tmp_path / "t.safetensors"
    a, b = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32) + 10
    entry = {"dtype": "F32", "shape": [4]}
    header = {"a": {**entry, "data_offsets": [0, 16]}, "b": {**entry, "data_offsets": [16, 32]}}
    data = a.tobytes() + b.tobytes()
    _write_raw(path, {**header, "b": {**header["b"], **change}}, data)
    with pytest.raises(lm.LuminalError, match=match):
        load_safetensors(path)
    _write_raw(path, header, data)
    loaded = load_safetensors(path)
    np.testing.assert_array_equal(loaded["a"], a)
    np.testing.assert_array_equal(loaded["b"], b)


# ---------------------------------------------------------------- GGUF tables
def _gguf(path: Path) -> tuple[dict[str, np.ndarray], int]:
    """Two float32 tensors; returns them and the byte position of the second's offset."""
    tensors = {"a": np.arange(16, dtype=np.float32), "b": np.arange(8, dtype=np.float32) + 100}
    writer = gguf.GGUFWriter(path, "llama")
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    field = gguf.GGUFReader(path).tensors[1].field
    return tensors, field.offset + sum(int(part.nbytes) for part in field.parts[:-1])


@pytest.mark.parametrize(
    ("at", "value", "match"),
    [
        ("count", 3, "empty name; is the tensor count wrong"),  # a phantom tensor ''
        ("count", 1, "belong to no tensor; is the tensor count"),  # 'a' would read the table
        ("count", 2**40, "not a readable GGUF"),
        ("offset", 4, "not a multiple of 32"),  # misaligned: garbage values
        ("offset", 0, "without gaps or overlaps"),  # 'b' aliases 'a'
        ("offset", 32, "without gaps or overlaps"),  # inside 'a', aligned
        ("offset", 2**40, "not a readable GGUF|truncated"),
    ],
)
def test_gguf_tensor_tables_are_validated(tmp_path, at, value, match):
    path = tmp_path / "t.gguf"
    tensors, offset_at = _gguf(path)
    good = path.read_bytes()
    raw = bytearray(good)
    position = 8 if at == "count" else offset_at  # the count follows magic and version
    raw[position : position + 8] = struct.pack("<Q", value)
    path.write_bytes(bytes(raw))
    with pytest.raises(lm.LuminalError, match=match):
        load_gguf(path)
    path.write_bytes(good)
    loaded, _ = load_gguf(path)
    assert loaded.keys() == tensors.keys()
    for name, array in tensors.items():
        np.testing.assert_array_equal(loaded[name], array)

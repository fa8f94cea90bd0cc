"""safetensors: round trips, agreement with the safetensors library, sharded folders, errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import luminal as lm
from luminal.weights import (
    load_safetensors,
    read_safetensors_header,
    safetensors_files,
    save_safetensors,
)
from luminal.weights.safetensors_io import read_raw_tensor


def _sample(rng: np.random.Generator) -> dict[str, np.ndarray]:
    floats = rng.standard_normal((3, 5)).astype(np.float32)
    return {
        "f32": floats,
        "f16": rng.standard_normal((4, 2, 3)).astype(np.float16),
        "bf16": floats.astype(ml_dtypes.bfloat16),
        "f64": rng.standard_normal(7),
        "i32": rng.integers(-1000, 1000, (2, 6), dtype=np.int32),
        "i64": rng.integers(-(2**40), 2**40, (5,), dtype=np.int64),
        "u8": rng.integers(0, 255, (9,), dtype=np.uint8),
        "bool": rng.random((2, 2)) > 0.5,
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
    }


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)


def test_round_trip_keeps_dtypes(tmp_path: Path, rng: np.random.Generator) -> None:
    tensors = _sample(rng)
    path = tmp_path / "model.safetensors"
    save_safetensors(tensors, path, metadata={"format": "np"})
    loaded = load_safetensors(path)
    _assert_same(loaded, tensors)
    assert loaded["bf16"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert all(array.flags.writeable for array in loaded.values())
    # the safetensors library reads what we wrote, and we read what it reads
    _assert_same(safetensors.numpy.load_file(str(path)), tensors)
    header, _ = read_safetensors_header(path)
    assert header["__metadata__"] == {"format": "np"}
    assert header["bf16"]["dtype"] == "BF16" and header["f16"]["dtype"] == "F16"


def test_matches_library_on_files_it_wrote(tmp_path: Path, rng: np.random.Generator) -> None:
    tensors = {k: v for k, v in _sample(rng).items() if k != "bf16"}
    path = tmp_path / "lib.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    _assert_same(load_safetensors(path), safetensors.numpy.load_file(str(path)))


def test_torch_bfloat16_and_float8(tmp_path: Path) -> None:
    torch.manual_seed(0)
    weights = {
        "bf16": torch.randn(4, 8).bfloat16(),
        "f8": torch.randn(3, 3).to(torch.float8_e4m3fn),
        "f8b": torch.randn(5).to(torch.float8_e5m2),
        "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
    }
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(weights, str(path))
    kept = load_safetensors(path)
    assert kept["bf16"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert kept["f8"].dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    as_f32 = load_safetensors(path, dtype=np.float32)
    for name in ("bf16", "f8", "f8b"):
        np.testing.assert_array_equal(as_f32[name], weights[name].float().numpy())
        assert as_f32[name].dtype == np.float32
        np.testing.assert_array_equal(kept[name].astype(np.float32), as_f32[name])
    assert as_f32["i32"].dtype == np.int32  # dtype= converts floating tensors only
    # the raw-bytes reader (the fallback for dtypes numpy does not know) agrees
    for name in weights:
        np.testing.assert_array_equal(read_raw_tensor(path, name), kept[name])


@pytest.mark.parametrize("dtype", [np.float32, "float32", lm.float32, lm.float16, "bfloat16"])
def test_dtype_argument(tmp_path: Path, rng: np.random.Generator, dtype: object) -> None:
    tensors = _sample(rng)
    save_safetensors(tensors, tmp_path / "m.safetensors")
    loaded = load_safetensors(tmp_path / "m.safetensors", dtype=dtype)
    target = np.dtype(dtype.numpy if isinstance(dtype, lm.DType) else dtype)
    for name, array in tensors.items():
        floating = array.dtype.kind == "f" or name == "bf16"
        assert loaded[name].dtype == (target if floating else array.dtype), name
        np.testing.assert_array_equal(loaded[name], array.astype(loaded[name].dtype))


def test_torch_tensors_save_unchanged(tmp_path: Path) -> None:
    torch.manual_seed(1)
    state = torch.nn.Linear(6, 3).state_dict()
    state["half"] = torch.randn(2, 2).bfloat16()
    path = tmp_path / "linear.safetensors"
    save_safetensors(state, path)
    theirs = safetensors.torch.load_file(str(path))
    for name, tensor in state.items():
        assert torch.equal(theirs[name], tensor), name


def _write_shards(folder: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    tensors = _sample(rng)
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:4],
        "model-00002-of-00002.safetensors": names[4:],
    }
    for file, shard_names in shards.items():
        save_safetensors({n: tensors[n] for n in shard_names}, folder / file)
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {n: file for file, shard_names in shards.items() for n in shard_names},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return tensors


def test_sharded_folder_with_index(tmp_path: Path, rng: np.random.Generator) -> None:
    tensors = _write_shards(tmp_path, rng)
    # a consolidated copy beside the shards (as in some Hub repos) is not read
    save_safetensors(
        {"f32": tensors["f32"], "extra": tensors["f32"]}, tmp_path / "consolidated.safetensors"
    )
    _assert_same(load_safetensors(tmp_path), tensors)
    _assert_same(load_safetensors(tmp_path / "model.safetensors.index.json"), tensors)
    assert [f.name for f in safetensors_files(tmp_path)] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    reference = {}
    for file in safetensors_files(tmp_path):
        reference.update(safetensors.numpy.load_file(str(file)))
    _assert_same(load_safetensors(tmp_path), reference)


def test_folder_without_index_and_list_of_files(tmp_path: Path, rng: np.random.Generator) -> None:
    tensors = _write_shards(tmp_path, rng)
    (tmp_path / "model.safetensors.index.json").unlink()
    _assert_same(load_safetensors(tmp_path), tensors)
    files = sorted(tmp_path.glob("*.safetensors"))
    _assert_same(load_safetensors([str(f) for f in files]), tensors)


def test_sharding_errors(tmp_path: Path, rng: np.random.Generator) -> None:
    _write_shards(tmp_path, rng)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["lost.weight"] = "model-00001-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(lm.LuminalError, match="lost.weight"):
        load_safetensors(tmp_path)
    index["weight_map"]["lost.weight"] = "model-00003-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(lm.LuminalError, match="shards that do not exist"):
        load_safetensors(tmp_path)
    index_path.write_text("{}")
    with pytest.raises(lm.LuminalError, match="weight_map"):
        load_safetensors(tmp_path)
    index_path.unlink()
    save_safetensors({"f32": np.zeros(2, np.float32)}, tmp_path / "dup.safetensors")
    with pytest.raises(lm.LuminalError, match="'f32' is in both"):
        load_safetensors(tmp_path)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(lm.LuminalError, match="no such file"):
        load_safetensors(tmp_path / "absent.safetensors")
    with pytest.raises(lm.LuminalError, match="no \\*.safetensors"):
        load_safetensors(tmp_path)
    with pytest.raises(lm.LuminalError, match="empty list"):
        load_safetensors([])
    (tmp_path / "short.safetensors").write_bytes(b"abc")
    with pytest.raises(lm.LuminalError, match="not a safetensors file"):
        load_safetensors(tmp_path / "short.safetensors")
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(lm.LuminalError, match="header length"):
        load_safetensors(tmp_path / "huge.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(lm.LuminalError, match="not JSON"):
        load_safetensors(tmp_path / "junk.safetensors")


def _handmade(path: Path, entry: dict, data: bytes) -> None:
    header = json.dumps({"t": entry}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_header_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    _handmade(path, {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}, b"\0")
    with pytest.raises(lm.DTypeError, match="'t'.*'F4'"):
        load_safetensors(path)
    _handmade(path, {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, b"\0" * 8)
    with pytest.raises(lm.ShapeError, match=r"shape \(3,\) of F32 needs 12 bytes"):
        load_safetensors(path)
    _handmade(path, {"dtype": "F32", "shape": [2]}, b"\0" * 8)
    with pytest.raises(lm.LuminalError, match="data_offsets"):
        load_safetensors(path)
    _handmade(path, {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, b"\0" * 8)
    assert load_safetensors(path)["t"].tolist() == [0.0, 0.0]


def test_argument_errors(tmp_path: Path) -> None:
    save_safetensors({"a": np.zeros(2, np.float32)}, tmp_path / "a.safetensors")
    with pytest.raises(lm.DTypeError, match="not a floating type"):
        load_safetensors(tmp_path / "a.safetensors", dtype=np.int32)
    with pytest.raises(lm.DTypeError, match="is not a dtype"):
        load_safetensors(tmp_path / "a.safetensors", dtype="floaty")
    with pytest.raises(lm.DTypeError, match="'c'.*complex128"):
        save_safetensors({"c": np.zeros(2, np.complex128)}, tmp_path / "c.safetensors")
    with pytest.raises(lm.DTypeError, match="object"):
        save_safetensors({"o": np.array([None])}, tmp_path / "o.safetensors")
    with pytest.raises(lm.LuminalError, match="does not exist"):
        save_safetensors({"a": np.zeros(2)}, tmp_path / "nowhere" / "a.safetensors")
    with pytest.raises(lm.LuminalError, match="metadata"):
        save_safetensors({"a": np.zeros(2)}, tmp_path / "m.safetensors", metadata={"n": 1})
    # big-endian and non-contiguous arrays are written as little-endian, contiguous
    data = np.arange(12, dtype=">f4").reshape(3, 4).T
    save_safetensors({"be": data}, tmp_path / "be.safetensors")
    np.testing.assert_array_equal(load_safetensors(tmp_path / "be.safetensors")["be"], data)


class _TinyLinear(lm.nn.Module):
    """y = x W^T + b with PyTorch's parameter names, built from GraphTensor ops."""

    def __init__(self, cx: lm.Graph, n_in: int, n_out: int) -> None:
        super().__init__(cx)
        self.param("weight", (n_out, n_in))
        self.param("bias", (n_out,))

    def forward(self, x: lm.GraphTensor) -> lm.GraphTensor:
        return x @ self.weight.permute((1, 0)) + self.bias


def test_load_into_module(tmp_path: Path) -> None:
    torch.manual_seed(2)
    layer = torch.nn.Linear(5, 3)
    save_safetensors(layer.state_dict(), tmp_path / "model.safetensors")
    cx = lm.Graph()
    model = _TinyLinear(cx, 5, 3)
    model.load_state_dict(load_safetensors(tmp_path))
    x = torch.randn(4, 5)
    out = model(cx.tensor((4, 5)).set(x.numpy())).retrieve()
    cx.execute()
    np.testing.assert_allclose(out.numpy(), layer(x).detach().numpy(), atol=1e-5, rtol=1e-3)


def _minilm_folder() -> Path:
    """The real MiniLM weights (scripts/setup.sh installs the package; a missing one
    fails here rather than skipping)."""
    from luminal.models.bert import default_minilm_folder

    return default_minilm_folder()


def test_real_minilm_checkpoint() -> None:
    folder = _minilm_folder()
    ours = load_safetensors(folder)
    theirs = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    _assert_same(ours, theirs)
    assert len(ours) == 104
    assert ours["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert ours["encoder.layer.5.output.dense.weight"].shape == (384, 1536)
    assert ours["embeddings.position_ids"].dtype == np.int64  # a buffer, not a parameter

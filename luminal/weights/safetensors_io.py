"""Reading and writing safetensors checkpoints as dicts of numpy arrays.

A checkpoint is one `.safetensors` file, a list of them, or a folder: a Hugging Face folder
with `model.safetensors.index.json` loads the shards the index names (and only those, so a
`consolidated.safetensors` lying beside the shards is not read twice); a folder without an
index loads every `*.safetensors` in it. Stored dtypes are kept (bfloat16 as
`ml_dtypes.bfloat16`) unless `dtype=` asks for one floating type.

The format is small: 8 bytes little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw little-endian data. We parse the header
ourselves to check it (every range inside the file, of the size its shape needs, no two
overlapping) and to name what is wrong, then read each tensor's bytes straight into its
array: one copy of each weight in memory, and every dtype readable (float8 included).
Writing goes through the `safetensors` library.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from luminal.dtype import DType
from luminal.errors import DTypeError, LuminalError, ShapeError

PathLike = str | os.PathLike[str]

INDEX_FILE = "model.safetensors.index.json"
_MAX_HEADER_BYTES = 100_000_000  # the limit the safetensors library itself enforces

# safetensors dtype name -> numpy dtype (little-endian storage)
STORAGE_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype(np.bool_),
}
_STORAGE_NAMES = {dtype: name for name, dtype in STORAGE_DTYPES.items()}
_EXTRA_FLOATS = {STORAGE_DTYPES[name] for name in ("BF16", "F8_E4M3", "F8_E5M2")}


def is_floating(dtype: np.dtype) -> bool:
    """numpy float kinds plus the ml_dtypes ones (bfloat16, float8), whose kind is 'V'."""
    return dtype.kind == "f" or dtype in _EXTRA_FLOATS


def as_float_dtype(dtype: Any, what: str) -> np.dtype:
    """A target floating dtype from lm.float32, 'float32', np.float32, ... or DTypeError."""
    try:
        result = np.dtype(dtype.numpy if isinstance(dtype, DType) else dtype)
    except TypeError:
        raise DTypeError(f"{what}: dtype={dtype!r} is not a dtype") from None
    if not is_floating(result):
        raise DTypeError(
            f"{what}: dtype={dtype!r} is not a floating type; expected float32, float16, "
            "bfloat16 or None (keep the stored dtypes)"
        )
    return result


# ---------------------------------------------------------------- reading


def read_safetensors_header(path: PathLike) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and the byte offset where its data starts.
    The `__metadata__` entry (a str -> str dict), when present, is part of the header."""
    path = Path(path)
    if not path.is_file():
        raise LuminalError(f"load_safetensors: no such file {str(path)!r}")
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise LuminalError(
                f"load_safetensors: {str(path)!r} is not a safetensors file "
                f"({size} bytes, shorter than the 8-byte header length)"
            )
        (length,) = struct.unpack("<Q", prefix)
        if length > min(_MAX_HEADER_BYTES, size - 8):
            raise LuminalError(
                f"load_safetensors: {str(path)!r} is not a safetensors file "
                f"(header length {length} but the file has {size} bytes)"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LuminalError(
            f"load_safetensors: {str(path)!r} has a header that is not JSON ({error})"
        ) from None
    if not isinstance(header, dict):
        raise LuminalError(f"load_safetensors: {str(path)!r} header is not a JSON object")
    data_start = 8 + length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        _check_entry(path, name, info, size - data_start)
    _check_overlaps(path, header)
    return header, data_start


def _check_overlaps(path: Path, header: dict[str, Any]) -> None:
    """No two tensors may share bytes: an edited header could otherwise alias weights."""
    ranges = sorted(
        (tuple(info["data_offsets"]), name)
        for name, info in header.items()
        if name != "__metadata__" and info["data_offsets"][0] < info["data_offsets"][1]
    )
    for ((_, end), first), ((begin, _), second) in itertools.pairwise(ranges):
        if begin < end:
            raise LuminalError(
                f"load_safetensors: tensors {first!r} and {second!r} in {str(path)!r} overlap "
                f"(bytes {begin}..{end} belong to both)"
            )


def _check_entry(path: Path, name: str, info: Any, data_bytes: int) -> None:
    where = f"load_safetensors: tensor {name!r} in {str(path)!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise LuminalError(f"{where}: header entry {info!r} lacks dtype, shape or data_offsets")
    if info["dtype"] not in STORAGE_DTYPES:
        raise DTypeError(
            f"{where} has dtype {info['dtype']!r}; supported: {', '.join(STORAGE_DTYPES)}"
        )
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise ShapeError(f"{where}: shape {shape!r} is not a list of non-negative ints")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets)):
        raise ShapeError(f"{where}: data_offsets {offsets!r} is not a pair of non-negative ints")
    begin, end = offsets
    expected = math.prod(shape) * STORAGE_DTYPES[info["dtype"]].itemsize  # exact, no wrap
    if not 0 <= begin <= end <= data_bytes or end - begin != expected:
        raise ShapeError(
            f"{where}: shape {tuple(info['shape'])} of {info['dtype']} needs {expected} bytes, "
            f"the header gives bytes {begin}..{end} of {data_bytes}"
        )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_raw_tensor(path: PathLike, name: str) -> np.ndarray:
    """One tensor read straight from the file's bytes."""
    header, data_start = read_safetensors_header(path)
    if name not in header or name == "__metadata__":
        raise LuminalError(f"load_safetensors: no tensor {name!r} in {str(path)!r}")
    with Path(path).open("rb") as handle:
        return _read_into(handle, Path(path), name, header[name], data_start)


def _read_into(
    handle: BinaryIO, path: Path, name: str, info: dict[str, Any], data_start: int
) -> np.ndarray:
    """A tensor's bytes read into a new array of its shape: one copy, no memory map, so
    loading a checkpoint holds each weight once (a map would count the file again)."""
    begin, end = info["data_offsets"]
    array = np.empty(info["shape"], STORAGE_DTYPES[info["dtype"]])
    handle.seek(data_start + begin)
    got = handle.readinto(memoryview(array.reshape(-1).view(np.uint8)))
    if got != end - begin:
        raise LuminalError(
            f"load_safetensors: {str(path)!r} ended inside tensor {name!r} (read {got} of "
            f"{end - begin} bytes; was the file changed while loading?)"
        )
    return array


def _load_file(path: Path, dtype: np.dtype | None) -> dict[str, np.ndarray]:
    """The tensors of one file, in the order of their data in the file."""
    header, data_start = read_safetensors_header(path)
    names = sorted(
        (name for name in header if name != "__metadata__"),
        key=lambda name: header[name]["data_offsets"][0],
    )
    with path.open("rb") as handle:
        return {
            name: _convert(_read_into(handle, path, name, header[name], data_start), dtype)
            for name in names
        }


def _convert(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    if dtype is not None and is_floating(array.dtype) and array.dtype != dtype:
        return array.astype(dtype)
    return array


def safetensors_files(source: PathLike | Iterable[PathLike]) -> list[Path]:
    """The files a checkpoint consists of: a file, a list of files, an index file, or a
    folder (its index's shards, else every *.safetensors in it, sorted by name)."""
    if not isinstance(source, str | os.PathLike):
        files = [Path(item) for item in source]
        if not files:
            raise LuminalError("load_safetensors: empty list of files")
        return files
    path = Path(source)
    if path.is_dir():
        index = path / INDEX_FILE
        if index.is_file():
            return _index_files(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise LuminalError(f"load_safetensors: no *.safetensors files in {str(path)!r}")
        return files
    if path.name.endswith(".index.json") and path.is_file():
        return _index_files(path)
    if not path.exists():
        raise LuminalError(f"load_safetensors: no such file or folder {str(path)!r}")
    return [path]


def _index_files(index: Path) -> list[Path]:
    weight_map = _read_index(index)
    files = [_shard_path(index, name) for name in dict.fromkeys(weight_map.values())]
    missing = [str(file) for file in files if not file.is_file()]
    if missing:
        raise LuminalError(
            f"load_safetensors: {str(index)!r} names shards that do not exist: {missing}"
        )
    return files


def _shard_path(index: Path, name: str) -> Path:
    """A shard the index names, inside the index's folder: a relative path without '..'
    (an index cannot make the loader read /etc/passwd or a sibling model). Symbolic links
    in the folder are followed, as the Hugging Face cache's snapshots need."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not name or "\0" in name or PurePosixPath(name).is_absolute() or ".." in parts:
        raise LuminalError(
            f"load_safetensors: {str(index)!r} names shard {name!r}, which is outside its "
            "folder; shards must be files beside the index"
        )
    return index.parent.joinpath(*parts)


def _read_index(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise LuminalError(
            f"load_safetensors: {str(index)!r} is not a safetensors index with a "
            f"'weight_map' ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise LuminalError(
            f"load_safetensors: 'weight_map' in {str(index)!r} is not an object of name -> file"
        )
    return weight_map


def load_safetensors(
    source: PathLike | Iterable[PathLike], dtype: Any = None
) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint by name, as writeable numpy arrays in PyTorch's shapes.

    `source`: a `.safetensors` file, a list of them, a `*.index.json`, or a folder.
    `dtype`: None keeps the stored dtypes (BF16 becomes `ml_dtypes.bfloat16`); a floating
    dtype (`np.float32`, `"float32"`, `lm.float32`, ...) converts every floating tensor to
    it, leaving integer and bool tensors alone.
    """
    target = None if dtype is None else as_float_dtype(dtype, "load_safetensors")
    files = safetensors_files(source)
    out: dict[str, np.ndarray] = {}
    owner: dict[str, Path] = {}
    for file in files:
        for name, array in _load_file(file, target).items():
            if name in owner:
                raise LuminalError(
                    f"load_safetensors: tensor {name!r} is in both {str(owner[name])!r} "
                    f"and {str(file)!r}"
                )
            owner[name] = file
            out[name] = array
    _check_index(source, files, out)
    return out


def _check_index(source: Any, files: list[Path], out: Mapping[str, np.ndarray]) -> None:
    """With an index, every tensor it names must be in the shard it names."""
    if not isinstance(source, str | os.PathLike):
        return
    path = Path(source)
    index = path / INDEX_FILE if path.is_dir() else path
    if not (index.name.endswith(".index.json") and index.is_file()):
        return
    missing = sorted(name for name in _read_index(index) if name not in out)
    if missing:
        shown = missing[:10] + (["..."] if len(missing) > 10 else [])
        raise LuminalError(
            f"load_safetensors: {str(index)!r} lists {len(missing)} tensors that none of "
            f"its shards {[file.name for file in files]} hold: {shown}"
        )


# ---------------------------------------------------------------- writing


def save_safetensors(
    tensors: Mapping[str, Any], path: PathLike, metadata: Mapping[str, str] | None = None
) -> None:
    """Write name -> array (numpy, ml_dtypes bfloat16, or torch tensors) to one file.
    `metadata` is the optional str -> str dict stored under `__metadata__`."""
    path = Path(path)
    if not path.parent.is_dir():
        raise LuminalError(f"save_safetensors: folder {str(path.parent)!r} does not exist")
    arrays: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise LuminalError(f"save_safetensors: tensor names must be str, got {name!r}")
        array = np.asarray(_as_numpy(value), order="C")  # (ascontiguousarray makes 0-d 1-d)
        if array.dtype.newbyteorder("<") not in _STORAGE_NAMES:
            raise DTypeError(
                f"save_safetensors: tensor {name!r} has dtype {array.dtype}, which safetensors "
                "cannot store; expected a float, int, uint or bool type"
            )
        arrays[name] = array.astype(array.dtype.newbyteorder("<"), copy=False)
    if metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise LuminalError("save_safetensors: metadata must map str to str")
    safetensors.numpy.save_file(arrays, str(path), metadata=dict(metadata or {}) or None)


def _as_numpy(value: Any) -> np.ndarray:
    """numpy view of a torch tensor without importing torch (bfloat16 kept bit for bit)."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            torch = sys.modules["torch"]  # a torch tensor exists, so torch is imported
            return value.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return value.numpy()
    return np.asarray(value)

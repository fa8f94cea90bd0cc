"""Shared test helpers: seeded inputs, running a graph, comparing with PyTorch."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

import luminal as lm

torch.set_num_threads(1)

# Tests patch compiler internals in-process (a wrong lowering, a failing check) and expect
# the compile to see the patch; a program stored by an earlier run would hide it. The
# program cache's own tests turn it on with a temporary cache directory.
os.environ.setdefault("LUMINAL_PROGRAM_CACHE", "0")

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ATOL = 1e-6
RTOL = 1e-3

TORCH_DTYPES = {
    lm.float32: torch.float32,
    lm.float16: torch.float16,
    lm.bfloat16: torch.bfloat16,
    lm.int32: torch.int32,
    lm.bool: torch.bool,
}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def uniform(rng: np.random.Generator, shape: Sequence[int], low: float = -2.0, high: float = 2.0):
    return rng.uniform(low, high, size=tuple(shape)).astype(np.float32)


def run(
    build: Callable[..., lm.GraphTensor | Sequence[lm.GraphTensor]],
    *arrays: np.ndarray,
    dtypes: Sequence[lm.DType] | None = None,
) -> list[np.ndarray]:
    """Build a graph with one input per array, execute with the reference runtime and
    return the outputs as numpy arrays."""
    cx = lm.Graph()
    inputs = []
    for i, array in enumerate(arrays):
        dtype = (
            dtypes[i]
            if dtypes
            else lm.DType(str(np.asarray(array).dtype))
            if str(np.asarray(array).dtype) in {"float32", "float16", "int32", "bool", "bfloat16"}
            else lm.float32
        )
        inputs.append(cx.tensor(np.shape(array), dtype=dtype).set(array))
    outputs = build(*inputs)
    if isinstance(outputs, lm.GraphTensor):
        outputs = [outputs]
    for out in outputs:
        out.retrieve()
    cx.execute()
    return [out.numpy() for out in outputs]


def assert_matches_torch(
    ours: np.ndarray,
    theirs: torch.Tensor,
    atol: float = ATOL,
    rtol: float = RTOL,
    check_dtype: bool = True,
) -> None:
    """Same shape, same dtype (unless told otherwise), values within tolerance."""
    expected = theirs.detach()
    assert tuple(ours.shape) == tuple(expected.shape), (ours.shape, tuple(expected.shape))
    if check_dtype:
        assert TORCH_DTYPES[lm.dtype.from_numpy(ours.dtype)] == expected.dtype, (
            ours.dtype,
            expected.dtype,
        )
    np.testing.assert_allclose(
        np.asarray(ours, dtype=np.float64),
        expected.to(torch.float64).numpy(),
        atol=atol,
        rtol=rtol,
    )


def gaussian_blobs(
    n: int, features: int, spread: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Three separable classes: (x (n, features) float32, labels (n,) int32)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int32)
    centers = rng.standard_normal((3, features)).astype(np.float32) * spread
    x = centers[y] + rng.standard_normal((n, features)).astype(np.float32) * 0.5
    return x.astype(np.float32), y


def write_gguf(
    path: os.PathLike[str], architecture: str, tensors: dict[str, np.ndarray], raw_dtype=None
) -> None:
    """A GGUF file with only its architecture key and `tensors` (packed blocks already,
    when `raw_dtype` names a gguf.GGMLQuantizationType)."""
    import gguf  # only the GGUF tests need it

    writer = gguf.GGUFWriter(path, architecture)
    for name, array in tensors.items():
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def replayed_functions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions of the nodes the compile-time check runs on the compiled program's
    own inputs (luminal/backends/cpu/verify.py's Replay), in call order."""
    from luminal.backends.cpu import verify

    seen: list[str] = []
    call = verify.Replay.__call__

    def spy(self: verify.Replay, *arrays: np.ndarray) -> np.ndarray:
        seen.append(self.function)
        return call(self, *arrays)

    monkeypatch.setattr(verify.Replay, "__call__", spy)
    return seen

"""Casts onto float8/float4 grids against ml_dtypes (what ONNX's reference uses), on
every class of value: ties, subnormals, the largest finite values and past them,
infinities and NaN, saturating and not; reference runtime and compiled."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.numpy_helper import saturate_cast

import luminal as lm
from luminal.onnx.backend import LuminalBackend

TYPES = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
}


def _values(kind: type) -> np.ndarray:
    """Every representable value, the midpoints between neighbours (ties), points just
    beside them, values past the largest, and the specials."""
    grid = np.unique(np.arange(256, dtype=np.uint8).view(kind).astype(np.float32))
    grid = grid[np.isfinite(grid)]
    mids = (grid[1:] + grid[:-1]) / 2
    near = np.concatenate([mids * (1 + 2.0**-20), mids * (1 - 2.0**-20)])
    top = float(ml_dtypes.finfo(kind).max)
    extra = [top * 1.01, top * 1.2, -top * 3, 1e30, np.inf, -np.inf, np.nan, 1e-30, -0.0]
    return np.concatenate([grid, mids, near, np.array(extra)]).astype(np.float32)


def _model(to: int, saturate: int, n: int) -> onnx.ModelProto:
    node = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", to, [n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


CASES = [(to, saturate, False) for to in TYPES for saturate in (1, 0)]
CASES += [(TensorProto.FLOAT8E4M3FN, 0, True), (TensorProto.FLOAT8E5M2, 1, True)]


@pytest.mark.parametrize(("to", "saturate", "compiled"), CASES)
def test_cast_rounds_like_ml_dtypes(to: int, saturate: int, compiled: bool) -> None:
    kind = TYPES[to]
    x = _values(kind)
    if to == TensorProto.FLOAT4E2M1:  # float4 has no NaN (ml_dtypes makes it -0)
        x = x[~np.isnan(x)]
    if saturate and to != TensorProto.FLOAT4E2M1:
        expected = saturate_cast(x, np.dtype(kind))
    else:
        expected = x.astype(kind)
    compiler = lm.CPUCompiler() if compiled else None
    ours = LuminalBackend.prepare(_model(to, saturate, x.size), compiler=compiler).run([x])[0]
    assert ours.dtype == np.dtype(kind)
    got, want = ours.astype(np.float32), expected.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_e8m0_rounding_modes(mode: str, saturate: int) -> None:
    from onnx.numpy_helper import to_float8e8m0

    rng = np.random.default_rng(18)
    x = np.concatenate(
        [
            np.ldexp(np.float32(1), np.arange(-127, 128)).astype(np.float32),  # exact
            (rng.uniform(1, 2, 64) * np.ldexp(1.0, rng.integers(-130, 128, 64))).astype(np.float32),
            np.array([1.5, 1.75, 1.25, 3.0, 3.4e38, -6.0, 0.0, 1e-45, np.inf, np.nan], np.float32),
        ]
    )
    node = helper.make_node(
        "Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=mode
    )
    graph = helper.make_graph(
        [node],
        "e8m0",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [x.size])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    ours = LuminalBackend.prepare(model).run([x])[0]
    want = to_float8e8m0(x, bool(saturate), mode)
    np.testing.assert_array_equal(ours.view(np.uint8), want.view(np.uint8))

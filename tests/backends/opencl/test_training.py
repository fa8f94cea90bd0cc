"""Training steps on `lm.OpenCLCompiler()` (PoCL in CI): forward, backward and the
optimizer update as one program, against the same steps on the reference runtime."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import luminal as lm
from luminal.training import Adam, TrainStep, losses
from tests.conftest import gaussian_blobs


def _steps(build_model, x: np.ndarray, y: np.ndarray, input_shape, steps: int = 3):
    """Loss per step and final parameters, on the reference runtime and on OpenCL."""
    results = []
    for compiler in (None, "opencl"):
        cx = lm.Graph()
        lm.nn.manual_seed(0)
        model = build_model(cx)
        step = TrainStep.build(
            model,
            losses.cross_entropy,
            functools.partial(Adam, lr=0.01),
            input_shape,
            compiler=compiler,
        )
        trace = [step(x, y) for _ in range(steps)]
        results.append((trace, model.state_dict()))
    return results


def test_mlp_training_steps_match_the_reference_runtime() -> None:
    x, y = gaussian_blobs(32, 4, 3.0, 0)

    def mlp(cx: lm.Graph) -> lm.nn.Module:
        return lm.nn.Sequential(cx, lm.nn.Linear(cx, 4, 16), lm.nn.Tanh(), lm.nn.Linear(cx, 16, 3))

    (ref_trace, ref_state), (ocl_trace, ocl_state) = _steps(mlp, x, y, ("batch", 4))
    np.testing.assert_allclose(ocl_trace, ref_trace, rtol=1e-5)
    assert ocl_trace[-1] < ocl_trace[0]
    for name, value in ref_state.items():
        np.testing.assert_allclose(ocl_state[name], value, atol=1e-5, err_msg=name)


@pytest.mark.slow  # two convolutions' gradients: ~15 s of CPU on the reference side
def test_lenet_training_steps_match_the_reference_runtime() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, 4).astype(np.int32)
    nn = lm.nn

    def lenet(cx: lm.Graph) -> lm.nn.Module:
        return nn.Sequential(
            cx, nn.Conv2d(cx, 1, 4, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(cx, 4, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(cx, 6 * 2 * 2, 16), nn.ReLU(), nn.Linear(cx, 16, 10),
        )  # fmt: skip

    (ref_trace, ref_state), (ocl_trace, ocl_state) = _steps(lenet, x, y, ("batch", 1, 12, 12))
    np.testing.assert_allclose(ocl_trace, ref_trace, rtol=1e-4)
    for name, value in ref_state.items():
        np.testing.assert_allclose(ocl_state[name], value, atol=1e-4, err_msg=name)

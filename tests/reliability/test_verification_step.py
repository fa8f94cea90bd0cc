"""Custom kernels whose reference is a step function (`reference.step_function`): the
compile-time check runs them on the compiled program's own inputs
(luminal/backends/cpu/verify.py), so roundings that a one-ulp difference upstream decides
differently do not fail it, while a wrong kernel or a wrong value feeding one still does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import luminal as lm

ROUND = r"""
void round_to_tenths(float* out, const float* x, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++) out[i] = __builtin_rintf(x[i] * 10.0f) / 10.0f;
}
"""
DOUBLE = r"""
void double_it(float* out, const float* x, const long long* numel) {
    for (long long i = 0; i < numel[0]; i++) out[i] = 2.0f * x[i];
}
"""


@dataclass(frozen=True)
class Tenths:
    """round_to_tenths in numpy: a step function of its input."""

    step_function: bool = True

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (np.rint(x * np.float32(10)) / np.float32(10)).astype(np.float32)


def _doubled(x: np.ndarray) -> np.ndarray:
    return 2 * x


def _ties() -> np.ndarray:
    """Rows of 64 hundredths summing to a tie at tenths (5 mod 10 hundredths): float32
    sums in different orders land on either side of it."""
    ints = np.random.default_rng(0).integers(-100, 100, (2000, 64))
    ints[:, 0] += 5 - ints.sum(axis=1) % 10
    return (ints / 100).astype(np.float32)


def _graph(round_source: str = ROUND, double_source: str = DOUBLE) -> tuple[lm.Graph, object]:
    cx = lm.Graph()
    data = _ties()
    x = cx.tensor(data.shape).set(data)
    doubled = lm.custom_kernel([x], double_source, data.shape, reference=_doubled)
    sums = doubled.sum(1) * 0.5
    out = lm.custom_kernel([sums], round_source, (data.shape[0],), reference=Tenths())
    return cx, out.retrieve()


def test_step_kernel_is_checked_on_the_compiled_inputs(replayed_functions: list[str]) -> None:
    """The default check accepts the graph, running the rounding's reference once, on the
    compiled sums; the compiled result is that rounding of sums within float error of
    the exact ones (a tie may go either way: at most one step, 0.1, from the reference's)."""
    cx, out = _graph()
    cx.execute()
    reference = out.numpy().copy()
    cx.compile(lm.CPUCompiler(cache=False))
    assert replayed_functions == ["round_to_tenths"]
    cx.execute()
    exact = np.round(_ties().astype(np.float64).sum(axis=1), 2)
    assert np.abs(out.numpy() - exact).max() <= 0.05 + 1e-5
    assert np.abs(out.numpy() - reference).max() <= 0.1 + 1e-5


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("step kernel", "the output of custom kernel 'round_to_tenths'"),
        ("upstream", "input 0 of custom kernel 'round_to_tenths'"),
    ],
)
def test_wrong_step_kernel_or_input_is_rejected(where: str, message: str) -> None:
    """A step kernel that moves one output, or an ordinary kernel upstream that does
    (caught where it feeds the step kernel), is a CompileError naming the node; the
    graph keeps the reference runtime."""
    wrong = "    if (numel[0] > 7) out[7] += 0.5f;\n}\n"
    if where == "step kernel":
        cx, _ = _graph(round_source=ROUND.rstrip()[:-1] + wrong)
    else:
        cx, _ = _graph(double_source=DOUBLE.rstrip()[:-1] + wrong)
    with pytest.raises(lm.CompileError, match="compiled graph is wrong") as error:
        cx.compile(lm.CPUCompiler(cache=False))
    assert message in str(error.value)
    assert cx.compiled is None

"""Mixed precision: fp16/bf16 forward and backward on float32 master weights; the loss
scaler against torch.amp.GradScaler (scale sequence, skipped steps), and exact skips."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.training import SGD, Adam, GradScaler, TrainStep, autocast, losses
from tests.conftest import gaussian_blobs

STEPS = 20
# overflowing steps are the point here: numpy's warnings about them are expected
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")


def toy_data(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return gaussian_blobs(n, 8, 2.0, seed)


def mlp_step(mixed_precision=None, optimizer=None, compiler=None, **kwargs):
    cx = lm.Graph()
    lm.nn.manual_seed(0)
    model = lm.nn.Sequential(
        cx,
        lm.nn.Linear(cx, 8, 32),
        lm.nn.ReLU(),
        lm.nn.Linear(cx, 32, 32),
        lm.nn.ReLU(),
        lm.nn.Linear(cx, 32, 3),
    )
    step = TrainStep.build(
        model,
        losses.cross_entropy,
        optimizer or functools.partial(Adam, lr=0.01),
        ("batch", 8),
        mixed_precision=mixed_precision,
        compiler=compiler,
        **kwargs,
    )
    return step, model


def train(step: TrainStep, steps: int = STEPS, x=None, y=None) -> np.ndarray:
    if x is None:
        x, y = toy_data()
    return np.array([step(x, y) for _ in range(steps)])


def snapshot(step: TrainStep) -> list[np.ndarray]:
    """Parameters, optimizer state and step count, copied."""
    opt = step.optimizer
    tensors = [*opt.params, *(t for kind in opt.state.values() for t in kind), opt._step]
    return [np.array(step.graph.input_data[t.node_id], copy=True) for t in tensors]


# ---------------------------------------------------------------- training tracks fp32
@pytest.mark.parametrize(("precision", "tolerance"), [("fp16", 1e-3), ("bf16", 5e-3)])
def test_low_precision_training_tracks_float32(precision: str, tolerance: float) -> None:
    step32, _ = mlp_step()
    step16, model = mlp_step(precision)
    # the forward really runs in the low precision dtype; the masters stay float32
    dtypes = {n.dtype for n in step16.graph.nodes.values()}
    assert lm.training.mixed_precision.compute_dtype(precision) in dtypes
    assert all(p.dtype == lm.float32 for p in model.parameters())
    assert step16.outputs["prediction"].dtype == lm.training.mixed_precision.compute_dtype(
        precision
    )
    full, low = train(step32), train(step16)
    assert low[-1] < 0.1 * low[0]
    np.testing.assert_allclose(low, full, atol=tolerance, rtol=0)
    assert step16.skipped_steps == 0 and step16.optimizer.step_count == STEPS
    assert all(p.numpy().dtype == np.float32 for p in model.parameters())


def test_fp16_compiled_matches_reference_through_overflows() -> None:
    """Overflowing steps on the CPU backend: inf detected by the C kernels, same skips."""
    x, y = toy_data()
    runs = []
    for compiler in (None, lm.CPUCompiler()):
        step, _ = mlp_step("fp16", compiler=compiler, scaler=GradScaler(init_scale=2.0**24))
        runs.append((train(step, 10, x, y), step.skipped_steps, step.scaler.get_scale()))
    (ref_losses, ref_skipped, ref_scale), (cpu_losses, cpu_skipped, cpu_scale) = runs
    assert ref_skipped == cpu_skipped > 0 and ref_scale == cpu_scale
    np.testing.assert_allclose(cpu_losses, ref_losses, atol=1e-3, rtol=0)


# ---------------------------------------------------------------- the scaler against torch
def torch_fp16_scales(model: lm.nn.Module, x: np.ndarray, y: np.ndarray, init_scale: float):
    """The same MLP in torch: float32 master weights, fp16 forward, GradScaler, Adam."""
    state = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    params = list(state.values())
    opt = torch.optim.Adam(params, lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    tx, ty = torch.tensor(x).half(), torch.tensor(y).long()
    scales, losses_ = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        h = tx
        for i in (0, 2, 4):
            h = h @ state[f"{i}.weight"].half().T + state[f"{i}.bias"].half()
            h = torch.relu(h) if i < 4 else h
        loss = torch.nn.functional.cross_entropy(h.float(), ty)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses_.append(loss.item())
    return scales, np.array(losses_)


def test_overflow_skips_steps_exactly_and_backs_off_like_torch() -> None:
    x, y = toy_data()
    init = 2.0**30  # the first steps overflow fp16 until the scale has halved enough
    step, model = mlp_step("fp16", scaler=GradScaler(init_scale=init))
    expected_scales, expected_losses = torch_fp16_scales(model, x, y, init)
    scales, skipped, losses_ = [], [], []
    for _ in range(STEPS):
        before = snapshot(step)
        losses_.append(step(x, y))
        scales.append(step.scaler.get_scale())
        if step.scaler.overflowed():
            skipped.append(step.optimizer_steps)
            for old, new in zip(before, snapshot(step), strict=True):
                np.testing.assert_array_equal(old, new)  # params, state, step count
    assert scales == expected_scales  # 2^29 ... 2^17: 13 skipped steps, then 2^17
    assert len(skipped) == step.skipped_steps >= 3 and skipped == list(range(1, len(skipped) + 1))
    assert step.optimizer.step_count == STEPS - len(skipped)
    np.testing.assert_allclose(losses_, expected_losses, atol=1e-4, rtol=0)
    assert losses_[-1] < 0.8 * losses_[0]


@pytest.mark.parametrize("growth_interval", [1, 3])
def test_scaler_update_matches_torch_for_an_overflow_pattern(growth_interval: int) -> None:
    pattern = [0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    ours = GradScaler(init_scale=1024.0, growth_interval=growth_interval, backoff_factor=0.25)
    theirs = torch.amp.GradScaler(
        "cpu", init_scale=1024.0, growth_interval=growth_interval, backoff_factor=0.25
    )
    weight = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([weight], lr=0.1)
    for overflow in pattern:
        opt.zero_grad()
        theirs.scale((weight * (float("inf") if overflow else 1.0)).sum()).backward()
        theirs.step(opt)
        theirs.update()
        ours.update(bool(overflow))
        assert ours.get_scale() == theirs.get_scale()
        assert ours.get_growth_tracker() == theirs._growth_tracker.item()


def test_scaler_grows_after_growth_interval_good_steps_in_a_train_step() -> None:
    step, _ = mlp_step("fp16", scaler=GradScaler(init_scale=256.0, growth_interval=4))
    x, y = toy_data()
    scales = []
    for _ in range(9):
        step(x, y)
        scales.append(step.scaler.get_scale())
    assert scales == [256.0] * 3 + [512.0] * 4 + [1024.0] * 2
    assert step.skipped_steps == 0


def test_nan_batch_is_skipped_and_accumulation_restarts_clean() -> None:
    x, y = toy_data()
    step, _ = mlp_step("fp16", accumulate=2, optimizer=functools.partial(SGD, lr=0.1))
    bad = x.copy()
    bad[40, 0] = np.nan
    before = snapshot(step)
    step(x[:32], y[:32])
    step(bad[32:], y[32:])  # the k-th micro-batch: the accumulated mean holds NaN
    assert step.skipped_steps == 1 and step.scaler.get_scale() == 2.0**15
    for old, new in zip(before, snapshot(step), strict=True):
        np.testing.assert_array_equal(old, new)
    for buffer, _ in step._buffers:  # restarted at zero, not NaN
        assert not np.any(step.graph.input_data[buffer.node_id])
    step(x[:32], y[:32])
    step(x[32:], y[32:])
    assert step.skipped_steps == 1 and step.optimizer.step_count == 1
    assert all(np.isfinite(p.numpy()).all() for p in step.params)


# ---------------------------------------------------------------- API details
def test_autocast_swaps_and_restores_parameters() -> None:
    cx = lm.Graph()
    linear = lm.nn.Linear(cx, 4, 2)
    weight = linear.weight
    with autocast(linear, "bf16") as dtype:
        assert dtype == lm.bfloat16 and linear.weight.dtype == lm.bfloat16
        out = linear(cx.tensor((3, 4)).cast(dtype))
    assert linear.weight is weight and linear.parameters()[0] is weight
    assert out.dtype == lm.bfloat16
    with pytest.raises(lm.DTypeError, match="expected 'fp16' or 'bf16'"), autocast(linear, "int32"):
        pass
    assert linear.weight is weight


def test_scaler_state_and_errors() -> None:
    scaler = GradScaler(init_scale=8.0, growth_interval=2)
    scaler.update(False)
    state = scaler.state_dict()
    other = GradScaler()
    other.load_state_dict(state)
    assert other.get_scale() == 8.0 and other.get_growth_tracker() == 1
    assert "scale=8" in repr(other)
    disabled = GradScaler(enabled=False)
    assert disabled.get_scale() == 1.0 and disabled.state_dict() == {}
    with pytest.raises(lm.LuminalError, match="growth_factor"):
        GradScaler(growth_factor=1.0)
    with pytest.raises(lm.LuminalError, match="init_scale"):
        GradScaler(init_scale=float("inf"))
    cx = lm.Graph()
    weight = cx.tensor((2,), dtype=lm.float16).set(np.ones(2, np.float16))
    x = cx.tensor((2,))
    loss = (weight.cast(lm.float32) * x).sum()
    with pytest.raises(lm.LuminalError, match="float32 master weights"):
        TrainStep(loss, [x], SGD([weight]), mixed_precision="fp16", compiler=None)

"""The training loop: TrainStep (one graph run per step), gradient accumulation, fit's
history, evaluation hook, progress and plot, and ArrayLoader's batches."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.training import (
    SGD,
    Adam,
    ArrayLoader,
    History,
    TrainStep,
    fit,
    losses,
    plot_history,
    schedules,
)
from tests.conftest import gaussian_blobs


def toy_data(n: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three Gaussian blobs in 4-D: linearly separable classes."""
    return gaussian_blobs(n, 4, 3.0, seed)


def mlp(cx: lm.Graph, seed: int = 0) -> lm.nn.Sequential:
    lm.nn.manual_seed(seed)
    return lm.nn.Sequential(cx, lm.nn.Linear(cx, 4, 16), lm.nn.Tanh(), lm.nn.Linear(cx, 16, 3))


def classifier_step(optimizer=None, compiler=None, **kwargs) -> tuple[TrainStep, lm.nn.Module]:
    cx = lm.Graph()
    model = mlp(cx)
    step = TrainStep.build(
        model,
        losses.cross_entropy,
        optimizer or functools.partial(Adam, lr=0.05),
        ("batch", 4),
        compiler=compiler,
        **kwargs,
    )
    return step, model


def test_fit_decreases_loss_and_calls_eval_every_epoch(tmp_path: Path) -> None:
    x, y = toy_data()
    step, model = classifier_step()
    calls = []

    def evaluate() -> dict[str, float]:
        calls.append(step.optimizer_steps)
        return {"accuracy": float((step.outputs["prediction"].numpy().argmax(1) == 0).mean())}

    loader = ArrayLoader(x, y, batch_size=16, seed=0)
    plot = tmp_path / "plots" / "history.png"
    history = fit(step, loader, epochs=5, eval_fn=evaluate, progress=False, plot_path=plot)
    assert isinstance(history, History)
    assert len(history.losses) == 30 and history.steps == list(range(1, 31))
    assert len(history.epoch_losses) == 5
    assert history.epoch_losses[-1] < 0.3 * history.epoch_losses[0]
    assert calls == [6, 12, 18, 24, 30] and history.metric_steps == calls
    assert len(history.metrics["accuracy"]) == 5
    assert history.samples == 5 * 96 and history.samples_per_second > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_every_n_steps_is_logged(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = toy_data(64)
    step, _ = classifier_step()
    count = iter(range(100))
    history = fit(
        step,
        [(x[i : i + 8], y[i : i + 8]) for i in range(0, 64, 8)],
        epochs=2,
        eval_fn=lambda: {"calls": next(count)},
        eval_every=3,
        progress=False,
    )
    assert history.metric_steps == [3, 6, 9, 12, 15]
    assert history.metrics["calls"] == [0, 1, 2, 3, 4]
    assert history.last_metrics == {"calls": 4}
    out = capsys.readouterr().out
    assert "step 3: calls 0.0000" in out and "step 15: calls 4.0000" in out


def test_progress_bar_shows_loss_and_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = toy_data(32)
    step, _ = classifier_step()
    fit(step, ArrayLoader(x, y, batch_size=8), epochs=2, eval_fn=lambda: {"a": 1.0})
    err = capsys.readouterr()
    assert "epoch 2/2" in err.err and "loss=" in err.err and "samples/s=" in err.err
    assert "8/8" in err.err
    assert "step 4: a 1.0000" in err.out  # tqdm.write goes to stdout above the bar


def test_fit_with_compiled_graph_and_schedule() -> None:
    """The default compiler (CPUCompiler) and a schedule stepped per optimizer step."""
    x, y = toy_data()
    cx = lm.Graph()
    model = mlp(cx)
    inputs = cx.tensor(("batch", 4)), cx.tensor(("batch",), dtype=lm.int32)
    loss = losses.cross_entropy(model(inputs[0]), inputs[1])
    opt = Adam(model.parameters(), lr=0.05)
    schedule = schedules.CosineAnnealingLR(opt, T_max=18)
    step = TrainStep(loss, inputs, opt, schedule=schedule)
    assert cx.compiled is not None
    history = fit(step, ArrayLoader(x, y, batch_size=32), epochs=6, progress=False)
    assert history.losses[-1] < 0.25 * history.losses[0]
    assert schedule.last_epoch == 18 and opt.lr == pytest.approx(0.0, abs=1e-12)


def make_regression_step(
    batch_rows: int | str, accumulate: int, compiler: object
) -> tuple[TrainStep, lm.nn.Module]:
    cx = lm.Graph()
    model = mlp(cx, seed=1)
    x = cx.tensor((batch_rows, 4))
    y = cx.tensor((batch_rows, 3))
    loss = losses.mse_loss(model(x), y)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    return TrainStep(loss, (x, y), opt, accumulate=accumulate, compiler=compiler), model


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "cpu"])
@pytest.mark.parametrize("accumulate", [2, 4])
def test_gradient_accumulation_matches_one_big_batch(accumulate: int, compiled: bool) -> None:
    """k micro-batches of n/k rows with accumulation give the same SGD (momentum) steps as
    one batch of n rows (mean losses: the optimizer gets the mean of the k gradients)."""
    rng = np.random.default_rng(0)
    compiler = lm.CPUCompiler() if compiled else None
    big, _ = make_regression_step(8, 1, compiler)
    small, model = make_regression_step("micro", accumulate, compiler)
    rows = 8 // accumulate
    for _ in range(3):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        y = rng.standard_normal((8, 3)).astype(np.float32)
        big_loss = big(x, y)
        micro = [small(x[i : i + rows], y[i : i + rows]) for i in range(0, 8, rows)]
        assert np.mean(micro) == pytest.approx(big_loss, rel=1e-5)
    assert big.optimizer_steps == small.optimizer_steps == 3 and small.pending == 0
    for p_big, p_small in zip(big.params, small.params, strict=True):
        np.testing.assert_allclose(p_small.numpy(), p_big.numpy(), atol=1e-5, rtol=0)
    for buffer, _ in small._buffers:  # the accumulator restarts at zero after each step
        assert not buffer.numpy().any()
    momentum = [b.numpy() for b in small.optimizer.state["momentum_buffer"]]
    for m_big, m_small in zip(big.optimizer.state["momentum_buffer"], momentum, strict=True):
        np.testing.assert_allclose(m_small, m_big.numpy(), atol=1e-5, rtol=0)


def test_accumulation_applies_nothing_before_the_kth_batch() -> None:
    step, model = make_regression_step("batch", 3, None)
    before = model.state_dict()
    x = np.ones((2, 4), np.float32)
    y = np.zeros((2, 3), np.float32)
    step(x, y)
    step(x, y)
    assert step.pending == 2 and step.optimizer.step_count == 0
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])
    step(x, y)
    assert step.pending == 0 and step.optimizer.step_count == 1
    assert not np.array_equal(model.state_dict()["0.weight"], before["0.weight"])


def test_history_metrics_with_missing_keys_are_nan() -> None:
    history = History()
    history._record_metrics(1, {"a": 1.0})
    history._record_metrics(2, {"b": 2.0})
    history._record_metrics(3, {"a": 3.0, "b": 4.0})
    assert history.metrics["a"][0] == 1.0 and np.isnan(history.metrics["a"][1])
    assert np.isnan(history.metrics["b"][0]) and history.metrics["b"][1:] == [2.0, 4.0]


def test_plot_history_without_metrics(tmp_path: Path) -> None:
    history = History(steps=[1, 2, 3], losses=[1.0, 0.5, 0.25])
    path = plot_history(history, tmp_path / "loss.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_array_loader_is_seeded_and_reshuffles() -> None:
    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10, dtype=np.int32)
    loader = ArrayLoader(x, y, batch_size=4, seed=3)
    first, second = list(loader), list(loader)
    assert len(loader) == 3 and [len(b[0]) for b in first] == [4, 4, 2]
    order = np.concatenate([b[1] for b in first])
    assert sorted(order) == list(range(10))
    assert not np.array_equal(order, np.concatenate([b[1] for b in second]))
    again = list(ArrayLoader(x, y, batch_size=4, seed=3))
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    assert all(np.array_equal(b[0][:, 0], b[1]) for b in first)  # rows stay paired
    assert len(ArrayLoader(x, batch_size=4, drop_last=True)) == 2
    plain = list(ArrayLoader(y, batch_size=5, shuffle=False))
    assert np.array_equal(plain[0][0], np.arange(5))


def test_errors_name_what_is_wrong() -> None:
    x, y = toy_data(16)
    step, _ = classifier_step()
    with pytest.raises(lm.LuminalError, match="one-pass iterator"):
        fit(step, iter([(x, y)]), epochs=2, progress=False)
    with pytest.raises(lm.LuminalError, match="got 1 arrays for 2 batch inputs"):
        step(x)
    with pytest.raises(lm.LuminalError, match="eval_every"):
        fit(step, [(x, y)], eval_every=0, progress=False)
    with pytest.raises(lm.ShapeError, match="different lengths"):
        ArrayLoader(x, y[:3], batch_size=4)
    cx = lm.Graph()
    model = mlp(cx)
    inp = cx.tensor((2, 4))
    out = model(inp)
    with pytest.raises(lm.ShapeError, match="loss must be a float scalar"):
        TrainStep(out, (inp,), SGD(model.parameters()), compiler=None)
    with pytest.raises(lm.GraphError, match="batch inputs must be graph inputs"):
        TrainStep(out.sum(), (inp * 2,), SGD(model.parameters()), compiler=None)
    with pytest.raises(lm.LuminalError, match="accumulate must be >= 1"):
        TrainStep(out.sum(), (inp,), SGD(model.parameters()), accumulate=0, compiler=None)

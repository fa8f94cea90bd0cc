"""Issue 11 leftovers: training with a zero-size parameter (optimizers, inf-norm clipping,
GradScaler), `execute_debug()` under the graph's lock with failed runs recorded, and the
reference runtime's OutOfMemoryError for an enormous dim."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.shape.expr import var
from luminal.training import optim
from luminal.training.mixed_precision import GradScaler

STEPS = 2
CONFIGS = [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.05, "amsgrad": True}),
    ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
]


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    return x, np.zeros((0, 4), np.float32), rng.standard_normal((3, 4)).astype(np.float32)


def _ours(name: str, kwargs: dict, norm_type: float, compile_it: bool) -> dict:
    """Scaled loss -> Autograd -> unscale -> clip_grad_norm -> found_inf -> optimizer, with
    a (0, 4) parameter beside a (3, 4) one; STEPS runs."""
    x, empty, weight = _data()
    cx = lm.Graph()
    tx = cx.tensor((2, 4)).set(x)
    p0 = cx.tensor((0, 4), name="empty").set(empty)
    p1 = cx.tensor((3, 4), name="weight").set(weight)
    loss = ((tx @ p1.transpose(0, 1)) ** 2).mean() + (tx @ p0.transpose(0, 1)).sum()
    scaler = GradScaler(init_scale=2.0**8)
    grads = cx.compile(lm.training.Autograd([p0, p1], scaler.scale(loss)))
    clipped, norm = optim.clip_grad_norm(scaler.unscale(grads), 0.5, norm_type, True)
    found = scaler.check(clipped)
    opt = getattr(optim, name)([p0, p1], **kwargs)
    opt.step_graph(clipped)
    norm.retrieve()
    if compile_it:
        cx.compile(lm.CPUCompiler())
    norms = []
    for _ in range(STEPS):
        cx.execute()
        assert not scaler.overflowed() and found.numpy() == 0.0
        norms.append(float(norm.numpy()))
        opt.apply()
    result = {"params": [p0.numpy(), p1.numpy()], "norms": norms}
    tx.set(np.full((2, 4), np.inf, np.float32))  # an overflow is still found ...
    with np.errstate(invalid="ignore"):  # inf * 0 in the reference runtime's matmul
        cx.execute()
    assert scaler.overflowed()
    tx.set(x)  # ... and the next run is clean again
    cx.execute()
    assert not scaler.overflowed()
    return result


def _torch(name: str, kwargs: dict, norm_type: float) -> dict:
    """The same steps in PyTorch. Its inf-norm clipping raises for an empty gradient (max
    has no identity there), so it clips the non-empty gradient alone: the same norm."""
    x, empty, weight = (torch.tensor(a) for a in _data())
    p0, p1 = torch.nn.Parameter(empty), torch.nn.Parameter(weight)
    opt = getattr(torch.optim, name)([p0, p1], **kwargs)
    norms = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((x @ p1.T) ** 2).mean() + (x @ p0.T).sum()
        loss.backward()
        clipped = [p1] if norm_type == math.inf else [p0, p1]
        norms.append(float(torch.nn.utils.clip_grad_norm_(clipped, 0.5, norm_type)))
        opt.step()
    return {"params": [p0.detach().numpy(), p1.detach().numpy()], "norms": norms}


@pytest.mark.parametrize("norm_type", [math.inf, 2.0])
@pytest.mark.parametrize(("name", "kwargs"), CONFIGS)
def test_optimizer_steps_a_model_with_a_zero_size_parameter_like_torch(
    name: str, kwargs: dict, norm_type: float
) -> None:
    """A (0, 4) parameter used to raise ShapeError while building (max over its empty
    gradient in clip_grad_norm(inf) and GradScaler.check); now every step matches torch."""
    ours = _ours(name, kwargs, norm_type, compile_it=False)
    theirs = _torch(name, kwargs, norm_type)
    np.testing.assert_allclose(ours["norms"], theirs["norms"], rtol=1e-5)
    for got, want in zip(ours["params"], theirs["params"], strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_zero_size_parameter_training_compiles() -> None:
    """The same step compiled for the CPU equals torch too."""
    name, kwargs = CONFIGS[1]
    ours = _ours(name, kwargs, math.inf, compile_it=True)
    theirs = _torch(name, kwargs, math.inf)
    np.testing.assert_allclose(ours["norms"], theirs["norms"], rtol=1e-5)
    np.testing.assert_allclose(ours["params"][1], theirs["params"][1], atol=1e-5, rtol=1e-5)
    assert ours["params"][0].shape == (0, 4)


def test_largest_or_zero_of_nothing_is_zero_and_nan_propagates() -> None:
    cx = lm.Graph()
    empty = cx.tensor((0, 3)).set(np.zeros((0, 3), np.float32))
    x = cx.tensor((2, 2)).set(np.array([[1.0, np.nan], [3.0, 0.0]], np.float32))
    outputs = [optim.largest_or_zero(t.abs()).retrieve() for t in (empty, x, x[0, :1])]
    cx.execute()
    assert outputs[0].numpy() == 0.0 and np.isnan(outputs[1].numpy())
    assert outputs[2].numpy() == 1.0


# ------------------------------------------------------------------ execute_debug
def _gather_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    table = cx.tensor((5, 3)).set(np.arange(15, dtype=np.float32).reshape(5, 3))
    index = cx.tensor((2,), dtype=lm.int32)
    return cx, index, table.gather(index).retrieve()


def test_execute_debug_records_a_failed_run_and_the_next_run_is_right(capsys) -> None:  # noqa: ANN001
    cx, index, rows = _gather_graph()
    index.set(np.array([1, 4], np.int32))
    cx.execute_debug()
    np.testing.assert_array_equal(rows.numpy(), [[3, 4, 5], [12, 13, 14]])
    index.set(np.array([1, 9], np.int32))
    with pytest.raises(lm.ExecutionError, match="out of range"):
        cx.execute_debug()
    assert cx.failed_run is not None and "ExecutionError" in cx.failed_run
    with pytest.raises(lm.ExecutionError, match="the last execute\\(\\) failed"):
        rows.numpy()  # no stale outputs of the good run
    index.set(np.array([0, 2], np.int32))
    cx.execute_debug()
    assert cx.failed_run is None
    np.testing.assert_array_equal(rows.numpy(), [[0, 1, 2], [6, 7, 8]])
    assert "Gather" in capsys.readouterr().out  # it still prints each op


def test_execute_debug_waits_for_the_graph_lock() -> None:
    cx, index, rows = _gather_graph()
    index.set(np.array([2, 3], np.int32))
    finished = threading.Event()

    def debug_run() -> None:
        cx.execute_debug()
        finished.set()

    with cx.lock:  # another thread's set/execute/read sequence
        worker = threading.Thread(target=debug_run)
        worker.start()
        time.sleep(0.2)
        assert not finished.is_set()
    worker.join(timeout=30)
    assert finished.is_set()
    np.testing.assert_array_equal(rows.numpy(), [[6, 7, 8], [9, 10, 11]])


# ------------------------------------------------------------------ reference memory
HUGE = 2**40


def test_reference_runtime_raises_out_of_memory_error_naming_the_node() -> None:
    """numpy's bare MemoryError for a dim of 2**40 becomes OutOfMemoryError (an
    ExecutionError and a MemoryError) naming the node, its shape, dtype and bytes."""
    cx = lm.Graph()
    cx.set_dim("k", 6)
    out = (cx.iota(var("z") % 7, ("k",)) * 2).retrieve()
    cx.execute()
    cx.set_dim("k", HUGE)
    with pytest.raises(lm.errors.OutOfMemoryError) as caught:
        cx.execute()
    assert isinstance(caught.value, lm.ExecutionError) and isinstance(caught.value, MemoryError)
    message = str(caught.value)
    assert f"Iota (node {out.node.inputs[0].source}" in message
    assert f"shape ({HUGE},)" in message and "int32" in message
    assert f"{4 * HUGE} bytes" in message and f"'k': {HUGE}" in message
    cx.set_dim("k", 5)
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), [0, 2, 4, 6, 8])

"""Kernels that read only stable inputs (parameters given as read-only arrays, constants)
run once and are reused (luminal/backends/cpu/invariants.py): values against numpy and
torch when parameters change between runs, a writeable array edited in place, a training
loop, a dim changing inside one plan, and the number of kernels each run calls."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.training import SGD, TrainStep, losses

EPS = 1e-5


def folded_layer(cx: lm.Graph) -> tuple[lm.GraphTensor, ...]:
    """x @ (w * gamma / sqrt(var + eps)) + beta, relu: a BatchNorm folded into a product,
    the folding computed from parameters only."""
    x = cx.tensor((4, 8), name="x")
    w = cx.tensor((8, 6), name="w")
    gamma = cx.tensor((6,), name="gamma")
    var = cx.tensor((6,), name="var")
    beta = cx.tensor((6,), name="beta")
    scale = gamma * (var + EPS).sqrt().reciprocal()
    y = ((x @ (w * scale)) + beta).relu().retrieve()
    return x, w, gamma, var, beta, y


def folded_reference(x, w, gamma, var, beta) -> np.ndarray:
    return np.maximum(x @ (w * (gamma / np.sqrt(var + EPS))) + beta, 0)


def frozen(array: np.ndarray) -> np.ndarray:
    """A read-only array: the promise that lets the runtime reuse what depends on it."""
    array.flags.writeable = False
    return array


def params(rng: np.random.Generator) -> list[np.ndarray]:
    return [
        frozen(rng.standard_normal((8, 6)).astype(np.float32)),
        frozen(rng.standard_normal(6).astype(np.float32)),
        frozen(rng.random(6).astype(np.float32) + 0.5),
        frozen(rng.standard_normal(6).astype(np.float32)),
    ]


def reused(cx: lm.Graph) -> frozenset[int]:
    """The nodes the plan used last reuses."""
    plan = list(cx.compiled.plans.values())[-1]
    return plan.reuse.nodes


def test_parameters_set_again_are_seen() -> None:
    """A new array for a parameter, and the same array changed and set() again, both
    reach the output on the next run; the reused values are recomputed."""
    rng = np.random.default_rng(0)
    x, *ps, y = folded_layer(lm.Graph())
    cx = x.graph
    values = params(rng)
    for tensor, value in zip(ps, values, strict=True):
        tensor.set(value)
    cx.compile(lm.CPUCompiler())
    for step in range(8):
        data = rng.standard_normal((4, 8)).astype(np.float32)
        x.set(data)
        if step == 4:  # a new array
            values[0] = frozen(values[0] * -2)
            ps[0].set(values[0])
        if step == 6:  # the same array, unlocked, changed in place, locked and set again
            values[2].flags.writeable = True
            values[2] *= 3
            ps[2].set(frozen(values[2]))
        cx.execute()
        np.testing.assert_allclose(y.numpy(), folded_reference(data, *values), rtol=1e-5, atol=1e-5)
        if step in (2, 5, 7):  # reuse is planned again after a parameter changed
            assert reused(cx), "the parameter-only kernels should be reused"
    report = cx.memory_report()  # the folded weight (8 x 6 floats) is held between runs
    assert report["reused_results_bytes"] >= 8 * 6 * 4
    parts = ("arena_bytes", "outputs_bytes", "reused_results_bytes")
    assert report["peak_bytes"] == sum(report[k] for k in parts)


def test_nothing_reused_while_no_input_changes() -> None:
    """Executing again on the same (read-only) data reruns every kernel: nothing tells
    parameters from data until some input changes."""
    rng = np.random.default_rng(1)
    x, *ps, y = folded_layer(lm.Graph())
    for tensor, value in zip(ps, params(rng), strict=True):
        tensor.set(value)
    x.set(frozen(rng.standard_normal((4, 8)).astype(np.float32)))
    x.graph.compile(lm.CPUCompiler())
    for _ in range(3):
        x.graph.execute()
    assert not reused(x.graph)


def kernels_called(text: str) -> int:
    """Kernel calls in LUMINAL_DEBUG=2's report (one line per kernel the runner calls)."""
    return len(re.findall(r"^\[luminal\] segment \d+ \S+ [\d.]+ ms$", text, re.M))


def test_parameter_kernels_are_not_called_again(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Counted from the runner's own per-kernel report: once reuse is planned, a run calls
    only the kernels that read the data; a parameter's set() makes the next run call
    them all again."""
    monkeypatch.setenv("LUMINAL_DEBUG", "2")
    rng = np.random.default_rng(2)
    x, *ps, y = folded_layer(lm.Graph())
    cx = x.graph
    values = params(rng)
    for tensor, value in zip(ps, values, strict=True):
        tensor.set(value)
    x.set(rng.standard_normal((4, 8)).astype(np.float32))
    cx.compile(lm.CPUCompiler())
    total = sum(len(s.kernels) for s in cx.compiled.segments)

    def step(gamma: np.ndarray | None = None) -> int:
        """One run on new data (and a new gamma); the kernels it called."""
        capfd.readouterr()
        data = rng.standard_normal((4, 8)).astype(np.float32)
        x.set(data)
        if gamma is not None:
            values[1] = gamma
            ps[1].set(gamma)
        cx.execute()
        np.testing.assert_allclose(y.numpy(), folded_reference(data, *values), rtol=1e-5, atol=1e-5)
        return kernels_called(capfd.readouterr().err)

    # x changes in two runs in a row (counting the compile-time check's run if there
    # was one): it is volatile, the plan reuses the rest and computes it once
    warm_up = [step() for _ in range(3)]
    skipped = len(reused(cx))
    assert skipped >= 1
    assert warm_up[-1] in (total, total - skipped)
    counts = [step(), step(), step(frozen(values[1] + 1)), step()]
    # reused, reused, gamma changed (all computed), reused again
    assert counts == [total - skipped, total - skipped, total, total - skipped]


def test_reused_kernel_follows_a_dim_inside_one_plan() -> None:
    """A kernel reading no input (an arange of a symbolic length) is reused, yet a new
    size of its dim within the same bucketed plan computes it again."""
    cx = lm.Graph()
    x = cx.tensor(("n", 3))
    ramp = (cx.arange("n").cast(lm.float32) * 2.0).expand_dim(1, 3)
    past = cx.tensor(("p",))  # a dim no output uses: planned at its bucket
    y = (x + ramp).retrieve()
    total = past.sum().retrieve()
    rng = np.random.default_rng(3)
    cx.compile(lm.CPUCompiler())
    for n, p in [(4, 5), (4, 6), (4, 7), (4, 9)]:
        data = rng.standard_normal((n, 3)).astype(np.float32)
        x.set(data)
        past.set(np.arange(p, dtype=np.float32))
        cx.execute()
        want = data + 2.0 * np.arange(n, dtype=np.float32)[:, None]
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
        assert float(total.numpy()) == pytest.approx(p * (p - 1) / 2)


def test_training_with_a_stable_input_matches_torch() -> None:
    """SGD with momentum through a layer whose weight is divided by sqrt(v + eps) of a
    stable input v: the reused kernels (v's part) and the updated parameters (handed over
    every step, so never reused) give torch's losses and weights."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((5, 3)).astype(np.float32) * 0.5
    b0 = rng.standard_normal(3).astype(np.float32) * 0.1
    v0 = rng.random(3).astype(np.float32) + 0.5
    batches = [
        (
            rng.standard_normal((8, 5)).astype(np.float32),
            rng.standard_normal((8, 3)).astype(np.float32),
        )
        for _ in range(6)
    ]
    cx = lm.Graph()
    w = cx.tensor((5, 3), name="w").set(w0)
    b = cx.tensor((3,), name="b").set(b0)
    v = cx.tensor((3,), name="v").set(frozen(v0.copy()))
    x = cx.tensor(("batch", 5))
    t = cx.tensor(("batch", 3))
    pred = x @ (w * (v + EPS).sqrt().reciprocal()) + b
    step = TrainStep(losses.mse_loss(pred, t), (x, t), SGD([w, b], lr=0.1, momentum=0.9))
    ours = [step(xb, tb) for xb, tb in batches]
    assert reused(cx), "v's kernels should be reused"

    tw = torch.tensor(w0, requires_grad=True)
    tb_ = torch.tensor(b0, requires_grad=True)
    opt = torch.optim.SGD([tw, tb_], lr=0.1, momentum=0.9)
    theirs = []
    for xb, tb in batches:
        opt.zero_grad()
        out = torch.from_numpy(xb) @ (tw / torch.sqrt(torch.from_numpy(v0) + EPS)) + tb_
        loss = torch.nn.functional.mse_loss(out, torch.from_numpy(tb))
        loss.backward()
        opt.step()
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), tb_.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_function_reads_reused_output_and_its_readers_rerun() -> None:
    """A Python Function reading a reused output (in its own array) gets the current
    value on every run, and the kernels after it, which a Function makes volatile, are
    computed every run even when they read only parameters through it."""
    from luminal import ops

    calls = []

    def double(a: np.ndarray) -> np.ndarray:
        calls.append(1)
        return a * 2

    cx = lm.Graph()
    x = cx.tensor((3,))
    w = cx.tensor((3,)).set(frozen(np.array([1.0, 4.0, 9.0], np.float32)))
    root = w.sqrt()  # reused
    doubled = cx.add_node(ops.Function("double", double), [root], (3,), lm.float32)
    y = ((doubled + 1.0) * x).retrieve()
    cx.compile(lm.CPUCompiler())
    rng = np.random.default_rng(5)
    start = len(calls)
    for _ in range(5):
        data = rng.standard_normal(3).astype(np.float32)
        x.set(data)
        cx.execute()
        np.testing.assert_allclose(y.numpy(), (np.array([2.0, 4.0, 6.0]) + 1.0) * data, rtol=1e-6)
    assert len(calls) - start == 5
    assert reused(cx), "sqrt(w) should be reused"


def test_writeable_parameter_edited_in_place_is_seen() -> None:
    """A parameter given as a writeable array may be edited in place without set(): every
    run reads it afresh (nothing depending on it is reused), as before reuse existed."""
    rng = np.random.default_rng(6)
    cx = lm.Graph()
    x = cx.tensor((4, 8))
    w = cx.tensor((8, 8))
    y = (x @ (w.transpose(0, 1) * 2.0).contiguous()).retrieve()
    weight = rng.random((8, 8)).astype(np.float32)
    w.set(weight)
    cx.compile(lm.CPUCompiler())
    for _ in range(5):
        data = rng.random((4, 8)).astype(np.float32)
        x.set(data)
        cx.execute()
        np.testing.assert_allclose(y.numpy(), data @ (weight.T * 2.0), rtol=1e-5, atol=1e-6)
        weight -= 0.1  # in place, no set()

"""TrainStep(..., data_parallel=True) on the `local` backend: equal to full-batch
training, ranks that built different graphs, rank-0-only logging and checkpoints."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
import luminal.distributed as dist
from luminal.errors import DistributedError
from luminal.training import SGD, TrainStep, fit, losses
from tests.distributed import workloads


@pytest.mark.parametrize("name", sorted(workloads.SCENARIOS))
def test_local_data_parallel_equals_full_batch(name: str) -> None:
    """Reference runtime, 2 ranks started from different weights: the same parameters
    and losses as one process on the whole batch, and bit-identical ranks."""
    oracle = workloads.train(name, False)
    results = dist.run_local(lambda: workloads.train(name, True, seed=dist.rank()), 2)
    for result in results:
        workloads.assert_matches(result, oracle)
    for first, second in zip(results[0]["params"], results[1]["params"], strict=True):
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("name", ["sgd", "uneven"])
def test_local_compiled_data_parallel_writes_gradients_into_the_bucket(
    name: str, compiled_oracle: dict
) -> None:
    """CPU runtime, 2 ranks: the backward kernels write every gradient and the loss's
    share straight into the all-reduced bucket (nothing is copied in), and training
    still equals one process on the full batch, the ranks bit-identical."""

    def body() -> tuple[dict, int, int]:
        step = workloads.build(name, True, lm.CPUCompiler(), seed=dist.rank())
        _, _, size, steps = workloads.SCENARIOS[name]
        losses_ = [step(x, y) for x, y in workloads.batches(steps, size)]
        params = [step.graph.input_data[p.node_id].copy() for p in step.params]
        (layout,) = step.graph.compiled._buckets(step.graph).values()
        placed = len(layout.placed) if not layout.copied else -1
        return {"params": params, "losses": np.array(losses_)}, placed, len(params)

    results = dist.run_local(body, 2)
    for result, placed, count in results:
        assert placed == count + 1  # every gradient and the loss, no copy
        workloads.assert_matches(result, compiled_oracle[name])
    for first, second in zip(results[0][0]["params"], results[1][0]["params"], strict=True):
        np.testing.assert_array_equal(first, second)


def test_different_graphs_are_named_on_every_rank() -> None:
    errors: dict[int, str] = {}

    def body() -> None:
        try:
            workloads.build("sgd", True, hidden=16 + dist.rank())
        except DistributedError as error:
            errors[dist.rank()] = str(error)

    dist.run_local(body, 2)
    message = (
        "TrainStep(data_parallel=True): the ranks built different graphs: rank 0 has "
        "parameter 0 'weight' (16, 4) float32, rank 1 has parameter 0 'weight' (17, 4) "
        "float32 (entry 1; 5 vs 5 entries)"
    )
    assert errors == {0: message, 1: message}
    # the same step builds and trains once the graphs agree
    dist.run_local(lambda: workloads.train("uneven", True), 2)


def test_mixed_precision_data_parallel_equals_full_batch() -> None:
    """bf16 autocast: the averaged gradients feed the same float32 master weights."""

    def run(data_parallel: bool) -> list[np.ndarray]:
        cx = lm.Graph()
        with workloads._SEEDING:
            lm.nn.manual_seed(0)
            model = lm.nn.Sequential(
                cx, lm.nn.Linear(cx, 4, 16), lm.nn.Tanh(), lm.nn.Linear(cx, 16, 3)
            )
        step = TrainStep.build(
            model, losses.cross_entropy, functools.partial(SGD, lr=0.1, momentum=0.9),
            ("batch", 4), compiler=None, mixed_precision="bf16", data_parallel=data_parallel,
        )  # fmt: skip
        for x, y in workloads.batches(6, 16):
            step(x, y)
        return [step.graph.input_data[p.node_id].copy() for p in step.params]

    oracle = run(False)
    for params in dist.run_local(lambda: run(True), 2):
        for got, want in zip(params, oracle, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-3)


def test_fit_logs_and_saves_on_rank_0_only(tmp_path: Path) -> None:
    logs: dict[int, list[str]] = {0: [], 1: []}
    path = tmp_path / "checkpoint.safetensors"

    def body() -> tuple:
        step = workloads.build("sgd", True, seed=dist.rank())
        data = workloads.batches(4, 16)
        history = fit(
            step, data, epochs=2, eval_fn=lambda: {"calls": 1.0}, progress=False,
            log=logs[dist.rank()].append, save_path=path,
        )  # fmt: skip
        params = [step.graph.input_data[p.node_id].copy() for p in step.params]
        return history.losses, params, step

    results = dist.run_local(body, 2)
    assert logs[0] == ["step 4: calls 1.0000", "step 8: calls 1.0000"] and logs[1] == []
    assert results[0][0] == results[1][0] and len(results[0][0]) == 8
    saved = lm.weights.load_safetensors(path)
    np.testing.assert_array_equal(saved["param.0"], results[0][1][0])
    assert int(saved["optimizer.step"]) == 8 and "momentum_buffer.1" in saved

    # a fresh pair of ranks resumes from the checkpoint: rank 0 reads, rank 1 receives
    def resume() -> list[np.ndarray]:
        step = workloads.build("sgd", True, seed=5 + dist.rank())
        step.load(path)
        return [step.graph.input_data[p.node_id] for p in step.params]

    for params in dist.run_local(resume, 2):
        for got, want in zip(params, results[0][1], strict=True):
            np.testing.assert_array_equal(got, want)

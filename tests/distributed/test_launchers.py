"""Real multi-process jobs: `mpiexec -n 2` (MPI backend) and `torchrun --nproc-per-node
2` (gloo), one thread per rank, compiled with lm.CPUCompiler(): collectives exact on both
ranks, data-parallel training equal to full-batch training, and a rank that raises or
dies ending the job with an error well within the timeout."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.distributed import launch, workloads
from tests.distributed.test_collectives import check_collectives

JOB_TIMEOUT = 120  # seconds for a whole job: start-up, compiling 4 steps, training


@pytest.fixture(scope="module")
def mpi_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, np.ndarray]]:
    folder = tmp_path_factory.mktemp("mpi")
    job = launch.mpiexec("train+collectives", folder, JOB_TIMEOUT)
    assert job.returncode == 0, job.stdout + job.stderr
    return launch.results(folder)


def test_mpi_collectives_are_exact_on_both_ranks(mpi_results: list) -> None:
    assert [int(r["world_size"]) for r in mpi_results] == [2, 2]
    # one machine: the test's bucket and the 5 TrainSteps' are in shared memory
    assert [int(r["shared_buckets"]) for r in mpi_results] == [6, 6]
    check_collectives(mpi_results)


@pytest.mark.parametrize("name", sorted(workloads.SCENARIOS))
def test_mpi_data_parallel_equals_full_batch(
    name: str, mpi_results: list, compiled_oracle: dict
) -> None:
    """20 SGD-momentum steps, AdamW, accumulation over 2 micro-batches, and a batch of
    15 split 8 + 7: within 1e-5 of one process on the full batch, ranks bit-identical."""
    first, second = (workloads.unpack(r, name) for r in mpi_results)
    workloads.assert_matches(first, compiled_oracle[name])
    for a, b in zip(first["params"], second["params"], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first["losses"], second["losses"])


def test_mpi_optimizer_is_sharded(mpi_results: list, compiled_oracle: dict) -> None:
    """On one machine each rank updates its range of the parameters and holds only that
    range's optimizer state (ZeRO-1): the ranks' states add up to one process's, about
    half each. With accumulation every rank keeps the whole step."""
    for name in workloads.SCENARIOS:
        whole = sum(a.size for a in compiled_oracle[name]["state"].values())
        held = [int(r[f"{name}_state_elements"]) for r in mpi_results]
        if name == "accumulate":
            assert held == [whole, whole]
        else:
            assert sum(held) == whole and max(held) < 0.75 * whole, (name, held, whole)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_mpi_sharded_checkpoint_holds_the_whole_state(
    name: str, mpi_results: list, compiled_oracle: dict
) -> None:
    """Rank 0's checkpoint of the sharded step gathers every rank's range: parameters and
    optimizer state within 1e-5 of one process's on the full batch. A step built from
    other weights that loads it saves the same file, and both continue identically."""
    first = mpi_results[0]

    def saved(tag: str) -> dict[str, np.ndarray]:
        prefix = f"{name}_{tag}_"
        return {k[len(prefix) :]: v for k, v in first.items() if k.startswith(prefix)}

    checkpoint, again = saved("saved"), saved("resaved")
    oracle = compiled_oracle[name]
    for key, array in oracle["state"].items():
        np.testing.assert_allclose(checkpoint[key], array, rtol=0, atol=1e-5, err_msg=key)
    for index, param in enumerate(oracle["params"]):
        np.testing.assert_allclose(checkpoint[f"param.{index}"], param, rtol=0, atol=1e-5)
    assert sorted(again) == sorted(checkpoint)
    for key, array in checkpoint.items():
        np.testing.assert_array_equal(again[key], array, err_msg=key)
    for result in mpi_results:
        for index in range(len(oracle["params"])):
            np.testing.assert_array_equal(
                result[f"{name}_continued_param{index}"],
                result[f"{name}_loaded_continued_param{index}"],
            )


def test_mpi_data_parallel_on_the_reference_runtime(
    mpi_results: list, compiled_oracle: dict
) -> None:
    """Uncompiled (compiler=None), the bucket Function is called with the gradients and
    the ranks still read each other's shared buckets: 20 SGD-momentum steps within 1e-5
    of one process on the full batch, ranks bit-identical."""
    first, second = (workloads.unpack(r, "reference_sgd") for r in mpi_results)
    workloads.assert_matches(first, compiled_oracle["sgd"])
    for a, b in zip(first["params"], second["params"], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first["losses"], second["losses"])


@pytest.mark.parametrize("how", ["fail", "die"])
def test_mpi_failing_rank_ends_the_job(how: str, tmp_path: Path) -> None:
    """Rank 1 raises (or exits with status 3) before its 5th step while rank 0 waits in
    the gradient all-reduce; the job ends non-zero seconds after that, far from the
    60 s timeout, and a raised error reaches the log from both ranks."""
    job = launch.mpiexec(how, tmp_path, JOB_TIMEOUT, LUMINAL_DISTRIBUTED_TIMEOUT="60")
    ended = time.time()
    stop = re.search(r"rank 1 stops at ([\d.]+)", job.stderr)
    assert stop is not None, job.stdout + job.stderr
    assert job.returncode != 0 and ended - float(stop.group(1)) < 15, job.stdout + job.stderr
    assert not list(tmp_path.glob("rank*.npz"))
    if how == "fail":
        assert "ValueError: rank 1 fails on purpose at step 5" in job.stderr
        assert (
            "DistributedError: all_reduce on rank 0 of 2: rank 1 failed: ValueError: "
            "rank 1 fails on purpose at step 5" in job.stderr
        ), job.stderr


def test_torchrun_gloo_data_parallel(tmp_path: Path, compiled_oracle: dict) -> None:
    job = launch.torchrun("train+collectives", tmp_path, JOB_TIMEOUT)
    assert job.returncode == 0, job.stdout + job.stderr
    results = launch.results(tmp_path)
    check_collectives(results)
    for name in workloads.SCENARIOS:
        for saved in results:
            workloads.assert_matches(workloads.unpack(saved, name), compiled_oracle[name])


@pytest.mark.slow
def test_train_digits_example_data_parallel(tmp_path: Path) -> None:
    """The example under mpiexec: rank 0 alone reports, and 6 epochs learn."""
    command = [str(launch.BIN / "mpiexec"), "-launcher", "fork", "-n", "2", sys.executable]
    args = ["-m", "luminal.examples.train_digits", "--data-parallel", "--no-progress"]
    args += ["--epochs", "6", "--eval-every", "6"]
    job = launch._run([*command, *args], JOB_TIMEOUT, {})
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.stdout.count("data parallel over 2 ranks (mpi)") == 1, job.stdout
    accuracy = re.findall(r"Test accuracy: ([\d.]+)%", job.stdout)
    assert len(accuracy) == 1 and float(accuracy[0]) > 80, job.stdout

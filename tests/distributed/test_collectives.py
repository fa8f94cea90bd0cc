"""Collectives on the `local` backend (threads of this process), the single-process
world, launcher detection, argument checks and timeouts."""

from __future__ import annotations

import time

import numpy as np
import pytest

import luminal.distributed as dist
from luminal.errors import DistributedError, DTypeError, LuminalError, ShapeError
from tests.distributed import worker, workloads


def check_collectives(results: list[dict[str, np.ndarray]]) -> None:
    """Every rank holds exactly what numpy computes for each collective."""
    expected = workloads.expected_collectives(len(results))
    for rank, got in enumerate(results):
        for name, want in expected.items():
            if name == "reduce_scatter":
                want = np.split(want, len(results))[rank]
            assert got[name].dtype == want.dtype, name
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on rank {rank}")


def test_local_collectives_are_exact_on_every_rank() -> None:
    check_collectives(dist.run_local(worker.collectives, 2))


def test_local_ranks_are_bound_per_thread() -> None:
    seen = dist.run_local(lambda: (dist.rank(), dist.world_size(), dist.backend()), 3)
    assert seen == [(0, 3, "local"), (1, 3, "local"), (2, 3, "local")]
    assert not dist.is_initialized()  # the threads' ranks do not leak into this thread


def test_single_process_world_leaves_data_alone() -> None:
    assert not dist.is_initialized()
    with pytest.raises(DistributedError, match="not initialised"):
        dist.rank()
    try:
        dist.init("local")
        assert (dist.rank(), dist.world_size()) == (0, 1)
        data = np.arange(4, dtype=np.float32)
        assert dist.all_reduce(data, op="avg") is data
        np.testing.assert_array_equal(data, np.arange(4))
        np.testing.assert_array_equal(dist.all_gather(data), data[None])
        np.testing.assert_array_equal(dist.reduce_scatter(data), data)
        dist.barrier()
        with pytest.raises(DistributedError, match="already initialised with backend 'local'"):
            dist.init("mpi")
    finally:
        dist.shutdown()
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("environ", "backend"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, "gloo"),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, "mpi"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, "mpi"),
        ({"PMIX_RANK": "3"}, "mpi"),
        ({"RANK": "0"}, "local"),
        ({}, "local"),
    ],
)
def test_backend_follows_the_launcher(environ: dict[str, str], backend: str) -> None:
    assert dist.detect_backend(environ) == backend


def test_bad_arguments_name_the_op() -> None:
    def body() -> None:
        with pytest.raises(LuminalError, match="all_reduce: .* not C-contiguous"):
            dist.all_reduce(np.zeros((4, 4), np.float32)[:, ::2])
        with pytest.raises(DTypeError, match="op 'avg' needs a float array"):
            dist.all_reduce(np.zeros(3, np.int32), op="avg")
        with pytest.raises(LuminalError, match="unknown op 'mean'"):
            dist.all_reduce(np.zeros(3, np.float32), op="mean")
        with pytest.raises(ShapeError, match=r"reduce_scatter: the first dim of \(3,\)"):
            dist.reduce_scatter(np.zeros(3, np.float32))
        with pytest.raises(LuminalError, match="root 2 is not a rank"):
            dist.broadcast(np.zeros(3, np.float32), root=2)
        data = np.ones(3, np.float32)  # the group still works after refused calls
        return dist.all_reduce(data)

    for result in dist.run_local(body, 2):
        np.testing.assert_array_equal(result, [2, 2, 2])


def test_timeout_raises_then_the_next_group_works() -> None:
    """Rank 1 never joins: rank 0's barrier fails within its timeout, naming the op, the
    rank and the deadline; its group is then unusable; a new group works."""
    errors: dict[int, str] = {}

    def body() -> None:
        if dist.rank() == 0:
            start = time.monotonic()
            with pytest.raises(DistributedError) as caught:
                dist.barrier(timeout=0.3)
            assert time.monotonic() - start < 2.0
            errors[0] = str(caught.value)
            with pytest.raises(DistributedError, match="unusable"):
                dist.all_reduce(np.ones(2, np.float32))

    dist.run_local(body, 2)
    assert errors[0] == (
        "barrier on rank 0 of 2: the other ranks did not join or finish it within 0.3 s"
    )
    check_collectives(dist.run_local(worker.collectives, 2))


def test_a_raising_rank_stops_its_peers_at_once() -> None:
    """Rank 1 raises before a collective; rank 0, waiting in it with a 60 s timeout,
    gets a DistributedError naming rank 1's error immediately; run_local re-raises the
    original error."""
    peer_errors: list[DistributedError] = []

    def body() -> None:
        if dist.rank() == 1:
            raise ValueError("rank 1 gives up")
        try:
            dist.all_reduce(np.ones(3, np.float32))
        except DistributedError as error:
            peer_errors.append(error)
            raise

    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 gives up"):
        dist.run_local(body, 2, timeout=60)
    assert time.monotonic() - start < 5
    assert [str(e) for e in peer_errors] == [
        "all_reduce on rank 0 of 2: rank 1 failed: ValueError: rank 1 gives up"
    ]

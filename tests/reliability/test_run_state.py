"""Per-run state (issue 11, item 3): a fault belongs to the run that made it, a failed run
never leaves a partial output behind, and one graph executed from two threads never gives
wrong numbers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import luminal as lm
from luminal import ops

TABLE = np.arange(15, dtype=np.float32).reshape(5, 3)
GOOD = np.array([4, 0, 2, 1], np.int32)


def _embedding(compiled: bool) -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    """rows of a 5-row table, times 2; returns (graph, indices input, output)."""
    cx = lm.Graph()
    table = cx.tensor((5, 3)).set(TABLE)
    indices = cx.tensor((4,), dtype=lm.int32).set(GOOD)
    out = (table.gather(indices) * 2.0).retrieve()
    if compiled:
        cx.compile(lm.CPUCompiler())
    return cx, indices, out


def test_gather_fault_stays_with_the_graph_that_made_it():
    """Two graphs loading the same cached library: only the one with a bad index raises,
    with the op, the index and the table size; both then run correctly."""
    first, first_indices, first_out = _embedding(compiled=True)
    second, _, second_out = _embedding(compiled=True)
    assert first.compiled.library is second.compiled.library  # one library, shared
    first_indices.set(np.array([0, 7, 1, 2], np.int32))
    with pytest.raises(lm.ExecutionError, match=r"Gather .*index 7 .*table of 5 rows"):
        first.execute()
    second.execute()
    np.testing.assert_array_equal(second_out.numpy(), TABLE[GOOD] * 2)
    first_indices.set(GOOD)
    first.execute()
    np.testing.assert_array_equal(first_out.numpy(), TABLE[GOOD] * 2)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_failed_run_leaves_no_partial_output(compiled: bool):
    """Both runtimes raise ExecutionError for a negative index; numpy() then raises and
    says why instead of returning what the failed run wrote; the next good run is right."""
    cx, indices, out = _embedding(compiled)
    cx.execute()
    indices.set(np.array([1, 2, -1, 3], np.int32))
    with pytest.raises(lm.ExecutionError, match=r"Gather.*out of range.*5 rows"):
        cx.execute()
    with pytest.raises(lm.ExecutionError, match="the last execute\\(\\) failed"):
        out.numpy()
    indices.set(GOOD)
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), TABLE[GOOD] * 2)


def test_interrupted_python_segment_discards_outputs():
    """A Function op that raises midway through a compiled run (after C kernels wrote
    part of the outputs): no output is readable until the next good run."""
    calls = {"fail": True}

    def maybe_fail(x: np.ndarray) -> np.ndarray:
        if calls["fail"]:
            raise KeyboardInterrupt
        return x + 1

    cx = lm.Graph()
    x = cx.tensor((8,)).set(np.arange(8, dtype=np.float32))
    early = (x * 3.0).retrieve()
    late = cx.add_node(ops.Function("maybe fail", maybe_fail), [early], shape=(8,)).retrieve()
    calls["fail"] = False
    cx.compile(lm.CPUCompiler())
    calls["fail"] = True
    with pytest.raises(KeyboardInterrupt):
        cx.execute()
    with pytest.raises(lm.ExecutionError, match="KeyboardInterrupt"):
        early.numpy()
    calls["fail"] = False
    cx.execute()
    np.testing.assert_array_equal(late.numpy(), np.arange(8) * 3.0 + 1)


def _threads(count: int, work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            work(index)
        except BaseException as error:  # reported in the main thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


SIZE = 1 << 17  # large enough that a run is parallel and two runs would overlap


def _scaled_graph() -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor]:
    cx = lm.Graph()
    x = cx.tensor((SIZE,)).set(np.zeros(SIZE, np.float32))
    out = (x.exp() * 2.0 + x).retrieve()
    cx.compile(lm.CPUCompiler())
    return cx, x, out


def _expected(x: np.ndarray) -> np.ndarray:
    return np.exp(x) * 2.0 + x


def test_two_threads_holding_the_graph_lock_get_their_own_results():
    """The documented pattern: set, execute and numpy() under `cx.lock`."""
    cx, x, out = _scaled_graph()
    inputs = [np.full(SIZE, value, np.float32) for value in (0.25, -1.5)]
    wrong: list[int] = []

    def work(index: int) -> None:
        for _ in range(200):
            with cx.lock:
                x.set(inputs[index])
                cx.execute()
                got = out.numpy()
            if not np.allclose(got, _expected(inputs[index]), rtol=1e-5):
                wrong.append(index)

    _threads(2, work)
    assert wrong == []


def test_concurrent_runs_never_mix_two_results():
    """Without the user's lock each thread may read the other's run, but every result is
    one whole run's (execute and numpy() are atomic): never a torn buffer."""
    cx, x, out = _scaled_graph()
    inputs = [np.full(SIZE, value, np.float32) for value in (0.25, -1.5)]
    expected = [_expected(array) for array in inputs]
    torn: list[int] = []

    def work(index: int) -> None:
        for _ in range(200):
            x.set(inputs[index])
            cx.execute()
            got = out.numpy()
            if not any(np.allclose(got, want, rtol=1e-5) for want in expected):
                torn.append(index)

    _threads(2, work)
    assert torn == []
    x.set(inputs[1])
    cx.execute()
    np.testing.assert_allclose(out.numpy(), expected[1], rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_scatter_fault_names_the_op_and_the_next_run_is_right(compiled: bool):
    """index_add (the gradient of an embedding lookup) checks its indices the same way."""
    cx = lm.Graph()
    base = cx.tensor((3, 2)).set(np.zeros((3, 2), np.float32))
    indices = cx.tensor((2,), dtype=lm.int32).set(np.array([0, 2], np.int32))
    updates = cx.tensor((2, 2)).set(np.ones((2, 2), np.float32))
    out = cx.add_node(ops.Scatter(), [base, indices, updates]).retrieve()
    if compiled:
        cx.compile(lm.CPUCompiler())
    indices.set(np.array([0, 3], np.int32))
    with pytest.raises(lm.ExecutionError, match=r"Scatter.*out of range.*3 rows"):
        cx.execute()
    indices.set(np.array([2, 2], np.int32))
    cx.execute()
    np.testing.assert_array_equal(out.numpy(), [[0, 0], [0, 0], [2, 2]])

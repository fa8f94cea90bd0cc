"""Compiling copies no weight (issue 12, step 5): verification's reference graph and the
search's candidate graphs are structure copies whose inputs are read-only views of the
user's arrays, and the measuring process receives the arrays out of band. Verification
still catches a wrong program."""

from __future__ import annotations

import os
import pickle
import threading
import tracemalloc

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cpu import lowering
from luminal.backends.cpu.codegen import KernelSource
from luminal.search.driver import shared_inputs
from luminal.search.programs import ProgramAlternatives
from luminal.search.protocol import read_message, write_message

MiB = 1 << 20
SIDE = 4096  # a 64 MiB float32 weight


def _matmul_graph(side: int) -> tuple[lm.Graph, lm.GraphTensor, np.ndarray, lm.GraphTensor]:
    """relu(x @ w) with a (side, side) weight and x of symbolic batch, left without data
    (verification seeds it)."""
    cx = lm.Graph()
    x = cx.tensor(("batch", side))
    weight = np.random.default_rng(0).standard_normal((side, side), dtype=np.float32)
    w = cx.tensor((side, side)).set(weight)
    out = (x @ w).relu().retrieve()
    return cx, x, weight, out


def _check_runs(cx: lm.Graph, x: lm.GraphTensor, weight: np.ndarray, out: lm.GraphTensor) -> None:
    data = np.random.default_rng(1).uniform(-1, 1, (2, weight.shape[0])).astype(np.float32)
    x.set(data)
    cx.execute()
    np.testing.assert_allclose(out.numpy(), np.maximum(data @ weight, 0), rtol=1e-3, atol=1e-3)


def test_compiling_with_verification_copies_no_weight():
    """Peak memory allocated while compiling (numpy arrays and Python objects, traced)
    stays within 0.2 x (weights + arena) + 4 MiB above the weights themselves; a deep
    copy of the graph for the reference took 64 MiB more."""
    warm, *_ = _matmul_graph(8)  # imports and lazy tables are not compile memory
    warm.compile(lm.CPUCompiler())
    cx, x, weight, out = _matmul_graph(SIDE)
    tracemalloc.start()
    try:
        cx.compile(lm.CPUCompiler(verify=True))
        extra = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    x.set(np.zeros((3, SIDE), np.float32))  # the dims verification used
    arena = cx.memory_report()["arena_bytes"]
    assert extra <= 0.2 * (weight.nbytes + arena) + 4 * MiB, f"{extra / MiB:.1f} MiB"
    _check_runs(cx, x, weight, out)


def _skip_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every generated kernel returns at once: a wrong program that still builds."""
    lower_kernels = lowering.lower_kernels

    def wrong(graph: lm.Graph, **options: bool) -> lowering.Lowering:
        result = lower_kernels(graph, **options)
        for node_id, kernel in result.kernels.items():
            head = kernel.source.index(f"void {kernel.name}(")
            body = kernel.source.index("{\n", head) + 2
            source = kernel.source[:body] + "    return;\n" + kernel.source[body:]
            result.kernels[node_id] = KernelSource(
                kernel.name, source, kernel.buffers, kernel.nodes, kernel.scratch
            )
        return result

    monkeypatch.setattr(lowering, "lower_kernels", wrong)


def test_verification_with_shared_weights_still_catches_a_wrong_program(monkeypatch):
    """The reference reads the user's arrays in place; a program that skips its work is
    refused, the graph keeps the reference runtime and its weight is intact and writable."""
    cx, x, weight, out = _matmul_graph(64)
    (w_node,) = cx.input_data
    before = cx.input_data[w_node].copy()
    _skip_every_kernel(monkeypatch)
    with pytest.raises(lm.CompileError, match="compiled graph is (wrong|nan)"):
        cx.compile(lm.CPUCompiler(verify=True))
    assert cx.compiled is None and cx.input_data[w_node].flags.writeable
    np.testing.assert_array_equal(cx.input_data[w_node], before)
    monkeypatch.undo()
    _check_runs(cx, x, weight, out)  # the reference runtime
    cx.compile(lm.CPUCompiler(verify=True))
    _check_runs(cx, x, weight, out)


def test_search_verifies_a_graph_whose_input_has_no_data(tmp_path):
    """The search seeds the reference once; the final check lends the graph those arrays
    (it raised 'input ... has no data' when an input had none) and takes them back."""
    cx, x, weight, out = _matmul_graph(32)
    (w_node,) = cx.input_data
    # a budget that lets at least one trial finish on a loaded machine
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(8), cache=tmp_path, progress=False)
    cx.compile(compiler)
    assert compiler.search_record.trials and cx.compiled is not None
    assert list(cx.input_data) == [w_node]
    _check_runs(cx, x, weight, out)


def test_structure_copy_shares_inputs_read_only_and_rewrites_apart():
    cx, x, weight, out = _matmul_graph(16)
    copy = cx.structure_copy()
    (node_id,) = cx.input_data
    shared = copy.input_data[node_id]
    assert np.shares_memory(shared, weight) and not shared.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        shared[0, 0] = 1.0
    assert cx.input_data[node_id].flags.writeable
    assert not cx.structure_copy(inputs=False).input_data
    nodes, version = dict(cx.nodes), cx.nodes.version
    copy.compile(lm.CPUCompiler())
    assert dict(cx.nodes) == nodes and cx.nodes.version == version and cx.compiled is None
    _check_runs(cx, x, weight, out)  # the original still runs on the reference runtime


def test_search_alternatives_share_the_weights():
    cx, _, weight, _ = _matmul_graph(16)
    alternatives = ProgramAlternatives(cx, ("algebra", "structure", "cpu"))
    candidate = alternatives.graph_for({})
    for graph in (alternatives.base, candidate):
        (array,) = graph.input_data.values()
        assert np.shares_memory(array, weight) and not array.flags.writeable
    _, arrays = shared_inputs(alternatives.base)
    assert all(np.shares_memory(a, weight) for a in arrays.values())


def _drain(reader: int, into: bytearray, total: list[int]) -> None:
    """Read the pipe until it closes, into a buffer allocated beforehand."""
    view = memoryview(into)
    while count := os.readv(reader, [view]):
        total[0] += count


def test_protocol_sends_arrays_without_copying_them():
    """A 16 MiB array goes to the pipe from its own memory (the writer allocates almost
    nothing), then arrives equal, with its layout and read-only flag; a message without
    arrays keeps the plain length-prefixed pickle."""
    big = np.arange(4 * MiB, dtype=np.float32)
    read_only = big.view()
    read_only.flags.writeable = False
    message = {"big": read_only, "fortran": np.asfortranarray(np.eye(3)), "strided": big[::4096]}
    reader, writer = os.pipe()
    total = [0]
    drain = threading.Thread(target=_drain, args=(reader, bytearray(MiB), total))
    drain.start()
    tracemalloc.start()
    try:
        write_message(writer, message)
        written = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        os.close(writer)
        drain.join()
        os.close(reader)
    assert total[0] > big.nbytes and written < MiB, f"{written / MiB:.2f} MiB"

    reader, writer = os.pipe()
    received: list = []
    thread = threading.Thread(target=lambda: received.append(read_message(reader)))
    thread.start()
    write_message(writer, message)
    thread.join()
    (got,) = received
    np.testing.assert_array_equal(got["big"], big)
    assert not got["big"].flags.writeable
    assert got["fortran"].flags.f_contiguous
    np.testing.assert_array_equal(got["fortran"], np.eye(3))
    np.testing.assert_array_equal(got["strided"], big[::4096])
    write_message(writer, {"status": "ready"})
    header, body = os.read(reader, 8), os.read(reader, 1 << 16)
    assert int.from_bytes(header, "little") == len(body)
    assert pickle.loads(body) == {"status": "ready"}
    os.close(reader)
    os.close(writer)

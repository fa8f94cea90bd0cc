"""The measuring process (started by `measure.worker_command`). It receives compiled
candidates, runs each on real buffers (warm-up, then the minimum of several timed
samples) and sends back the times and the outputs. A candidate that crashes or hangs
takes down only this process; the search notices and starts another."""

from __future__ import annotations

import importlib
import math
import pickle
import time
import traceback
from typing import Any

from luminal.search.outputs import read_outputs
from luminal.search.protocol import read_message, write_message

SHARED: dict[str, Any] = {}  # token -> object, the last one received


def measure(request: dict[str, Any]) -> dict[str, Any]:
    shared = None
    if "shared" in request:  # the input arrays, sent once per measuring process
        token, arrays = request["shared"]
        if arrays is not None:
            SHARED.clear()
            SHARED[token] = arrays
        shared = SHARED[token]
    for module, function, args in request.get("setup", ()):
        getattr(importlib.import_module(module), function)(*args)
    candidate = request["candidate"]
    if isinstance(candidate, bytes):
        candidate = pickle.loads(candidate)
    graph, compiled = candidate
    if shared is not None:
        graph.input_data = dict(shared)
    compiled.build()
    graph.compiled = compiled
    start = time.perf_counter()
    graph.execute()  # warm-up: run plan, page faults, thread pool
    first = time.perf_counter() - start
    start = time.perf_counter()
    graph.execute()
    second = time.perf_counter() - start
    # tiny graphs are timed over several runs per sample, so one sample spans >= min_sample
    inner = max(1, math.ceil(request["min_sample"] / max(min(first, second), 1e-7)))
    best, slack = request.get("best"), request["slack"]
    samples: list[float] = []
    status = "ok"
    for _ in range(request["repeats"]):
        start = time.perf_counter()
        for _ in range(inner):
            graph.execute()
        samples.append((time.perf_counter() - start) / inner)
        if best is not None and len(samples) >= 2 and min(samples) > best * slack:
            status = "slower"  # clearly slower than the best so far: stop early
            break
    return {
        "status": status,
        "seconds": min(samples),
        "samples": samples,
        "outputs": read_outputs(graph, request["roots"]),
    }


def main(channel: int) -> None:
    """Answer requests from stdin on `channel` (the original stdout, which the bootstrap
    set aside before importing luminal) until stdin closes."""
    write_message(channel, {"status": "ready"})
    while True:
        request = read_message(0)
        if request is None:
            return
        try:
            reply = measure(request)
        except Exception as error:  # reported to the search as this candidate's failure
            reply = {"status": "error", "detail": f"{type(error).__name__}: {error}"}
            traceback.print_exc()
        write_message(channel, reply)

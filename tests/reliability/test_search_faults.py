"""Issue 11, item 7: measured search always falls back. A measuring process that never
starts, dies, is killed, hangs or sends garbage while the static program is timed leaves
a compiled graph that runs the static (`fast`) program and a search record that says
why; the worker never imports a `luminal` from the working directory; hostile search
cache entries are ignored and rewritten; the report prints no control characters."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import luminal as lm
from luminal.cli import main as luminal_main
from luminal.search import measure
from luminal.search.cache import SearchCache, SearchRecord, Trial

# Fault scripts speak just enough of the protocol (length-prefixed pickles on stdout).
PROTOCOL = """\
import os, pickle, signal, struct, sys, time
def send_raw(data):
    os.write(1, struct.pack("<Q", len(data)) + data)
def send(message):
    send_raw(pickle.dumps(message))
def ready():
    send({"status": "ready"})
def read_request():
    (length,) = struct.unpack("<Q", sys.stdin.buffer.read(8))
    sys.stdin.buffer.read(length)
"""

FAULTS = {  # name: (script body, trial status, part of the trial's detail)
    "exits at once": ("sys.exit(3)", "crashed", "exited with status 3 before it was ready"),
    "garbage instead of ready": (
        "os.write(1, b'Welcome!\\n'); time.sleep(60)",
        "crashed",
        "instead of saying it was ready",
    ),
    "killed while timing": (
        "ready(); read_request(); os.kill(os.getpid(), signal.SIGKILL)",
        "crashed",
        "killed by SIGKILL",
    ),
    "dies while timing": ("ready(); read_request(); os._exit(7)", "crashed", "status 7"),
    "garbage bytes": (
        "ready(); read_request(); os.write(1, b'Segmentation fault\\n'); time.sleep(60)",
        "crashed",
        "header announcing",
    ),
    "undecodable pickle": (
        "ready(); read_request(); send_raw(b'\\x80\\x04cno_such_module\\nx\\n.'); time.sleep(60)",
        "crashed",
        "do not unpickle",
    ),
    "reply of the wrong type": (
        "ready(); read_request(); send(['ok', 1e-3]); time.sleep(60)",
        "crashed",
        "malformed reply",
    ),
    "negative time": (
        "ready(); read_request(); send({'status': 'ok', 'seconds': -1.0, 'outputs': {}})",
        "crashed",
        "malformed time",
    ),
    "no outputs": (
        "ready(); read_request(); send({'status': 'ok', 'seconds': 1e-3, 'outputs': {}})",
        "wrong",
        "missing",
    ),
}


def fake_worker(body: str) -> Callable[[], list[str]]:
    return lambda: [sys.executable, "-c", PROTOCOL + body]


def build(seed: int = 0) -> tuple[lm.Graph, lm.GraphTensor, lm.GraphTensor, np.ndarray]:
    """relu(x @ w): inputs of 128 KiB, more than a pipe holds, so a request to a child
    that stops reading would block a writer without a deadline."""
    rng = np.random.default_rng(seed)
    xv = rng.uniform(-1, 1, (128, 256)).astype(np.float32)
    wv = rng.uniform(-1, 1, (256, 64)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xv.shape).set(xv)
    w = cx.tensor(wv.shape).set(wv)
    return cx, x, (x @ w).relu().retrieve(), wv


def assert_runs_correctly(cx: lm.Graph, x: lm.GraphTensor, y: lm.GraphTensor, wv) -> None:
    """The compiled graph matches numpy, and so does the next run on new inputs."""
    for seed in (1, 2):
        xv = np.random.default_rng(seed).uniform(-1, 1, (128, 256)).astype(np.float32)
        x.set(xv)
        cx.execute()
        np.testing.assert_allclose(y.numpy(), np.maximum(xv @ wv, 0), rtol=1e-4, atol=1e-4)


def report(directory: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert luminal_main(["search-report", "--cache-dir", str(directory)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failing_measuring_process_falls_back_to_the_static_program(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    body, status, detail = FAULTS[fault]
    monkeypatch.setattr(measure, "worker_command", fake_worker(body))
    cx, x, y, wv = build()
    compiler = lm.CPUCompiler(mode="optimal", cache=tmp_path)
    with pytest.warns(UserWarning, match="the static program is used"):
        cx.compile(compiler)
    record = compiler.search_record
    assert record.chosen == {} and not record.reusable
    assert record.stopped_by.startswith(f"measuring failed (static program {status}")
    (trial,) = record.trials  # the failure was not retried in the kernel stage
    assert (trial.config, trial.status) == ({}, status) and detail in trial.detail
    assert detail in report(tmp_path, capsys)
    assert SearchCache(tmp_path).load(record.key) is None  # the next compile searches
    assert_runs_correctly(cx, x, y, wv)


def test_an_interpreter_that_cannot_be_started_falls_back(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(measure, "worker_command", lambda: [str(tmp_path / "no-python")])
    cx, x, y, wv = build()
    compiler = lm.CPUCompiler(mode="optimal", cache=tmp_path)
    with pytest.warns(UserWarning, match="could not start the measuring process"):
        cx.compile(compiler)
    assert "FileNotFoundError" in compiler.search_record.trials[0].detail
    assert_runs_correctly(cx, x, y, wv)


def test_a_failed_search_is_not_reused(tmp_path, monkeypatch) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(measure, "worker_command", fake_worker("sys.exit(3)"))
        cx, _, _, _ = build()
        # a budget no load spends before the static program is timed (the crash then
        # ends the search at once): a short one could run out first, a "time budget"
        failed = lm.CPUCompiler(mode=lm.TimeBudget(60), cache=tmp_path)
        with pytest.warns(UserWarning, match="static program is used"):
            cx.compile(failed)
    assert not failed.search_record.reusable
    cx, x, y, wv = build()  # the real measuring process again
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(1.5), cache=tmp_path)
    cx.compile(compiler)
    # a budgeted compile reuses any record it loads, a cut-short one included
    assert not compiler.cache_hit
    record = compiler.search_record
    assert record.reusable and record.created > failed.search_record.created
    stored = SearchCache(tmp_path).load(record.key)  # it replaced the failed one
    assert stored is not None and stored.created == record.created
    assert_runs_correctly(cx, x, y, wv)


def test_a_slow_start_up_is_a_timeout_not_a_wait(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(measure, "STARTUP", 1.0)
    monkeypatch.setattr(measure, "worker_command", fake_worker("time.sleep(60)"))
    cx, x, y, wv = build()
    compiler = lm.CPUCompiler(mode="optimal", cache=tmp_path)
    with pytest.warns(UserWarning, match="did not start within 1.0 s"):
        cx.compile(compiler)
    assert compiler.search_record.stopped_by.startswith("measuring failed (static program timeout")
    assert "did not start within 1.0 s" in report(tmp_path, capsys)
    assert_runs_correctly(cx, x, y, wv)


def time_waiting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """(start, end) of every call that waits for the measuring process: a request
    (start-up included) and closing it."""
    calls: list[tuple[float, float]] = []
    for name in ("request", "close"):
        method = getattr(measure.MeasuringProcess, name)

        def timed(self: measure.MeasuringProcess, *args: Any, _method=method, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return _method(self, *args, **kwargs)
            finally:
                calls.append((began, time.perf_counter()))

        monkeypatch.setattr(measure.MeasuringProcess, name, timed)
    return calls


@pytest.mark.parametrize(
    ("hang", "detail"),
    [
        ("time.sleep(60)", "did not start within"),  # never says it is ready
        ("ready(); time.sleep(60)", "no result within"),  # never reads the request
        ("ready(); read_request(); time.sleep(60)", "no result within"),  # never answers
    ],
)
def test_waiting_for_the_measuring_process_respects_the_budget(
    hang: str, detail: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child costs at most what the budget has left when it is first asked. The
    work before that (passes, compiling the static program) and after it (the final
    build and check) is the same with any child and takes what the machine gives it:
    the budget leaves room for it, however loaded the machine."""
    began = time.perf_counter()
    build()[0].compile(lm.CPUCompiler(mode="fast"))
    static = time.perf_counter() - began
    budget = max(2.5, 6 * static)
    monkeypatch.setattr(measure, "worker_command", fake_worker(hang))
    calls = time_waiting(monkeypatch)
    cx, x, y, wv = build()
    start = time.perf_counter()
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(budget), cache=tmp_path)
    cx.compile(compiler)
    elapsed = time.perf_counter() - start
    record = compiler.search_record
    assert record.chosen == {} and record.stopped_by == "time budget"
    (trial,) = record.trials  # timed out once; the kernel stage did not wait again
    assert trial.status == "timeout" and detail in trial.detail
    asked = min(call for call, _ in calls) - start
    waited = sum(end - began for began, end in calls)
    # what was left (at least the half second a measurement always gets), plus
    # scheduling slack: not STARTUP's 60 s, the static program's 600 s, nor a wait to close
    assert waited < max(budget - asked, 0.5) + 0.3
    assert elapsed < budget + 15 * static + 5  # nothing else waits for the child
    assert_runs_correctly(cx, x, y, wv)


def test_the_worker_never_imports_luminal_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "hostile luminal imported"
    project = tmp_path / "project"
    (project / "luminal" / "search").mkdir(parents=True)
    trap = f"open({str(marker)!r}, 'w').close()\nraise SystemExit(9)\n"
    for module in ("__init__.py", "search/__init__.py", "search/worker.py"):
        (project / "luminal" / module).write_text(trap)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", ["", *sys.path])  # as under `python -c` or a REPL
    monkeypatch.setenv("PYTHONPATH", str(project))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(lm.__file__)))
    path = measure.worker_path()
    assert path[0] == package_root and path[-1] == os.getcwd()  # the working dir last
    cx, x, y, wv = build()
    compiler = lm.CPUCompiler(mode=lm.TimeBudget(30), cache=tmp_path / "search")
    cx.compile(compiler)
    assert not marker.exists()
    assert compiler.search_record.trials[0].status == "ok"  # the real worker measured it
    assert compiler.search_record.reusable
    assert_runs_correctly(cx, x, y, wv)


# ---------------------------------------------------------------- the search cache
def a_record(key: str = "k" * 32, label: str = "6 nodes") -> SearchRecord:
    return SearchRecord(
        key=key,
        label=label,
        backend="cpu",
        mode="'optimal'",
        cpu="test cpu",
        version=lm.__version__,
        chosen={"region0": "program1"},
        best_seconds=1e-3,
        baseline_seconds=2e-3,
        search_seconds=1.5,
        sites={"region0": ["program0", "program1"]},
        trials=[Trial({}, "ok", 2e-3), Trial({"region0": "program1"}, "ok", 1e-3)],
    )


def _edited(**fields: object) -> Callable[[Path], None]:
    def plant(path: Path) -> None:
        data = json.loads(a_record().to_json())
        data.update(fields)
        path.write_text(json.dumps(data))

    return plant


def _sparse(path: Path, size: int) -> None:
    path.write_text("{")
    os.truncate(path, size)


HOSTILE_ENTRIES: dict[str, Callable[[Path], None]] = {
    "deep array": lambda p: p.write_text("[" * 200_000 + "]" * 200_000),
    "deep field": _edited(label=json.loads("[" * 500 + "]" * 500)),
    "deep value in JSON text": lambda p: p.write_text(
        '{"format": 1, "chosen": ' + "[" * 200_000 + "]" * 200_000 + "}"
    ),
    "chosen option not a string": _edited(chosen={"region0": 1}),
    "chosen option a substring": _edited(sites={"region0": "program1x"}),
    "time a string": _edited(best_seconds="fast"),
    "time a bool": _edited(baseline_seconds=True),
    "trials not a list": _edited(trials="ok"),
    "trial config a list": _edited(trials=[{"config": [], "status": "ok", "seconds": 1.0}]),
    "extra field": _edited(owner="attacker"),
    "missing field": lambda p: p.write_text(
        json.dumps({k: v for k, v in json.loads(a_record().to_json()).items() if k != "cpu"})
    ),
    "huge number": lambda p: p.write_text(a_record().to_json().replace("1.5", "9" * 5000)),
    "not UTF-8": lambda p: p.write_bytes(b'{"format": 1, "label": "\xff\xfe"}'),
    "symlink loop": lambda p: os.symlink(p.name, p),
    "symlink to an endless file": lambda p: os.symlink("/dev/zero", p),
    "FIFO": lambda p: os.mkfifo(p),
    "too large": lambda p: _sparse(p, 64 << 20),
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE_ENTRIES))
def test_a_hostile_cache_entry_is_ignored_and_rewritten(hostile: str, tmp_path, capsys) -> None:
    cache = SearchCache(tmp_path)
    record = a_record()
    HOSTILE_ENTRIES[hostile](cache.path(record.key))
    assert cache.load(record.key) is None
    assert "unreadable entry (ignored; re-searched on use)" in report(tmp_path, capsys)
    assert cache.store(record) == cache.path(record.key)
    assert cache.path(record.key).is_file() and not cache.path(record.key).is_symlink()
    assert cache.load(record.key) == record
    assert "chosen:\n    region0 = program1" in report(tmp_path, capsys)


def test_a_corrupt_entry_is_searched_again_and_replaced(tmp_path, capsys) -> None:
    cx, _, _, _ = build()
    first = lm.CPUCompiler(mode=lm.TimeBudget(1.5), cache=tmp_path)
    cx.compile(first)
    entry = SearchCache(tmp_path).path(first.search_record.key)
    entry.write_text('{"format": 1, "trials": ' + "[" * 100_000)
    cx, x, y, wv = build()
    second = lm.CPUCompiler(mode=lm.TimeBudget(1.5), cache=tmp_path)
    cx.compile(second)
    assert not second.cache_hit
    rewritten = SearchCache(tmp_path).load(first.search_record.key)
    assert rewritten.created == second.search_record.created  # this search's record
    assert_runs_correctly(cx, x, y, wv)


def test_an_unwritable_cache_costs_the_cache_not_the_compile(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    cx, x, y, wv = build()
    first = lm.CPUCompiler(mode=lm.TimeBudget(1.5), cache=tmp_path / "file" / "search")
    with pytest.warns(UserWarning, match="search result not cached"):  # under a regular file
        cx.compile(first)
    assert_runs_correctly(cx, x, y, wv)
    (tmp_path / "search" / f"{first.search_record.key}.json").mkdir(parents=True)
    cx, x, y, wv = build()
    second = lm.CPUCompiler(mode=lm.TimeBudget(1.5), cache=tmp_path / "search")
    with pytest.warns(UserWarning, match="search result not cached"):  # a directory squats
        cx.compile(second)
    assert not second.cache_hit
    assert_runs_correctly(cx, x, y, wv)


def test_the_report_prints_no_control_characters(tmp_path, capsys) -> None:
    evil = "\x1b[2J\x1b]0;owned\x07\rfake line\u202eevil\x00"
    record = a_record(label=f"model {evil}")
    record.trials[1].detail = f"detail {evil}"
    record.stopped_by = f"space exhausted {evil}"
    SearchCache(tmp_path).store(record)
    (tmp_path / "name\x1b[31m.json").write_text("{}")
    text = report(tmp_path, capsys)
    assert not [c for c in text if not c.isprintable() and c != "\n"]
    assert "model \\x1b[2J\\x1b]0;owned\\x07\\rfake line\\u202eevil\\x00" in text
    assert "detail \\x1b[2J" in text and "name\\x1b[31m: unreadable entry" in text

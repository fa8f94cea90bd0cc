"""The benchmark dashboard (bench/run_all.py): a quick run of one small real bench writes
the JSON schema, the Markdown table and a valid PNG; the history flags a regression; the
interleaved-rounds timer takes medians of turns (on a fake clock). No timing assertions."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import matplotlib.image
import pytest

from bench import timing
from bench.dashboard.history import write_history
from bench.dashboard.report import ROW_KEYS, SCHEMA

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png(path: Path) -> None:
    """PNG signature, an IHDR chunk with a valid CRC and a non-empty size, and an image
    matplotlib reads back."""
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body, (crc,) = data[12 : 12 + 4 + length], struct.unpack(">I", data[29:33])
    assert zlib.crc32(body) == crc
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 50
    assert matplotlib.image.imread(path).shape[:2] == (height, width)


def test_quick_run_writes_schema_table_and_chart(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO / "bench" / "run_all.py"), "--quick"]
    command += ["--only", "reference_runtime", "--out", str(tmp_path), "--notes", "test run"]
    job = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    (path,) = tmp_path.glob("*-quick.json")
    record = json.loads(path.read_text())
    assert record["schema"] == SCHEMA and record["threads"] == 2 and record["notes"] == "test run"
    assert record["timing"]["quick"] and record["timing"]["rounds"] == 2
    assert record["machine"]["cores"] >= 1 and record["machine"]["cpu"]
    commit = record["luminal"]["commit"]  # HEAD then; others may have committed since
    found = subprocess.run(["git", "cat-file", "-t", commit], cwd=REPO, capture_output=True)
    assert found.stdout.strip() == b"commit"
    assert record["peers"]["llama.cpp"].startswith(("absent", "installed, but not run"))
    assert [b["status"] for b in record["benches"]] == ["ok"]
    rows = record["rows"]
    assert [r["case"] for r in rows] == ["MLP 784-512-512-10, b=64", "matmul 1024^3"]
    for row in rows:
        assert tuple(row) == ROW_KEYS
        assert row["bench"] == "reference_runtime" and row["peer"] == "numpy"
        assert row["luminal_s"] > 0 and row["peer_s"] > 0
        assert row["ratio"] == pytest.approx(row["luminal_s"] / row["peer_s"])
        assert row["luminal_min_s"] <= row["luminal_s"] and row["peer_min_s"] <= row["peer_s"]
        assert row["threads"] == 2 and row["commit"] == record["luminal"]["commit"]
    table = path.with_suffix(".md").read_text()
    assert "| bench | case | luminal | peer | peer time | ratio |" in table
    assert "| reference_runtime | matmul 1024^3 |" in table
    assert f"![luminal against its peers]({path.with_suffix('.png').name})" in table
    check_png(path.with_suffix(".png"))
    assert not (tmp_path / "latest.md").exists()  # a quick run is not the latest figure


def fake_run(date: str, ratio: float, compile_s: float) -> dict:
    row = dict.fromkeys(ROW_KEYS)
    compared = {**row, "bench": "cpu", "case": "matmul", "peer": "numpy", "luminal_s": ratio}
    compared |= {"peer_s": 1.0, "ratio": ratio}
    alone = {**row, "bench": "compile", "case": "MLP cold", "luminal_s": compile_s}
    return {
        "schema": SCHEMA,
        "date": date,
        "machine": {"slug": "test-cpu-2c"},
        "luminal": {"commit": date[-5:]},
        "timing": {"quick": False},
        "notes": "",
        "rows": [compared, alone],
    }


def test_history_flags_a_ratio_going_the_wrong_way(tmp_path: Path) -> None:
    runs = [("2026-01-01T00:00", 1.0, 2.0), ("2026-01-02T00:00", 1.5, 1.0)]
    for date, ratio, compile_s in runs:
        (tmp_path / f"{date[:10]}.json").write_text(json.dumps(fake_run(date, ratio, compile_s)))
    written = write_history(tmp_path)
    assert written == [tmp_path / "history.md", tmp_path / "history-test-cpu-2c.png"]
    lines = (tmp_path / "history.md").read_text().splitlines()
    (matmul,) = [line for line in lines if line.startswith("| cpu | matmul | numpy |")]
    assert "| 1.00× | 1.50× | **worse** 1.50× |" in matmul
    (compile_row,) = [line for line in lines if line.startswith("| compile | MLP cold | — |")]
    assert "| 2 s | 1 s | better 0.50× |" in compile_row
    check_png(tmp_path / "history-test-cpu-2c.png")


def test_rounds_interleave_contestants_and_take_medians(monkeypatch) -> None:
    """A fake clock that advances only when a contestant runs: each round calls the
    contestants in turn, fast ones in batches, and the result is the median per call.
    Costs are powers of two so that the fake clock's sums are exact."""
    clock, calls = [0.0], []
    costs = {"slow": iter([0.5, 0.5, 0.375, 0.875, 0.25]), "fast": None}

    def contestant(name: str):  # noqa: ANN202
        def run() -> None:
            calls.append(name)
            clock[0] += next(costs[name]) if costs[name] else 2**-10

        return run

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    times = timing.Rounds(3, batch_seconds=10 * 2**-10).times(
        {"slow": contestant("slow"), "fast": contestant("fast")}
    )
    # warm-up and calibration call each twice; then rounds of 1 slow call, 10 fast calls
    assert calls == ["slow"] * 2 + ["fast"] * 2 + (["slow"] + ["fast"] * 10) * 3
    assert times["slow"] == 0.375 and times["slow"].samples == (0.375, 0.875, 0.25)
    assert times["fast"] == 2**-10


def test_rounds_fit_a_slow_case_into_the_budget(monkeypatch) -> None:
    """Rounds that would pass the budget are cut, but never below `least`."""
    clock = [0.0]

    def slow() -> None:
        clock[0] += 4.0

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    assert len(timing.Rounds(7, budget=1000).times({"slow": slow})["slow"].samples) == 7
    assert len(timing.Rounds(7, budget=20).times({"slow": slow})["slow"].samples) == 5
    assert len(timing.Rounds(7, budget=5).times({"slow": slow})["slow"].samples) == 3
    assert timing.Rounds(2, budget=5).count(4.0) == 2

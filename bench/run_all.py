"""The benchmark dashboard: every bench, one JSON schema, a table, a chart, the history.

Runs every bench (or some), records the results in one JSON schema, writes a Markdown
table, a PNG chart and the history over past runs.

    .venv/bin/python bench/run_all.py [--only cpu,models] [--quick] [--threads 2]
                                      [--rounds 5] [--out bench/results] [--notes TEXT]
                                      [--logs DIR]

Each bench runs in a fresh process (its own memory, thread settings and imports) with
luminal and every peer at `--threads` threads, and times its contestants in interleaved
rounds, reporting medians (bench/timing.py's `Rounds`). Writes
`<out>/<date>-<machine>.json`, `.md` and `.png`; a full run (not `--quick`, no `--only`)
also updates `latest.md`/`latest.png`, and `history.md` plus `history-<machine>.png` are
rebuilt from every full run in `<out>`. See docs/benchmarks.md.

This lives beside the benches rather than in the luminal package: the benches import
each other as scripts from bench/, which an installed package cannot see.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUND_BUDGET = 60.0  # seconds of timed rounds per case before it gets fewer rounds
# name -> what it measures (the module is bench/<name>.py and has `collect`)
BENCHES = {
    "cpu": "kernels and the MLP against PyTorch eager and numpy",
    "training": "MLP and LeNet-5 train step and forward against PyTorch eager",
    "models": "MiniLM, Llama, Qwen2, Whisper, YOLOv8n against transformers / PyTorch eager",
    "onnx": "ONNX import (MiniLM, ResNet-18) against onnxruntime",
    "attention": "causal attention prefill, fused and unfused, against torch SDPA",
    "search": "mode='optimal' against the static lowering, numpy's BLAS and PyTorch eager",
    "quantized": "GGUF decode and prefill against llama.cpp when llama-cpp-python is installed",
    "distributed": "2 MPI ranks against 1 (1 thread each)",
    "compile_times": "compile times, cold and cached, in fresh processes",
    "compile_time": "Generic + EGraph compile of a 32-layer Llama-shaped graph",
    "compile_memory": "MiniLM compile with verification (memory in the note)",
    "reference_runtime": "the numpy reference runtime against numpy",
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated, of: {', '.join(BENCHES)}")
    parser.add_argument("--quick", action="store_true", help="few rounds, small cases")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, help="timed rounds (default 5; quick: 2)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--notes", default="", help="recorded with the run (e.g. load)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per bench")
    parser.add_argument("--logs", type=Path, help="keep each bench's output here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {unknown}; known: {', '.join(BENCHES)}")
    args.names = names
    return args


# ------------------------------------------------------------------ child process
def child(args: argparse.Namespace) -> None:
    """Run one bench's `collect` and write its rows as JSON to `args.rows_file`."""
    # bench/ goes last on the path: bench/onnx.py must not shadow the onnx package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]
    from timing import Rounds

    from luminal.backends.cpu import toolchain

    spec = importlib.util.spec_from_file_location(f"bench_{args.child}", HERE / f"{args.child}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    toolchain.set_num_threads(args.threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(args.threads)
    rows = module.collect(Rounds(args.rounds, budget=ROUND_BUDGET), args.quick, args.threads)
    args.rows_file.write_text(json.dumps([row.to_dict() for row in rows]))


# ------------------------------------------------------------------ parent process
def run_bench(name: str, args: argparse.Namespace, scratch: Path) -> tuple[dict, list[dict]]:
    """One bench in a fresh process; its status and its rows (none if it failed)."""
    rows_file, log = scratch / f"{name}.json", scratch / f"{name}.log"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name]
    command += ["--threads", str(args.threads), "--rounds", str(args.rounds)]
    command += ["--rows-file", str(rows_file)] + (["--quick"] if args.quick else [])
    threads = str(args.threads)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env |= dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), threads)
    # OpenBLAS's idle threads spin ~2^28 cycles (tens of ms) after a call, longer than the
    # rounds' pause, and took the cores from whichever contestant ran next (numpy's BLAS
    # and luminal's alike): the MLP row read 0.3 to 72 ms for the same program. 2^4 cycles
    # lets them sleep at once, for every contestant.
    env["OPENBLAS_THREAD_TIMEOUT"] = "4"
    start = time.perf_counter()
    status, error = "ok", ""
    with log.open("w") as out:
        try:
            job = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                 timeout=args.timeout, check=False)  # fmt: skip
            if job.returncode != 0:
                status, error = "failed", _last_line(log)
        except subprocess.TimeoutExpired:
            status, error = "failed", f"timed out after {args.timeout:.0f} s"
    seconds = time.perf_counter() - start
    if status != "ok":
        tail = log.read_text(errors="replace").splitlines()[-15:]
        print("\n".join(f"  | {line}" for line in tail), flush=True)
    rows = json.loads(rows_file.read_text()) if status == "ok" else []
    return {"name": name, "status": status, "seconds": seconds, "error": error}, rows


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def record_run(args: argparse.Namespace) -> dict:
    """Run the selected benches and return the run's record (see dashboard/report.py)."""
    from dashboard import machine
    from dashboard.report import SCHEMA, stamp_rows

    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    record = {
        "schema": SCHEMA,
        "date": now.isoformat().replace("+00:00", "Z"),
        "machine": machine.machine(),
        "luminal": machine.commit(),
        "threads": args.threads,
        "timing": {
            "method": (
                f"interleaved rounds, median of {args.rounds} (of 3 where {args.rounds} rounds "
                f"of a case would pass {ROUND_BUDGET:.0f} s; bench/timing.py Rounds)"
            ),
            "rounds": args.rounds,
            "quick": args.quick,
        },
        "peers": machine.peers(),
        "notes": args.notes,
        "load_average": {"start": list(os.getloadavg())},
        "benches": [],
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="luminal-dashboard-") as scratch:
        for name in args.names:
            print(f"{name}: {BENCHES[name]} ...", flush=True)
            status, rows = run_bench(name, args, Path(scratch))
            print(
                f"  {status['status']} in {status['seconds']:.0f} s {status['error']}", flush=True
            )
            record["benches"].append(status)
            record["rows"] += stamp_rows(rows, record)
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(scratch) / f"{name}.log", args.logs / f"{name}.log")
    record["load_average"]["end"] = list(os.getloadavg())
    return record


def write_outputs(record: dict, args: argparse.Namespace) -> list[Path]:
    """The run's .json/.md/.png; latest.* for a full run; the history."""
    from dashboard.chart import run_chart
    from dashboard.history import write_history
    from dashboard.report import markdown, write_json

    args.out.mkdir(parents=True, exist_ok=True)
    stamp = record["date"][:16].replace(":", "").replace("T", "-")
    stem = args.out / f"{stamp}-{record['machine']['slug']}{'-quick' if args.quick else ''}"
    png = stem.with_suffix(".png")
    write_json(record, stem.with_suffix(".json"))
    run_chart(record, png)
    stem.with_suffix(".md").write_text(markdown(record, png.name))
    written = [stem.with_suffix(".json"), stem.with_suffix(".md"), png]
    if not args.quick and not args.only:
        shutil.copyfile(png, args.out / "latest.png")
        (args.out / "latest.md").write_text(markdown(record, "latest.png"))
        written += [args.out / "latest.md", args.out / "latest.png"]
    return written + write_history(args.out)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.child:
        child(args)
        return
    record = record_run(args)
    for path in write_outputs(record, args):
        print(f"wrote {path}")
    if any(b["status"] != "ok" for b in record["benches"]):
        raise SystemExit("some benches failed: see the table's Benches section")


if __name__ == "__main__":
    main()

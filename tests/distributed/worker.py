"""One rank of a distributed test job: `python -m tests.distributed.worker MODE OUT`.

Launched by the tests under `mpiexec -n 2` or `torchrun --nproc-per-node 2`; every rank
writes what it computed to OUT/rank<r>.npz for the test to compare with its oracle.
MODE: "train" (the data-parallel scenarios, compiled), "collectives" (exact results of
every collective), "train+collectives", "fail" (rank 1 raises at its 5th step), "die"
(rank 1 exits there without a word), "tensor_parallel" (greedy decoding of the Llama
saved in OUT/model, each rank holding its shard).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import luminal as lm
import luminal.distributed as dist
from tests.distributed import workloads

FAIL_STEP = 5


def collectives() -> dict[str, np.ndarray]:
    """Each collective on rank-dependent data (results checked exactly by the test)."""
    rank = dist.rank()
    out: dict[str, np.ndarray] = {}
    for op in ("sum", "avg", "max", "min"):
        out[f"all_reduce_{op}"] = dist.all_reduce(workloads.rank_array(rank), op=op)
    out["all_reduce_int"] = dist.all_reduce(np.arange(5, dtype=np.int32) * (rank + 1))
    out["broadcast"] = dist.broadcast(workloads.rank_array(rank), root=1)
    out["all_gather"] = dist.all_gather(workloads.rank_array(rank))
    out["reduce_scatter"] = dist.reduce_scatter(workloads.rank_array(rank), op="sum")
    bucket = dist.current().bucket(12)  # MPI on one machine: in shared memory
    for op in ("sum", "avg"):
        bucket[...] = workloads.rank_array(rank).reshape(-1)
        out[f"bucket_{op}"] = dist.all_reduce(bucket, op=op).reshape(4, 3).copy()
    bucket[...] = workloads.rank_array(rank).reshape(-1)
    dist.current().fence(bucket)  # then MPI on one machine reads the peers' buckets directly
    peers = dist.current().peers(bucket)
    seen = np.stack(peers) if peers is not None else dist.all_gather(bucket)
    out["bucket_peers"] = seen.reshape(-1, 4, 3).copy()
    dist.current().fence(bucket)  # every rank has read them before any writes its bucket
    dist.barrier()
    return out


def train(out: dict[str, np.ndarray]) -> dict[str, lm.training.TrainStep]:
    """The scenarios' results; returns their steps."""
    steps = {}
    for name in workloads.SCENARIOS:
        result = workloads.train(name, True, lm.CPUCompiler(), seed=dist.rank())
        out[f"{name}_losses"] = result["losses"]
        for index, param in enumerate(result["params"]):
            out[f"{name}_param{index}"] = param
        # the optimizer state this rank holds (sharded: about half of the elements)
        out[f"{name}_state_elements"] = np.array(sum(a.size for a in result["state"].values()))
        steps[name] = result["step"]
    result = workloads.train("sgd", True, None, seed=dist.rank())  # the reference runtime
    out["reference_sgd_losses"] = result["losses"]
    for index, param in enumerate(result["params"]):
        out[f"reference_sgd_param{index}"] = param
    return steps


def checkpoint(out: dict[str, np.ndarray], name: str, step: Any, folder: Path) -> None:
    """Rank 0's checkpoint of a trained (sharded) step; the same checkpoint saved again by a
    step built from other weights that loaded it; both steps' parameters after 2 more steps."""
    path, again = folder / f"{name}.safetensors", folder / f"{name}_again.safetensors"
    step.save(path)
    fresh = workloads.build(name, True, lm.CPUCompiler(), seed=7 + dist.rank())
    fresh.load(path)
    fresh.save(again)
    for tag, saved in (("saved", path), ("resaved", again)):
        for key, array in lm.weights.load_safetensors(saved).items():
            out[f"{name}_{tag}_{key}"] = array
    for tag, trained in (("continued", step), ("loaded_continued", fresh)):
        for x, y in workloads.batches(2, 16, seed=1):
            trained(x, y)
        for index, param in enumerate(trained.params):
            out[f"{name}_{tag}_param{index}"] = trained.graph.input_data[param.node_id].copy()


def fail(how: str) -> None:
    """Train; rank 1 raises (or exits without a word) before its FAIL_STEP-th step."""
    step = workloads.build("sgd", True, lm.CPUCompiler())
    for index, (x, y) in enumerate(workloads.batches(20, 16)):
        if dist.rank() == 1 and index == FAIL_STEP:
            print(f"rank 1 stops at {time.time()}", file=sys.stderr, flush=True)
            if how == "die":
                os._exit(3)
            raise ValueError(f"rank 1 fails on purpose at step {FAIL_STEP}")
        step(x, y)


def tensor_parallel(folder: Path) -> dict[str, np.ndarray]:
    """Greedy decoding of OUT/prompt.npy by the tensor-parallel Llama in OUT/model,
    compiled: the new tokens, the logits of every step, and the shapes each rank holds."""
    model = lm.models.from_pretrained(folder / "model", lm.Graph(), tensor_parallel=True)
    session = model.session()
    steps: list[np.ndarray] = []

    def record(logits: np.ndarray, index: int) -> np.ndarray:
        steps.append(logits.copy())
        return logits

    prompt = np.load(folder / "prompt.npy")
    tokens = lm.models.generate(session, prompt, workloads.TP_NEW_TOKENS, ignore_eos=True,
                                logits_processor=record)  # fmt: skip
    shapes = {f"shape {name}": np.array(t.shape) for name, t in model.named_parameters()}
    cache = np.array(session.cache_in[0].key.numpy().shape)
    return {"tokens": tokens, "logits": np.stack(steps, 1), "cache": cache, **shapes}


def main(mode: str, folder: str) -> None:
    dist.init()
    out: dict[str, np.ndarray] = {"world_size": np.array(dist.world_size())}
    if "collectives" in mode:
        out.update(collectives())
    steps = train(out) if "train" in mode else {}
    out["shared_buckets"] = np.array(len(getattr(dist.current(), "shared", {})))
    for name in ("sgd", "adamw"):
        if name in steps:
            checkpoint(out, name, steps[name], Path(folder))
    if mode in ("fail", "die"):
        fail(mode)
    if mode == "tensor_parallel":
        out.update(tensor_parallel(Path(folder)))
    np.savez(Path(folder) / f"rank{dist.rank()}.npz", **out)
    dist.barrier()  # every rank done before any tears its group down
    dist.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

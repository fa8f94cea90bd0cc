"""Training runs that the distributed tests compare: the same model, data and optimizer,
trained on the full batch in one process or data-parallel over the ranks of a group.
Imports only numpy and luminal: MPI and torchrun workers load this module quickly."""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

import luminal as lm
from luminal.training import SGD, AdamW, TrainStep, losses

FEATURES, CLASSES = 4, 3
_SEEDING = threading.Lock()
# name -> (optimizer, accumulate, global batch, optimizer steps)
SCENARIOS: dict[str, tuple[Any, int, int, int]] = {
    "sgd": (functools.partial(SGD, lr=0.1, momentum=0.9), 1, 16, 20),
    "adamw": (functools.partial(AdamW, lr=0.01, weight_decay=0.1), 1, 16, 10),
    "accumulate": (functools.partial(SGD, lr=0.1, momentum=0.9), 2, 16, 8),
    "uneven": (functools.partial(SGD, lr=0.1, momentum=0.9), 1, 15, 8),
}

# The tiny Llama of the tensor-parallel tests (transformers' LlamaConfig fields): 4 query
# and 2 key/value heads, so 2 ranks hold 2 and 1; an odd vocabulary, so the last rank's
# share of the head is padded.
TP_LLAMA: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 251,
    "max_position_embeddings": 128,
}
TP_NEW_TOKENS = 8


def batches(count: int, size: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` different batches of Gaussian blobs (one blob per class)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (CLASSES, FEATURES))
    out = []
    for _ in range(count):
        y = rng.integers(0, CLASSES, size).astype(np.int32)
        x = (centres[y] + rng.normal(0.0, 1.0, (size, FEATURES))).astype(np.float32)
        out.append((x, y))
    return out


def build(
    name: str, data_parallel: bool, compiler: Any = None, seed: int = 0, hidden: int = 16
) -> TrainStep:
    """The scenario's TrainStep. `seed` sets the initial weights: data-parallel ranks
    built with different seeds must still start from rank 0's."""
    optimizer, accumulate, _, _ = SCENARIOS[name]
    cx = lm.Graph()
    with _SEEDING:  # local-backend ranks are threads sharing nn's generator
        lm.nn.manual_seed(seed)
        model = lm.nn.Sequential(
            cx, lm.nn.Linear(cx, FEATURES, hidden), lm.nn.Tanh(), lm.nn.Linear(cx, hidden, CLASSES)
        )
    return TrainStep.build(
        model,
        losses.cross_entropy,
        optimizer,
        ("batch", FEATURES),
        accumulate=accumulate,
        compiler=compiler,
        data_parallel=data_parallel,
    )


def train(name: str, data_parallel: bool, compiler: Any = None, seed: int = 0) -> dict:
    """Run the scenario; returns the final parameters, the loss of every call, the
    optimizer state this rank holds (by checkpoint name; a sharded optimizer holds a
    range, flat) and the step."""
    step = build(name, data_parallel, compiler, seed)
    _, accumulate, size, steps = SCENARIOS[name]
    step_losses = [step(x, y) for x, y in batches(steps * accumulate, size)]
    params = [step.graph.input_data[p.node_id].copy() for p in step.params]
    state = {
        f"{kind}.{index}": step.graph.input_data[tensor.node_id].copy()
        for kind, tensors in step.optimizer.state.items()
        for index, tensor in enumerate(tensors)
        if tensor is not None
    }
    return {"params": params, "losses": np.array(step_losses), "state": state, "step": step}


def rank_array(rank: int) -> np.ndarray:
    """A (4, 3) float32 array that differs per rank (exact in float32 sums)."""
    return (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) * (rank + 1) + rank


def expected_collectives(world_size: int) -> dict[str, np.ndarray]:
    """What every rank must hold after worker.collectives(), computed with numpy."""
    arrays = [rank_array(r) for r in range(world_size)]
    total = np.sum(arrays, axis=0)
    chunk = len(total) // world_size
    return {
        "all_reduce_sum": total,
        "all_reduce_avg": total / np.float32(world_size),
        "all_reduce_max": np.max(arrays, axis=0),
        "all_reduce_min": np.min(arrays, axis=0),
        "all_reduce_int": np.arange(5, dtype=np.int32) * sum(range(1, world_size + 1)),
        "broadcast": arrays[1],
        "all_gather": np.stack(arrays),
        "reduce_scatter": None if chunk == 0 else total,  # sliced per rank by the test
        "bucket_sum": total,  # Communicator.bucket(): MPI all-reduces it in shared memory
        "bucket_avg": total / np.float32(world_size),
        "bucket_peers": np.stack(arrays),  # every rank's bucket, read after a fence
    }


def assert_matches(result: dict, oracle: dict, atol: float = 1e-5) -> None:
    """Data-parallel training ended where full-batch training did: every parameter and
    every step's loss within `atol`."""
    assert len(result["params"]) == len(oracle["params"])
    for index, (got, want) in enumerate(zip(result["params"], oracle["params"], strict=True)):
        np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=f"parameter {index}")
    np.testing.assert_allclose(result["losses"], oracle["losses"], rtol=0, atol=atol)


def unpack(saved: dict[str, np.ndarray], name: str) -> dict:
    """A worker's saved arrays of scenario `name` as a `train` result."""
    count = sum(key.startswith(f"{name}_param") for key in saved)
    params = [saved[f"{name}_param{index}"] for index in range(count)]
    return {"params": params, "losses": saved[f"{name}_losses"]}

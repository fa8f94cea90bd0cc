"""Tensor-parallel Llama (heads and MLP columns split over 2 ranks) against transformers'
LlamaForCausalLM on the same weights: greedy tokens equal and every step's logits within
1e-4, under `mpiexec -n 2` (compiled, loading the shards from a save_pretrained folder)
and on the local backend (reference runtime, from a state dict); each rank's shard is
exactly its rows or columns of the checkpoint; sizes that do not split and layouts that
cannot be split raise errors naming them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import luminal as lm
import luminal.distributed as dist
from luminal.errors import DistributedError, LuminalError, ShapeError
from luminal.models import Gemma, Llama, Mistral, Phi3, Qwen2, generate
from luminal.models.tensor_parallel import tensor_parallel_model
from tests.distributed import launch, workloads
from tests.models.conftest import hf_greedy_continuation

ATOL = 1e-4
JOB_TIMEOUT = 120


def hf_llama(**overrides: Any) -> LlamaForCausalLM:
    """initializer_range 0.05 makes greedy decoding of random weights pick varied tokens
    with top-2 logit gaps far above float differences (as in tests/models)."""
    options = {**workloads.TP_LLAMA, "initializer_range": 0.05, "attn_implementation": "eager"}
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**options, **overrides})).eval()


@pytest.fixture(scope="module")
def prompt() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 251, (1, 6)).astype(np.int32)


def decode(model: Any, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy tokens (1, n) and each step's logits (1, n, vocab), reference runtime."""
    steps: list[np.ndarray] = []

    def record(logits: np.ndarray, index: int) -> np.ndarray:
        steps.append(logits.copy())
        return logits

    session = model.session(compile=False)
    tokens = generate(session, prompt, workloads.TP_NEW_TOKENS, ignore_eos=True,
                      logits_processor=record)  # fmt: skip
    return tokens, np.stack(steps, 1)


def assert_matches(tokens: np.ndarray, logits: np.ndarray, oracle: tuple) -> None:
    np.testing.assert_array_equal(tokens, oracle[0])
    np.testing.assert_allclose(logits, oracle[1], rtol=0, atol=ATOL)


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory, prompt) -> tuple[Path, tuple]:
    """A save_pretrained folder of the test Llama with the prompt, and transformers'
    greedy continuation of it."""
    hf = hf_llama()
    folder = tmp_path_factory.mktemp("tp_llama")
    hf.save_pretrained(folder / "model")
    np.save(folder / "prompt.npy", prompt)
    return folder, hf_greedy_continuation(hf, prompt, workloads.TP_NEW_TOKENS)


@pytest.mark.parametrize("launcher", ["mpiexec", "torchrun"])
def test_launched_tensor_parallel_llama_matches_transformers(
    launcher: str, saved_llama: tuple, tmp_path: Path, prompt
) -> None:
    """2 ranks (MPI, or gloo under torchrun), compiled for the CPU, each reading its
    shard of a save_pretrained folder: transformers' tokens and logits, the same bits
    on both ranks, a KV cache of one of the two key/value heads."""
    folder, oracle = saved_llama
    (tmp_path / "model").symlink_to(folder / "model")
    np.save(tmp_path / "prompt.npy", prompt)
    job = getattr(launch, launcher)("tensor_parallel", tmp_path, JOB_TIMEOUT)
    assert job.returncode == 0, job.stdout + job.stderr
    first, second = launch.results(tmp_path)
    assert_matches(first["tokens"], first["logits"], oracle)
    np.testing.assert_array_equal(first["logits"], second["logits"])
    np.testing.assert_array_equal(first["tokens"], second["tokens"])
    past = prompt.shape[1] + workloads.TP_NEW_TOKENS - 1
    for saved in (first, second):
        assert saved["cache"].tolist() == [1, 1, past, 16]
        assert saved["shape model.layers.0.self_attn.q_proj.weight"].tolist() == [32, 64]
        assert saved["shape lm_head.weight"].tolist() == [126, 64]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"attention_bias": True, "mlp_bias": True}, {"tie_word_embeddings": True}],
    ids=["plain", "biases", "tied"],
)
def test_local_tensor_parallel_llama_matches_transformers(overrides: dict, prompt) -> None:
    """Row-parallel biases counted once, a tied head cut from the replicated embedding."""
    hf = hf_llama(**overrides)
    oracle = hf_greedy_continuation(hf, prompt, workloads.TP_NEW_TOKENS)
    state = hf.state_dict()

    def body() -> tuple[np.ndarray, np.ndarray]:
        model = tensor_parallel_model(Llama, lm.Graph(), hf.config.to_dict())
        model.load_state_dict(state)
        return decode(model, prompt)

    results = dist.run_local(body, 2)
    for tokens, logits in results:
        assert_matches(tokens, logits, oracle)
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_shards_are_the_ranks_rows_and_columns(tmp_path: Path) -> None:
    """Read from a folder, each rank holds exactly its rows (q/k/v, gate/up, the head,
    zero-padded) or columns (o_proj, down_proj) of the checkpoint; the row-parallel
    biases live on rank 0; norms and the embedding are whole on both."""
    hf = hf_llama(attention_bias=True)
    hf.save_pretrained(tmp_path)
    full = {name: value.numpy() for name, value in hf.state_dict().items()}

    def body() -> dict[str, np.ndarray]:
        model = lm.models.from_pretrained(tmp_path, lm.Graph(), tensor_parallel=True)
        return model.state_dict()

    ranks = dist.run_local(body, 2)
    layer = "model.layers.1."
    for name in ("self_attn.q_proj.weight", "self_attn.k_proj.bias", "mlp.up_proj.weight"):
        joined = np.concatenate([r[layer + name] for r in ranks])
        np.testing.assert_array_equal(joined, full[layer + name])
    for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
        joined = np.concatenate([r[layer + name] for r in ranks], axis=1)
        np.testing.assert_array_equal(joined, full[layer + name])
    bias = layer + "self_attn.o_proj.bias"
    np.testing.assert_array_equal(ranks[0][bias], full[bias])
    np.testing.assert_array_equal(ranks[1][bias], np.zeros_like(full[bias]))
    head = np.concatenate([r["lm_head.weight"] for r in ranks])
    assert head.shape == (252, 64) and not head[251:].any()
    np.testing.assert_array_equal(head[:251], full["lm_head.weight"])
    for name in ("model.embed_tokens.weight", "model.norm.weight"):
        for rank in ranks:
            np.testing.assert_array_equal(rank[name], full[name])
    assert ranks[0][layer + "self_attn.k_proj.weight"].shape == (16, 64)


def test_sizes_that_do_not_split_are_named() -> None:
    """4 heads, 2 key/value heads and 128 MLP columns over 3 ranks."""
    errors: list[str] = []

    def body() -> None:
        graph = lm.Graph()
        before = graph.num_nodes
        with pytest.raises(ShapeError) as error:
            tensor_parallel_model(Llama, graph, workloads.TP_LLAMA)
        assert graph.num_nodes == before
        errors.append(str(error.value))

    dist.run_local(body, 3)
    assert (
        errors
        == [
            "TensorParallelLlama: tensor parallelism over 3 ranks gives each rank an equal share "
            "of the attention heads, key/value heads and MLP columns, but num_attention_heads=4 "
            "(the 64 rows of q_proj.weight (64, 64)); num_key_value_heads=2 (the 32 rows of "
            "k_proj.weight (32, 64)); intermediate_size=128 (the 128 rows of gate_proj.weight "
            "(128, 64)) are not divisible by 3"
        ]
        * 3
    )


def test_unsupported_layouts_and_mismatched_ranks_are_named(tmp_path: Path) -> None:
    phi3 = {**workloads.TP_LLAMA, "pad_token_id": 0}

    def fused() -> None:
        with pytest.raises(LuminalError, match="layer 0 has Phi3Attention and Phi3MLP"):
            tensor_parallel_model(Phi3, lm.Graph(), phi3)

    dist.run_local(fused, 2)

    errors: dict[int, str] = {}

    def mismatched() -> None:
        config = {**workloads.TP_LLAMA, "rms_norm_eps": 1e-5 * (1 + dist.rank())}
        try:
            tensor_parallel_model(Llama, lm.Graph(), config)
        except DistributedError as error:
            errors[dist.rank()] = str(error)

    dist.run_local(mismatched, 2)
    assert errors[0] == errors[1]
    assert (
        "the ranks built different graphs: rank 0 has TensorParallelLlama rms_norm_eps=1e-05, "
        "rank 1 has TensorParallelLlama rms_norm_eps=2e-05" in errors[0]
    )

    hf_llama().save_pretrained(tmp_path)
    with pytest.raises(LuminalError, match="quantize='q8_0' takes no other options"):
        lm.models.from_pretrained(tmp_path, quantize="q8_0", tensor_parallel=True)


@pytest.mark.slow
def test_llama_generate_example_tensor_parallel() -> None:
    """The example under mpiexec: rank 0 alone reports, with the same tokens as one
    process holding the whole model."""
    command = [str(launch.BIN / "mpiexec"), "-launcher", "fork", "-n", "2", sys.executable]
    args = ["-m", "luminal.examples.llama_generate", "--tensor-parallel", "--max-new-tokens", "8"]
    job = launch._run([*command, *args], JOB_TIMEOUT, {})
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.stdout.count("Tensor parallel over 2 ranks (mpi)") == 1, job.stdout
    assert "Check: one process (reference runtime) gives the same tokens" in job.stdout


@pytest.mark.parametrize(
    ("cls", "extra"),
    [
        (Mistral, {"sliding_window": 4}),
        (Qwen2, {}),
        (Gemma, {"head_dim": 16, "hidden_act": "gelu_pytorch_tanh"}),
    ],
    ids=["mistral", "qwen2", "gemma"],
)
def test_other_decoders_split_like_one_process(cls: type, extra: dict, prompt) -> None:
    """Mistral's sliding window, Qwen2's q/k/v biases, Gemma's scaled embedding and tied
    head: 2 ranks give the logits of one process (tested against transformers in
    tests/models) and its greedy tokens."""
    config = {**workloads.TP_LLAMA, **extra}
    with workloads._SEEDING:
        lm.nn.manual_seed(0)
        whole = cls(lm.Graph(), config)
    state = whole.state_dict()
    if cls is Qwen2:  # non-zero biases, so that cutting them is checked
        for name in state:
            if name.endswith("bias"):
                state[name] = np.random.default_rng(1).normal(size=state[name].shape)
        whole.load_state_dict(state)
    oracle = decode(whole, prompt)

    def body() -> tuple[np.ndarray, np.ndarray]:
        model = tensor_parallel_model(cls, lm.Graph(), config)
        model.load_state_dict(state)
        return decode(model, prompt)

    for tokens, logits in dist.run_local(body, 2):
        assert_matches(tokens, logits, oracle)


def test_bfloat16_checkpoint_shards_are_read_as_float32(tmp_path: Path) -> None:
    hf = hf_llama().to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    name = "model.layers.0.mlp.down_proj.weight"
    full = hf.state_dict()[name].float().numpy()

    def body() -> np.ndarray:
        model = lm.models.from_pretrained(tmp_path, lm.Graph(), tensor_parallel=True)
        return model.state_dict()[name]

    shards = dist.run_local(body, 2)
    assert all(shard.dtype == np.float32 for shard in shards)
    np.testing.assert_array_equal(np.concatenate(shards, axis=1), full)

"""Greedy generation with a small Llama of seeded random weights, streamed token by token.

    python -m luminal.examples.llama_generate [--seed N] [--max-new-tokens N]
        [--prompt ID [ID ...]] [--temperature T] [--no-compile] [--no-check]
    mpiexec -n 2 python -m luminal.examples.llama_generate --tensor-parallel
    torchrun --standalone --nproc-per-node 2 -m luminal.examples.llama_generate --tensor-parallel

The model is `lm.models.Llama` built from a config mapping (hidden 256, 4 layers, 8 heads,
4 key/value heads, vocabulary 1000); its weights are PyTorch-style initial weights drawn
after `lm.nn.manual_seed(seed)`, so the tokens are meaningless but reproducible. A
`LlamaSession` holds one graph with symbolic "seq" and "past": compiled once by
`lm.CPUCompiler()`, it runs the prompt and then every single-token step with the KV cache.
Tokens per second count the decode steps only (compile and prompt excluded). The check
runs the same generation on the reference runtime and compares the tokens.

`--tensor-parallel` splits the model over the ranks of the launcher (heads and MLP
columns, `luminal.models.tensor_parallel`): every rank draws the same seeded weights,
keeps its shard, and runs the same generation; rank 0 prints. The check then compares
with one process holding the whole model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import luminal as lm
import luminal.distributed as dist
from luminal.models import CausalLM, Llama, LlamaSession, generate
from luminal.models.tensor_parallel import tensor_parallel_model

CONFIG: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
DEFAULT_PROMPT = (1, 15, 278, 42, 7, 611)
TOKENS_PER_LINE = 16


@dataclass
class TokenStream:
    """`generate` callback: prints each token as it arrives and notes when it did."""

    per_line: int = TOKENS_PER_LINE
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def __call__(self, token: int) -> None:
        self.times.append(time.perf_counter())
        self.tokens.append(int(token))
        if len(self.tokens) % self.per_line == 1 or self.per_line == 1:
            print("\n   ", end="")
        print(f" {int(token):4d}", end="", flush=True)

    def decode_rate(self) -> float | None:
        """Tokens per second from the first new token to the last: decode steps only."""
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


@dataclass(frozen=True)
class GenerationResult:
    tokens: np.ndarray
    first_token_seconds: float  # compile (first run) + prompt
    tokens_per_second: float | None
    matches_reference: bool | None


def build_model(seed: int = 0, config: dict[str, Any] | None = None) -> Llama:
    """A Llama with initial weights drawn after `lm.nn.manual_seed(seed)` (which reseeds
    the generator every module's initial weights come from)."""
    lm.nn.manual_seed(seed)
    return Llama(lm.Graph(), CONFIG if config is None else config)


def build_tensor_parallel(seed: int = 0) -> tuple[CausalLM, Llama]:
    """This rank's shard of `build_model(seed)`, and the whole model it was cut from
    (every rank draws the same seeded weights, so the shards fit together)."""
    whole = build_model(seed)
    with lm.nn.skip_init():  # the weights come from `whole`
        shard = tensor_parallel_model(Llama, lm.Graph(), CONFIG)
    shard.load_state_dict(whole.state_dict())
    return shard, whole


def run(
    seed: int = 0,
    max_new_tokens: int = 32,
    prompt: Sequence[int] = DEFAULT_PROMPT,
    temperature: float = 0.0,
    compile: bool = True,
    check: bool = True,
    tensor_parallel: bool = False,
) -> GenerationResult:
    """Generate, streaming the tokens; print timings and (compiled) the check."""
    model: CausalLM
    if tensor_parallel:
        model, whole = build_tensor_parallel(seed)
    else:
        model = whole = build_model(seed)
    c = whole.config
    n_params = sum(int(np.prod(p.shape)) for p in whole.parameters())
    print(
        f"Llama: {c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} "
        f"heads ({c.num_key_value_heads} kv), vocab {c.vocab_size}: {n_params / 1e6:.1f}M "
        f"random parameters (seed {seed})"
    )
    if tensor_parallel:
        local = model.config
        print(
            f"Tensor parallel over {dist.world_size()} ranks ({dist.backend()}): each holds "
            f"{local.num_attention_heads} heads ({local.num_key_value_heads} kv), "
            f"{local.intermediate_size} MLP columns and 1/{dist.world_size()} of the head"
        )
    session = model.session(compile=compile)
    mode = "greedy" if temperature == 0 else f"temperature {temperature}"
    runtime = "compiled with lm.CPUCompiler" if compile else "reference runtime"
    print(f"Prompt ids {list(prompt)}; {mode}, {runtime}; new tokens:", end="")
    stream = TokenStream()
    start = time.perf_counter()
    tokens = generate(
        session,
        np.asarray(prompt, np.int32),
        max_new_tokens,
        temperature=temperature,
        seed=seed,
        callback=stream,
        ignore_eos=True,
    )
    print()
    first = (stream.times[0] if stream.times else time.perf_counter()) - start
    what = "compile + prompt" if compile else "prompt"
    print(f"Generated {len(tokens)} tokens; {what}: {first:.2f} s")
    rate = stream.decode_rate()
    if rate is not None:
        decode = stream.times[-1] - stream.times[0]
        print(
            f"Decode: {rate:.0f} tokens/s ({len(tokens) - 1} steps in {decode * 1e3:.0f} ms, "
            "after compile, KV cache)"
        )
    matches = None
    if compile and check:
        reference = generate(
            LlamaSession(whole, compile=False),
            np.asarray(prompt, np.int32),
            max_new_tokens,
            temperature=temperature,
            seed=seed,
            ignore_eos=True,
        )
        matches = bool(np.array_equal(tokens, reference))
        verdict = "same tokens" if matches else f"DIFFERENT tokens: {reference.tolist()}"
        who = "one process (reference runtime)" if tensor_parallel else "reference runtime"
        print(f"Check: {who} gives the {verdict}")
    return GenerationResult(tokens, first, rate, matches)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m luminal.examples.llama_generate",
        description="Stream tokens from a small Llama (hidden 256, 4 layers, seeded random "
        "weights) with a compiled KV-cache decode graph, and report tokens per second.",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for the weights (and sampling)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate")
    p.add_argument(
        "--prompt",
        type=int,
        nargs="+",
        default=list(DEFAULT_PROMPT),
        metavar="ID",
        help=f"prompt token ids, each < {CONFIG['vocab_size']}",
    )
    p.add_argument(
        "--temperature", type=float, default=0.0, help="0 is greedy (default); > 0 samples"
    )
    p.add_argument("--no-compile", action="store_true", help="run on the reference runtime (numpy)")
    p.add_argument(
        "--no-check", action="store_true", help="skip the comparison with the reference runtime"
    )
    p.add_argument(
        "--tensor-parallel",
        action="store_true",
        help="split heads and MLP columns over the ranks of mpiexec / torchrun (rank 0 prints)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if any(not 0 <= i < CONFIG["vocab_size"] for i in args.prompt):
        p.error(f"--prompt ids must be in [0, {CONFIG['vocab_size']})")
    if args.tensor_parallel:
        dist.init()
    quiet = args.tensor_parallel and dist.rank() != 0
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        run(
            args.seed,
            args.max_new_tokens,
            args.prompt,
            args.temperature,
            not args.no_compile,
            not args.no_check,
            args.tensor_parallel,
        )
    if args.tensor_parallel:
        dist.barrier()  # every rank done before any tears its group down
        dist.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

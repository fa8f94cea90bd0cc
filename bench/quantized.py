"""Quantized decode: tokens/s of a ~1B-parameter Llama (TinyLlama-1.1B's shape, seeded
random weights) from GGUF files in F32, Q8_0, Q4_0 and Q4_K, at 2 threads; bytes of
weights read per token, and that traffic as a share of the machine's read bandwidth
measured right before each format at the same thread count (decode is bound by it:
tokens/s <= bandwidth / bytes per token). CPU seconds per token are printed too: on a
shared machine they move far less than wall time.

When llama-cpp-python is importable (the `bench` extra; it compiles llama.cpp), the
same file runs through `llama_cpp.Llama` with the same threads in the same run: decode
tokens/s and the time of a 128-token prefill, as ratios luminal / llama.cpp.

The files are built here with luminal.quant.writing.save_gguf_llama (streamed, one
tensor at a time, with a synthetic 32000-piece SentencePiece vocabulary, which
llama.cpp needs to load a file) and cached under bench/data/ (ignored by git; ~7 GB).

    .venv/bin/python bench/quantized.py [--formats f32,q8_0,q4_0,q4_k,q4_0+int8] [--threads 2]

"+int8" decodes and prefills with llama.cpp's 8-bit activations and integer dot products
(Q8_0/Q4_0 prefill on integer tiles); its ratios are against the llama.cpp run of the
same file (measured once per file).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import equal_threads, read_bandwidth
from rows import Row
from timing import Timer

import luminal as lm
from luminal.quant import load_gguf_model
from luminal.quant.writing import save_gguf_llama

DATA = Path(__file__).parent / "data"
CONFIG = {  # TinyLlama-1.1B
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
PROMPT = np.arange(1, 17, dtype=np.int32)  # the decode bench's prompt
PREFILL = np.arange(1, 129, dtype=np.int32) % CONFIG["vocab_size"]  # the prefill bench's


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    out = {"model.embed_tokens.weight": (v, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (f, h),
            p + "mlp.up_proj.weight": (f, h),
            p + "mlp.down_proj.weight": (h, f),
        }
    return out | {"model.norm.weight": (h,), "lm_head.weight": (v, h)}


def vocabulary(size: int):  # noqa: ANN201 (a tokenizers.Tokenizer)
    """A SentencePiece-style tokenizer of `size` pieces: <unk> <s> </s>, the 256 byte
    pieces, then "▁0", "▁1", ...: llama.cpp refuses a file without a vocabulary."""
    from tokenizers import AddedToken, Tokenizer, models

    pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    pieces += [f"▁{i}" for i in range(size - len(pieces))]
    model = models.BPE(
        {p: i for i, p in enumerate(pieces)}, [], unk_token="<unk>", byte_fallback=True
    )
    tokenizer = Tokenizer(model)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in pieces[:3]])
    return tokenizer


def build(path: Path, config: dict, kind: str | None) -> None:
    """Seeded weights (each tensor from its own seed), written one tensor at a time."""

    def maker(index: int, shape: tuple[int, ...]):  # noqa: ANN202
        def make() -> np.ndarray:
            if len(shape) == 1:
                return np.ones(shape, np.float32)
            rng = np.random.default_rng(index)
            return (rng.standard_normal(shape, np.float32) * 0.02).astype(np.float32)

        return make

    state = {
        name: (shape, maker(i, shape)) for i, (name, shape) in enumerate(shapes(config).items())
    }
    temporary = path.with_suffix(".partial")
    save_gguf_llama(temporary, config, state, kind, tokenizer=vocabulary(config["vocab_size"]))
    temporary.rename(path)


def bytes_per_token(model: lm.nn.Module) -> int:
    """Weight bytes one decode step reads: every parameter but the embedding table, of
    which one row."""
    total = 0
    for name, tensor in model.named_parameters():
        data = model.graph.input_data[tensor.node_id]
        total += data.nbytes // data.shape[0] if "embed_tokens" in name else data.nbytes
    return total


class Stepper:
    """Greedy single-token steps after a prompt: `run(n)` returns (wall, CPU) seconds of
    n more steps. The luminal side (a DecoderSession) and the llama.cpp side share it."""

    def __init__(self, step: Callable[[int], int], first: int) -> None:
        self.step, self.token = step, first

    def run(self, n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            self.token = self.step(self.token)
        return time.perf_counter() - wall, time.process_time() - cpu


def decoder(
    path: Path, int8: bool
) -> tuple[Stepper, Callable[[], tuple[float, float]], int, float]:
    """(steps after a 16-token prompt and 3 warm-up steps, a function timing a 128-token
    prefill (wall, CPU seconds), weight bytes per token, load seconds). `int8`: llama.cpp-style
    8-bit activations."""
    start = time.perf_counter()
    model = load_gguf_model(path, quantized_activations=int8)
    load = time.perf_counter() - start
    session = model.session()  # the default compile-time check, 8-bit activations too

    def step(token: int) -> int:
        return int(session.step([token])[0].argmax())

    def prefill() -> tuple[float, float]:
        start, used = time.perf_counter(), time.process_time()
        session.prefill(PREFILL)
        return time.perf_counter() - start, time.process_time() - used

    prefill()  # compiles, and plans the 128-row run
    stepper = Stepper(step, int(session.prefill(PROMPT)[0].argmax()))
    stepper.run(3)  # warm-up
    return stepper, prefill, bytes_per_token(model), load


def llama_cpp_decoder(
    path: Path, threads: int
) -> tuple[Stepper, Callable[[], tuple[float, float]]] | None:
    """The same as `decoder` through llama.cpp (llama-cpp-python), or None when it is not
    installed: greedy steps on the logits `Llama.eval` keeps, and a 128-token prefill
    into an emptied context."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(
        model_path=str(path),
        n_ctx=512,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )

    def step(token: int) -> int:
        llm.eval([token])
        return int(np.argmax(llm.scores[llm.n_tokens - 1]))

    def prefill() -> tuple[float, float]:
        llm.reset()
        start, used = time.perf_counter(), time.process_time()
        llm.eval(PREFILL.tolist())
        return time.perf_counter() - start, time.process_time() - used

    prefill()
    llm.reset()
    llm.eval(PROMPT.tolist())
    stepper = Stepper(step, int(np.argmax(llm.scores[llm.n_tokens - 1])))
    stepper.run(3)
    return stepper, prefill


def gguf_path(name: str, layers: int, config: dict) -> Path:
    """The cached GGUF file of format `name` ("q4_0+int8" reads q4_0's), built if missing."""
    kind = name.removesuffix("+int8")
    path = DATA / f"llama-1b-{layers}l-{kind}-vocab.gguf"
    if not path.exists():
        print(f"building {path.name} ...", flush=True)
        DATA.mkdir(exist_ok=True)
        build(path, config, None if kind == "f32" else kind)
    return path


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: seconds per decoded token (22 layers; 2 with `quick`) against
    llama.cpp on the same file when llama-cpp-python is installed."""
    layers, tokens = (2, 4) if quick else (CONFIG["num_hidden_layers"], 8)
    config = {**CONFIG, "num_hidden_layers": layers}
    bandwidth = read_bandwidth(0.25 if quick else 1.0)[0]
    rows = []
    for name in ("q4_0", "q8_0"):  # Q4_K, F32 and +int8: the command line
        path = gguf_path(name, layers, config)
        ours, _, size, _ = decoder(path, False)
        peer = llama_cpp_decoder(path, threads)
        contestants = {"luminal": lambda ours=ours: ours.run(tokens)[0]}
        if peer is not None:
            contestants["llama.cpp"] = lambda peer=peer: peer[0].run(tokens)[0]
        seconds = timer.self_timed(contestants)
        per_token = seconds["luminal"] / tokens
        share = size / per_token / bandwidth
        note = f"{share:.0%} of read bandwidth"
        if peer is None:
            note += "; llama-cpp-python not installed (not measured)"
        theirs = None if peer is None else seconds["llama.cpp"] / tokens
        case = f"Llama-1.1B-shaped {layers}L {name} decode, per token"
        print(f"{case}: {per_token * 1e3:.1f} ms ({note})", flush=True)
        rows.append(Row("quantized", case, per_token, "llama.cpp", theirs, note))
    return rows


Figures = tuple[float, float, float, float]  # s/token, CPU s/token, prefill s, prefill CPU s


PEERS: dict[Path, Figures] = {}  # llama.cpp's figures per file, measured once


def measure(name: str, path: Path, args: argparse.Namespace) -> None:
    """One format's line, and llama.cpp's beside it when installed. "% bw": tokens/s x
    bytes per token over the read bandwidth; "% CPU": the same per CPU-second (decode's
    bytes per CPU-second over the plain read's), the figure a loaded machine moves least."""
    bandwidth, per_cpu = read_bandwidth(repeats=3)  # right before: other jobs come and go
    ours, prefill, size, load = decoder(path, name.endswith("+int8"))
    mine = figures(ours, prefill, args.tokens)
    print(
        f"{name:>9} {path.stat().st_size / 1e9:7.2f} {load:7.2f}"
        + line(mine, size, bandwidth, per_cpu)
    )
    if path not in PEERS:  # "q4_0+int8" compares with q4_0's llama.cpp run
        peer = llama_cpp_decoder(path, args.threads)
        if peer is None:
            return
        PEERS[path] = figures(*peer, args.tokens)
        print(f"{'llama.cpp':>9} {'':7} {'':7}" + line(PEERS[path], size, bandwidth, per_cpu))
    theirs = PEERS[path]
    print(
        f"{'':>9} luminal / llama.cpp: tokens/s {theirs[0] / mine[0]:.2f}x (CPU per token "
        f"{mine[1] / theirs[1]:.2f}x), prefill wall {mine[2] / theirs[2]:.2f}x, "
        f"CPU {mine[3] / theirs[3]:.2f}x",
        flush=True,
    )


def figures(steps: Stepper, prefill: Callable[[], tuple[float, float]], tokens: int) -> Figures:
    wall, cpu = steps.run(tokens)
    first = min(prefill() for _ in range(3))
    return wall / tokens, cpu / tokens, *first


def line(f: Figures, size: int, bandwidth: float, per_cpu: float) -> str:
    return (
        f" {1 / f[0]:7.2f} {1e3 * f[1]:7.1f} {size / 1e6:7.1f} {bandwidth / 1e9:7.1f}"
        f" {100 * size / f[0] / bandwidth:6.0f}% {100 * size / f[1] / per_cpu:6.0f}%"
        f" {1e3 * f[2]:7.0f} {1e3 * f[3]:7.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--formats",
        default="f32,q8_0,q4_0,q4_k,q8_0+int8,q4_0+int8",
        help="+int8: 8-bit activations",
    )
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    equal_threads(args.threads)
    config = {**CONFIG, "num_hidden_layers": args.layers}
    DATA.mkdir(exist_ok=True)
    paths = {name: gguf_path(name, args.layers, config) for name in args.formats.split(",")}
    print(
        f"read bw: an all-threads sum over 1 GiB at {args.threads} threads, measured before "
        f"each format; CPU ms: per token; pf: a {len(PREFILL)}-token prefill, best of 3"
    )
    columns = ("file GB", "load s", "tok/s", "CPU ms", "MB/tok", "read GB/s", "% bw", "% CPU")
    columns += ("pf ms", "pf CPU")
    print(f"{'format':>9} " + " ".join(f"{c:>7}" for c in columns))
    for name, path in paths.items():
        measure(name, path, args)
    llama = "run" if llama_cpp_available() else "not installed"
    print(
        f"OMP threads {os.environ.get('OMP_NUM_THREADS', args.threads)}; llama-cpp-python: {llama}"
    )


def llama_cpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()

"""Quantized decode: tokens/s of a ~1B-parameter Llama (TinyLlama-1.1B's shape, seeded
random weights) from GGUF files in F32, Q8_0, Q4_0 and Q4_K, at 2 threads; bytes of
weights read per token, and that traffic as a share of the machine's measured read
bandwidth (decode is bound by it: tokens/s <= bandwidth / bytes per token).

The files are built here with luminal.quant.writing.save_gguf_llama (streamed, one
tensor at a time) and cached under bench/data/ (ignored by git; ~7 GB in all).

    .venv/bin/python bench/quantized.py [--formats f32,q8_0,q4_0,q4_k,q4_0+int8] [--threads 2]

"+int8" decodes with llama.cpp's 8-bit activations and integer dot products.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import best_of, equal_threads
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
}

READ_KERNEL = """
void parallel_read(int* out, const int* x, const long long* numel) {
    unsigned int total = 0;
    #pragma omp parallel for reduction(+:total)
    for (long long i = 0; i < numel[1]; i++) total += (unsigned int)x[i];
    out[0] = (int)total;
}
"""


def read_bandwidth(gigabytes: float = 1.0, repeats: int = 5) -> float:
    """Bytes/s of an all-threads sum over a large array (read only)."""
    x = np.ones(int(gigabytes * 2**30) // 4, np.int32)
    cx = lm.Graph()
    source = cx.tensor(x.shape, dtype="int32").set(x)
    out = lm.custom_kernel([source], READ_KERNEL, (1,), dtype="int32").retrieve()
    cx.compile(lm.CPUCompiler(verify=False))
    cx.execute()
    assert int(out.numpy()[0]) == x.size % 2**32
    return x.nbytes / best_of(cx.execute, repeats)


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
    save_gguf_llama(temporary, config, state, kind)
    temporary.rename(path)


def bytes_per_token(model: lm.nn.Module) -> int:
    """Weight bytes one decode step reads: every parameter but the embedding table, of
    which one row."""
    total = 0
    for name, tensor in model.named_parameters():
        data = model.graph.input_data[tensor.node_id]
        total += data.nbytes // data.shape[0] if "embed_tokens" in name else data.nbytes
    return total


def decoder(path: Path, int8: bool) -> tuple[Callable[[int], float], int, float]:
    """(a function running n more greedy single-token steps and returning their seconds,
    weight bytes per token, load seconds), after a 16-token prompt and 3 warm-up steps.
    `int8`: llama.cpp-style 8-bit activations."""
    start = time.perf_counter()
    model = load_gguf_model(path, quantized_activations=int8)
    load = time.perf_counter() - start
    session = model.session(compiler=lm.CPUCompiler(verify=not int8))
    logits = [session.prefill(np.arange(1, 17, dtype=np.int32))]

    def steps(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            logits[0] = session.step([int(logits[0][0].argmax())])
        return time.perf_counter() - start

    steps(3)  # warm-up
    return steps, bytes_per_token(model), load


def decode(path: Path, tokens: int, int8: bool) -> tuple[float, int, float]:
    """(tokens/s over `tokens` single-token steps after a 16-token prompt, weight bytes
    per token, load seconds). `int8`: llama.cpp-style 8-bit activations."""
    steps, size, load = decoder(path, int8)
    return tokens / steps(tokens), size, load


def gguf_path(name: str, layers: int, config: dict) -> Path:
    """The cached GGUF file of format `name` ("q4_0+int8" reads q4_0's), built if missing."""
    kind = name.removesuffix("+int8")
    path = DATA / f"llama-1b-{layers}l-{kind}.gguf"
    if not path.exists():
        print(f"building {path.name} ...", flush=True)
        DATA.mkdir(exist_ok=True)
        build(path, config, None if kind == "f32" else kind)
    return path


def collect(timer: Timer, quick: bool, threads: int) -> list[Row]:
    """The dashboard's rows: seconds per decoded token (22 layers; 2 with `quick`). No
    peer runs here: llama.cpp is named as the peer and recorded as not measured."""
    layers, tokens = (2, 4) if quick else (CONFIG["num_hidden_layers"], 8)
    config = {**CONFIG, "num_hidden_layers": layers}
    bandwidth = read_bandwidth(0.25 if quick else 1.0)
    rows = []
    for name in ("q4_0", "q4_0+int8"):  # Q8_0, Q4_K and F32: the command line
        steps, size, load = decoder(gguf_path(name, layers, config), name.endswith("+int8"))
        seconds = timer.self_timed({"luminal": lambda steps=steps: steps(tokens)})["luminal"]
        per_token = seconds / tokens
        share = size / per_token / bandwidth
        note = f"{share:.0%} of read bandwidth; llama.cpp not run by this bench (not measured)"
        case = f"Llama-1.1B-shaped {layers}L {name} decode, per token"
        print(f"{case}: {per_token * 1e3:.1f} ms ({note})", flush=True)
        rows.append(Row("quantized", case, per_token, "llama.cpp", None, note))
    return rows


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
    bandwidth = read_bandwidth()
    print(f"read bandwidth ({args.threads} threads, 1 GiB sum): {bandwidth / 1e9:.1f} GB/s")
    columns = ("file GB", "load s", "tok/s", "MB/token", "% of read bw")
    print(f"{'format':>9} " + " ".join(f"{c:>8}" for c in columns))
    for name in args.formats.split(","):
        path = gguf_path(name, args.layers, config)
        rate, size, load = decode(path, args.tokens, name.endswith("+int8"))
        share = 100 * rate * size / bandwidth
        gigabytes = path.stat().st_size / 1e9
        print(
            f"{name:>9} {gigabytes:8.2f} {load:7.2f} {rate:7.2f} {size / 1e6:9.1f} {share:12.0f}%"
        )
    print(
        f"OMP threads {os.environ.get('OMP_NUM_THREADS', args.threads)}; llama-cpp-python: not run"
    )


if __name__ == "__main__":
    main()

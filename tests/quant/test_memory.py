"""A packed model stays about its file's size in memory: the GGUF file is memory-mapped
and used in place (measured in a subprocess: peak RSS over the interpreter's baseline)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from luminal.quant.writing import save_gguf_llama

CONFIG = {
    "vocab_size": 2048,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}

CHILD = """
import json, resource, sys
import numpy as np
import luminal as lm
from luminal.quant import load_gguf_model

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

base = peak()
model = load_gguf_model(sys.argv[1])
loaded = peak()
session = model.session(compiler=lm.CPUCompiler(verify=False))
logits = session.prefill(np.arange(1, 9, dtype=np.int32))
for _ in range(3):
    logits = session.step([int(logits[0].argmax())])
assert np.isfinite(logits).all()
print(json.dumps({"base": base, "loaded": loaded, "peak": peak()}))
"""


def _state(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    h, f, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    kv = h // CONFIG["num_attention_heads"] * CONFIG["num_key_value_heads"]
    shapes = {
        "model.embed_tokens.weight": (v, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (v, h),
    }
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
        shapes |= {p + f"self_attn.{n}_proj.weight": (h if n in "qo" else kv, h) for n in "qkvo"}
        shapes |= {p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h)}
        shapes |= {p + "mlp.down_proj.weight": (h, f)}
    return {n: (0.02 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}


def test_resident_memory_is_about_the_file_size(tmp_path: Path) -> None:
    path = tmp_path / "model-q8_0.gguf"
    save_gguf_llama(path, CONFIG, _state(0), "q8_0")
    size = path.stat().st_size
    assert 40e6 < size < 60e6
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rss = json.loads(run.stdout.strip().splitlines()[-1])
    # float weights would be 4x the file; packed, the file's pages plus small buffers
    assert rss["peak"] - rss["base"] < 1.3 * size, (rss, size)

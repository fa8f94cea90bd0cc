"""8-bit activations (`quantized_activations=True`) under CPUCompiler's default check.

Rounding activations to 8 bits is a step function: a one-ulp float difference upstream
flips a rounding (on these Q4_0 models, exact ties: embedding rows are multiples of
their block scale) and moves logits by ~1 % of their largest one, past any float
tolerance. The check runs such nodes' references on the compiled program's own inputs
(luminal/backends/cpu/verify.py), so these graphs compile with the default
`lm.CPUCompiler()`; and a wrong kernel, or a wrong value upstream of one, is still
rejected with a CompileError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.quant import PackedTensor, load_gguf_model, ops, read_gguf
from luminal.quant.writing import save_gguf_llama
from tests.quant.test_gguf_llama import CONFIG, PROMPT

SEEDS = (0, 1, 2)
KINDS = ("q8_0", "q4_0")
STEPS = (5, 9, 77)  # decode tokens after the prompt (the few-row path)
# the 8-bit activation scale each kernel (decode and prefill tiles) multiplies by
SCALE = "scale[b] = q2b ? db / 256.0f : db;"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    import torch
    import transformers

    folder = tmp_path_factory.mktemp("int8")
    paths = {}
    for seed in SEEDS:
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
        state = {k: v.numpy() for k, v in model.state_dict().items()}
        for kind in KINDS:
            paths[kind, seed] = folder / f"tiny-{kind}-{seed}.gguf"
            save_gguf_llama(paths[kind, seed], CONFIG, state, kind)
    return paths


def _logits(session: lm.models.decoder.DecoderSession) -> np.ndarray:
    """The prompt's last logits, then one row per decoded token."""
    rows = [session.prefill(PROMPT)[0]]
    rows += [session.step([token])[0] for token in STEPS]
    return np.stack(rows)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_int8_graph_compiles_with_the_default_check(
    files: dict[tuple[str, int], Path], kind: str, seed: int, replayed_functions: list[str]
) -> None:
    """The default CPUCompiler (check on, no program cache to skip it) compiles the 8-bit
    graph, checking every 8-bit matmul (2 layers x 7 + the head) on the compiled
    program's inputs; its logits stay within the documented bound of the reference
    runtime's: no further from them than 2x the rounding's own effect (8-bit against
    16-bit activations, both on the reference runtime)."""
    replays = replayed_functions
    model = load_gguf_model(files[kind, seed], quantized_activations=True)
    compiled = _logits(model.session(compiler=lm.CPUCompiler(cache=False)))
    assert len(replays) == 2 * 7 + 1
    assert all("_matmul_a8_" in name for name in replays)
    reference = _logits(model.session(compile=False))
    sixteen = _logits(load_gguf_model(files[kind, seed]).session(compile=False))
    rounding = np.abs(reference - sixteen).max(axis=1)
    assert (rounding > 1e-3).all()  # the rounding is visible: a meaningful bound
    assert (np.abs(compiled - reference).max(axis=1) <= 2 * rounding).all()
    norms = np.linalg.norm(compiled, axis=1) * np.linalg.norm(reference, axis=1)
    assert ((compiled * reference).sum(axis=1) / norms >= 0.9995).all()


@pytest.mark.parametrize("kind", KINDS)
def test_int8_decode_path_compiles_with_the_default_check(
    files: dict[tuple[str, int], Path], kind: str, replayed_functions: list[str]
) -> None:
    """A session whose first call is one token compiles (and is checked) on the few-row
    path (8-bit activations against the packed rows, no tiles): every 8-bit matmul is run
    on the compiled program's inputs there too, and the steps after it stay within the
    bound of the test above."""
    replays = replayed_functions
    model = load_gguf_model(files[kind, 0], quantized_activations=True)
    tokens = [int(PROMPT[0]), *STEPS]
    session = model.session(compiler=lm.CPUCompiler(cache=False))
    compiled = np.stack([session.prefill(np.array(tokens[:1], np.int32))[0]])
    assert len(replays) == 2 * 7 + 1
    compiled = np.concatenate([compiled, [session.step([t])[0] for t in tokens[1:]]])
    reference_session = model.session(compile=False)
    sixteen_session = load_gguf_model(files[kind, 0]).session(compile=False)
    rows = []
    for s in (reference_session, sixteen_session):
        first = s.prefill(np.array(tokens[:1], np.int32))[0]
        rows.append(np.stack([first, *[s.step([t])[0] for t in tokens[1:]]]))
    reference, sixteen = rows
    rounding = np.abs(reference - sixteen).max(axis=1)
    assert (rounding > 1e-3).all()
    assert (np.abs(compiled - reference).max(axis=1) <= 2 * rounding).all()


def _patched_source(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """Every packed-weight kernel built from now on has `old` replaced by `new` in its C."""
    original = ops.format_source
    assert old in original(ops.block_format("q4_0"))  # else the test patches nothing

    monkeypatch.setattr(ops, "format_source", lambda fmt: original(fmt).replace(old, new))


def _patched_entry(monkeypatch: pytest.MonkeyPatch, what: str, extra: str) -> None:
    """Entries whose name starts with `what` run `extra` C after their body."""
    original = ops._entry

    def entry(fmt: object, name: str, signature: str, body: str) -> tuple[str, str]:
        return original(fmt, name, signature, body + extra if name.startswith(what) else body)

    monkeypatch.setattr(ops, "_entry", entry)


BROKEN = {
    # the 8-bit activation scale 1 % too large: every 8-bit matmul's output is off
    "scale": ("the output of custom kernel 'lq_q4_0_matmul_a8_", "scale"),
    # one output element of every 8-bit matmul moved by 0.01
    "one output": ("the output of custom kernel 'lq_q4_0_matmul_a8_", "output"),
    # the embedding rows (no rounding) wrong upstream: caught at the first matmul's input
    "upstream": ("input 0 of custom kernel 'lq_q4_0_matmul_a8_", "upstream"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_int8_check_rejects_a_wrong_kernel(
    files: dict[tuple[str, int], Path], broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running 8-bit nodes on the compiled program's inputs hides nothing: a wrong scale
    or output in an 8-bit kernel, or a wrong value feeding one, raises CompileError
    naming the node, and the graph stays uncompiled."""
    message, how = BROKEN[broken]
    if how == "scale":
        _patched_source(monkeypatch, SCALE, SCALE.replace(": db;", ": db * 1.01f;"))
    elif how == "output":
        _patched_entry(monkeypatch, "matmul_a8", " out[numel[0] / 2] += 0.01f;")
    else:
        _patched_entry(monkeypatch, "rows", " out[numel[0] / 2] += 0.01f;")
    model = load_gguf_model(files["q4_0", 0], quantized_activations=True)
    session = model.session(compiler=lm.CPUCompiler(cache=False))
    with pytest.raises(lm.CompileError, match="compiled graph is wrong") as error:
        session.prefill(PROMPT)
    assert message in str(error.value)


@pytest.mark.parametrize(("kind", "ties"), [("q8_0", 0), ("q4_0", 100)])
def test_first_layer_rounds_on_ties(
    files: dict[tuple[str, int], Path], kind: str, ties: int
) -> None:
    """Why 8-bit nodes are checked on the compiled program's inputs: the first layer
    rounds RMSNorm'd embedding rows, which in Q4_0 are multiples of their block scale,
    so x / d = 127 x / max|x| lands on (or within float error of) .5 ties, where a one-ulp
    difference upstream decides the rounding (measured: 282 of 2560); Q8_0's maximum is
    127 steps, so its rows land on integers instead (compiled and reference logits were
    equal on these models)."""
    tensors, _ = read_gguf(files[kind, 0])
    table = tensors["token_embd.weight"]
    assert isinstance(table, PackedTensor)
    raw = table.data.reshape(-1, table.format.block_bytes)
    rows = table.format.dequantize_blocks(raw).reshape(table.shape)[PROMPT].astype(np.float32)
    norm = np.asarray(tensors["blk.0.attn_norm.weight"], np.float32)
    x = rows / np.sqrt((rows**2).mean(axis=-1, keepdims=True) + np.float32(1e-5)) * norm
    blocks = x.reshape(-1, 32)
    scaled = blocks * (np.float32(127) / np.abs(blocks).max(axis=-1, keepdims=True))
    near = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-4
    assert (near.sum() >= ties) if ties else not near.any()

"""lm.models.Llama against transformers' LlamaForCausalLM (same config, same weights):
logits on the reference runtime and compiled for the CPU, greedy generation with the KV
cache, loading a save_pretrained folder, scaled RoPE, tied embeddings; and the decode
graph compiling once for every step."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from transformers import LlamaConfig, LlamaForCausalLM

import luminal as lm
from luminal.models import Llama, LlamaSession, generate
from luminal.models.sampling import sample_logits, softmax, top_k_filter, top_p_filter
from tests.models.conftest import hf_greedy_continuation, hf_logits

ATOL = 1e-4
PROMPT_LEN, NEW_TOKENS = 10, 20


def hf_llama(**overrides: object) -> LlamaForCausalLM:
    """The brief's test model. initializer_range 0.05 (transformers' default is 0.02)
    makes greedy decoding of random weights pick varied tokens, with top-2 logit gaps
    of ~0.04, far above float differences, instead of one token repeated."""
    options = dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=256,
        initializer_range=0.05,
        attn_implementation="eager",
    )
    options.update(overrides)
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**options)).eval()


def luminal_llama(hf: LlamaForCausalLM, graph: lm.Graph | None = None) -> Llama:
    model = Llama(graph or lm.Graph(), hf.config.to_dict())
    model.load_state_dict(hf.state_dict())
    return model


class CountingCompiler:
    """A compiler wrapper that counts how often it compiles."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def compile(self, graph: lm.Graph) -> object:
        self.calls += 1
        return self.inner.compile(graph)


@pytest.fixture(scope="module")
def hf() -> LlamaForCausalLM:
    return hf_llama()


@pytest.fixture(scope="module")
def prompt() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 1000, (2, PROMPT_LEN)).astype(np.int32)


@pytest.fixture(scope="module")
def hf_greedy(hf, prompt) -> tuple[np.ndarray, np.ndarray]:
    """transformers' greedy continuation of both prompts and the logits of each step."""
    tokens, logits = hf_greedy_continuation(hf, prompt, NEW_TOKENS)
    assert tokens.shape == (2, NEW_TOKENS)  # no early end token in this setup
    return tokens, logits


@pytest.fixture(scope="module")
def compiled_session(hf) -> tuple[LlamaSession, CountingCompiler]:
    counter = CountingCompiler(lm.CPUCompiler())
    return luminal_llama(hf).session(compiler=counter), counter


# ---------------------------------------------------------------- structure and logits
def test_parameters_are_named_and_shaped_like_transformers(hf):
    model = luminal_llama(hf)
    ours = {name: tuple(t.shape) for name, t in model.named_parameters()}
    theirs = {name: tuple(t.shape) for name, t in hf.state_dict().items()}
    assert ours == theirs
    for name, array in model.state_dict().items():
        np.testing.assert_array_equal(array, hf.state_dict()[name].numpy())


def test_logits_match_transformers_on_the_reference_runtime(hf, prompt):
    model = luminal_llama(hf)
    cx = model.graph
    batched = cx.tensor(("batch", "seq"), dtype=lm.int32)
    single = cx.tensor(("seq",), dtype=lm.int32)
    logits, logits_1d = model(batched).retrieve(), model(single).retrieve()
    batched.set(prompt)
    single.set(prompt[1])
    cx.execute()
    expected = hf_logits(hf, prompt)
    assert logits.numpy().shape == (2, PROMPT_LEN, 1000)
    np.testing.assert_allclose(logits.numpy(), expected, atol=ATOL, rtol=0)
    assert logits_1d.numpy().shape == (PROMPT_LEN, 1000)
    np.testing.assert_allclose(logits_1d.numpy(), expected[1], atol=ATOL, rtol=0)


def test_logits_match_transformers_compiled_for_the_cpu(hf, prompt):
    model = luminal_llama(hf)
    cx = model.graph
    ids = cx.tensor((1, "seq"), dtype=lm.int32)
    logits = model(ids).retrieve()
    ids.set(prompt[:1])
    cx.compile(lm.CPUCompiler())
    compiled = cx.compiled
    for length in (PROMPT_LEN, 6):  # one compiled graph, two sequence lengths
        ids.set(prompt[:1, :length])
        cx.execute()
        np.testing.assert_allclose(
            logits.numpy(), hf_logits(hf, prompt[:1, :length]), atol=ATOL, rtol=0
        )
    assert cx.compiled is compiled


# ---------------------------------------------------------------- generation
@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "cpu"])
def test_greedy_generation_matches_transformers(hf, prompt, hf_greedy, compiled_session, compiled):
    expected_tokens, expected_logits = hf_greedy
    session = compiled_session[0] if compiled else luminal_llama(hf).session(compile=False)
    streamed: list[int] = []
    tokens = generate(session, prompt[0], NEW_TOKENS, callback=streamed.append)
    np.testing.assert_array_equal(tokens, expected_tokens[0])
    assert streamed == tokens.tolist()
    # the logits of every step with the cache, against transformers' own cached steps
    logits = [session.prefill(prompt[:1])]
    for token in tokens[:-1]:
        logits.append(session.step([token]))
    np.testing.assert_allclose(np.stack(logits, 1), expected_logits[:1], atol=ATOL, rtol=0)


def test_batched_greedy_generation_matches_transformers(prompt, hf_greedy, compiled_session):
    session = compiled_session[0]  # "batch" is symbolic: the same compiled graph
    tokens = generate(session, prompt, NEW_TOKENS)
    np.testing.assert_array_equal(tokens, hf_greedy[0])


def test_decode_graph_compiles_once(prompt, compiled_session):
    session, counter = compiled_session
    session.prefill(prompt[:1])
    compiled = session.graph.compiled
    assert compiled is not None and compiled is session.compiled
    library = compiled.library
    for step in range(5):
        session.step([step])
        assert session.past == PROMPT_LEN + step + 1
        assert session.graph.compiled is compiled and compiled.library is library
    generate(session, prompt[1], 3, temperature=1.0, seed=0)
    assert counter.calls == session.compile_count == 1
    assert session.graph.compiled is compiled


def test_generate_on_a_model_keeps_one_session(hf, prompt):
    model = luminal_llama(hf)
    first = generate(model, prompt[0], 4, compile=False)
    session = model._sessions[False]
    second = generate(model, prompt[0], 4, compile=False)
    assert model._sessions[False] is session
    np.testing.assert_array_equal(first, second)
    # new weights loaded into the model reach the cached session
    state = {name: t.numpy() for name, t in hf.state_dict().items()}
    state["lm_head.weight"] = -state["lm_head.weight"]
    model.load_state_dict(state)
    assert not np.array_equal(generate(model, prompt[0], 4, compile=False), first)


def test_seeded_sampling_is_reproducible_and_streams(hf, prompt):
    session = luminal_llama(hf).session(compile=False)
    options = dict(temperature=0.8, top_k=50, top_p=0.9)
    streamed: list[int] = []
    a = generate(session, prompt[0], 6, seed=7, callback=streamed.append, **options)
    b = generate(session, prompt[0], 6, seed=7, **options)
    c = generate(session, prompt[0], 6, seed=8, **options)
    np.testing.assert_array_equal(a, b)
    assert streamed == a.tolist()
    assert a.dtype == np.int32 and a.shape == (6,)
    assert not np.array_equal(a, c)


def test_generation_stops_at_the_end_token(hf, prompt, hf_greedy):
    session = luminal_llama(hf).session(compile=False)
    expected = hf_greedy[0][0]
    end = int(expected[3])
    tokens = generate(session, prompt[0], NEW_TOKENS, eos_token_id=end)
    np.testing.assert_array_equal(tokens, expected[:4])
    assert len(generate(session, prompt[0], 6, eos_token_id=end, ignore_eos=True)) == 6
    assert generate(session, prompt[0], 0).shape == (0,)


# ---------------------------------------------------------------- loading and variants
def test_from_pretrained_reads_a_save_pretrained_folder(tmp_path, hf, prompt):
    hf.save_pretrained(tmp_path)
    assert list(tmp_path.glob("*.safetensors"))
    model = Llama.from_pretrained(tmp_path, lm.Graph())
    ids = model.graph.tensor((1, "seq"), dtype=lm.int32).set(prompt[:1])
    logits = model(ids).retrieve()
    model.graph.execute()
    np.testing.assert_allclose(logits.numpy(), hf_logits(hf, prompt[:1]), atol=ATOL, rtol=0)


def _small(**overrides: object) -> LlamaForCausalLM:
    options = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    options.update(num_key_value_heads=2, intermediate_size=128, vocab_size=100)
    options.update(overrides)
    return hf_llama(**options)


def test_tied_embeddings_load_from_folder_and_state_dict(tmp_path, prompt):
    hf = _small(tie_word_embeddings=True)
    hf.save_pretrained(tmp_path)
    ids_data = prompt[:1] % 100
    for model in (Llama.from_pretrained(tmp_path), luminal_llama(hf)):
        assert "lm_head.weight" not in dict(model.named_parameters())
        ids = model.graph.tensor((1, "seq"), dtype=lm.int32).set(ids_data)
        logits = model(ids).retrieve()
        model.graph.execute()
        np.testing.assert_allclose(logits.numpy(), hf_logits(hf, ids_data), atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ],
    ids=["linear", "llama3"],
)
def test_scaled_rope_matches_transformers(rope, prompt):
    hf = _small(head_dim=32, rope_parameters={"rope_theta": 10000.0, **rope})
    session = luminal_llama(hf).session(compile=False)
    ids = prompt[:1] % 100
    np.testing.assert_allclose(session.prefill(ids), hf_logits(hf, ids)[:, -1], atol=ATOL, rtol=0)


def test_errors_name_the_problem(hf):
    model = luminal_llama(hf)
    cx = model.graph
    with pytest.raises(lm.DTypeError, match="int32"):
        model(cx.tensor((1, 4)))
    with pytest.raises(lm.ShapeError, match="one per layer"):
        model.forward_with_cache(cx.tensor((1, 4), dtype=lm.int32), model.cache_inputs()[:2])
    with pytest.raises(lm.ShapeError, match="missing"):
        model.load_state_dict({"model.norm.weight": np.ones(256, np.float32)})
    with pytest.raises(lm.LuminalError, match="not supported"):
        Llama(lm.Graph(), {**hf.config.to_dict(), "rope_parameters": {"rope_type": "yarn"}})
    session = model.session(compile=False)
    with pytest.raises(lm.ShapeError, match="ids must be"):
        session.prefill(np.zeros((1, 0), np.int32))
    with pytest.raises(lm.LuminalError, match="Llama or LlamaSession"):
        generate(object(), [1, 2], 3)


# ---------------------------------------------------------------- sampling functions
logit_rows = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 3), st.integers(2, 40)),
    elements=st.floats(-20, 20, width=32),
)


@given(logit_rows, st.integers(1, 45))
def test_top_k_keeps_the_k_largest(logits, k):
    kept = np.isfinite(top_k_filter(logits, k))
    for row, keep in zip(logits, kept, strict=True):
        assert keep.sum() >= min(k, row.size)  # ties with the k-th value stay
        kth = np.sort(row)[::-1][min(k, row.size) - 1]
        np.testing.assert_array_equal(keep, row >= kth)
    np.testing.assert_array_equal(top_k_filter(logits, k)[kept], logits[kept])


@given(logit_rows, st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_nucleus(logits, p):
    kept = np.isfinite(top_p_filter(logits, p))
    probs = softmax(logits)
    for row, prob, keep in zip(logits, probs, kept, strict=True):
        assert keep.any()
        if keep.all() and p >= 1.0:
            continue
        assert row[keep].min() >= row[~keep].max(initial=-np.inf)  # the most likely ones
        mass = prob[keep].sum()
        assert mass >= p - 1e-6 or keep.all()
        # minimal: without its least likely token the nucleus would fall short of p
        assert mass - prob[keep].min() < p + 1e-6


@settings(max_examples=15, deadline=None)
@given(logit_rows, st.integers(1, 5), st.floats(0.05, 0.95), st.floats(0.3, 2.0))
def test_samples_stay_in_the_filtered_support(logits, k, p, temperature):
    rng = np.random.default_rng(0)
    allowed = np.isfinite(top_p_filter(top_k_filter(logits / np.float32(temperature), k), p))
    for _ in range(20):
        tokens = sample_logits(logits, temperature, k, p, rng)
        assert tokens.shape == (logits.shape[0],) and tokens.dtype == np.int32
        assert allowed[np.arange(len(tokens)), tokens].all()


def test_sampling_is_greedy_at_zero_temperature_and_seeded_otherwise():
    logits = np.random.default_rng(1).normal(size=(4, 50)).astype(np.float32)
    np.testing.assert_array_equal(sample_logits(logits), logits.argmax(-1))
    draws = [sample_logits(logits, 1.0, rng=np.random.default_rng(3)) for _ in range(2)]
    np.testing.assert_array_equal(*draws)
    assert sample_logits(logits[0], 0.0) == logits[0].argmax()  # one row -> one id


def test_sampling_follows_the_softmax_distribution():
    logits = np.array([[0.0, 1.0, 2.0, -1.0]], np.float32)
    rng = np.random.default_rng(0)
    counts = np.bincount([sample_logits(logits, 0.5, rng=rng)[0] for _ in range(4000)], minlength=4)
    expected = softmax(logits / 0.5)[0]
    np.testing.assert_allclose(counts / 4000, expected, atol=0.03)


def test_sampling_rejects_bad_arguments():
    logits = np.zeros((1, 5), np.float32)
    with pytest.raises(lm.LuminalError, match="top_k"):
        top_k_filter(logits, 0)
    with pytest.raises(lm.LuminalError, match="top_p"):
        top_p_filter(logits, 0.0)
    with pytest.raises(lm.LuminalError, match="temperature"):
        sample_logits(logits, -1.0)

"""lm.models.Whisper against transformers' WhisperForConditionalGeneration (same tiny
seeded config, same weights): encoder output and logits on the reference runtime and
compiled, greedy tokens equal to generate(do_sample=False) for the same forced start
(with language detection, a given language, translation and suppressed tokens), the
decode session with lm.models.generate, and loading a save_pretrained folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import WhisperConfig as HFWhisperConfig
from transformers import WhisperForConditionalGeneration

import luminal as lm
from luminal.errors import LuminalError, ShapeError
from luminal.models.sampling import generate
from luminal.models.whisper import Whisper
from luminal.models.whisper_session import WhisperGenerationConfig

ATOL, RTOL = 1e-4, 1e-3
MELS, POSITIONS = 16, 24  # 48 log-mel frames: a short input keeps the tests fast
NEW_TOKENS = 12
# a Whisper-like vocabulary of 100: <|endoftext|> 79, <|startoftranscript|> 80,
# languages 81-83, translate 86, transcribe 87, <|notimestamps|> 88, timestamps 89-99
EOT, SOT, NO_TIMESTAMPS = 79, 80, 88
LANGUAGES = {"<|en|>": 81, "<|de|>": 82, "<|fr|>": 83}
TASKS = {"translate": 86, "transcribe": 87}


def hf_whisper(**overrides: object) -> WhisperForConditionalGeneration:
    """init_std 0.2 (transformers' default is 0.02) makes greedy decoding of random
    weights pick varied tokens instead of one token repeated."""
    options = dict(
        vocab_size=100,
        num_mel_bins=MELS,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=POSITIONS,
        max_target_positions=40,
        decoder_start_token_id=SOT,
        eos_token_id=EOT,
        pad_token_id=0,
        bos_token_id=EOT,
        begin_suppress_tokens=[3, EOT],
        suppress_tokens=[5, *range(NO_TIMESTAMPS + 1, 100)],  # no timestamp tokens
        init_std=0.2,
        attn_implementation="eager",
    )
    options.update(overrides)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(HFWhisperConfig(**options)).eval()
    settings = model.generation_config
    settings.no_timestamps_token_id = NO_TIMESTAMPS
    settings.lang_to_id, settings.task_to_id = dict(LANGUAGES), dict(TASKS)
    settings.is_multilingual = True
    return model


def luminal_whisper(hf: WhisperForConditionalGeneration) -> Whisper:
    model = Whisper(lm.Graph(), hf.config.to_dict())
    model.load_state_dict(hf.state_dict())
    model.generation = WhisperGenerationConfig.from_dict(
        hf.generation_config.to_dict(), model.config
    )
    return model


def hf_tokens(hf, features: np.ndarray, **options: object) -> np.ndarray:
    with torch.no_grad():
        out = hf.generate(
            torch.from_numpy(features), do_sample=False, max_new_tokens=NEW_TOKENS, **options
        )
    return out.numpy()


@pytest.fixture(scope="module")
def hf() -> WhisperForConditionalGeneration:
    return hf_whisper()


@pytest.fixture(scope="module")
def model(hf) -> Whisper:
    return luminal_whisper(hf)


@pytest.fixture(scope="module")
def features() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, MELS, 2 * POSITIONS)).astype(np.float32)


def test_encoder_and_logits_reference_and_compiled(hf, features) -> None:
    ids = np.array([[SOT, 81, 87, NO_TIMESTAMPS, 7, 9], [SOT, 82, 86, NO_TIMESTAMPS, 4, 8]])
    model = luminal_whisper(hf)  # its own graph: this test compiles it
    cx = model.graph
    audio = cx.tensor(("batch", MELS, 2 * POSITIONS)).set(features)
    decoder_ids = cx.tensor(("batch", "seq"), lm.int32).set(ids.astype(np.int32))
    encoded = model.encode(audio).retrieve()
    logits = model(audio, decoder_ids).retrieve()
    with torch.no_grad():
        hf_out = hf(torch.from_numpy(features), decoder_input_ids=torch.from_numpy(ids))
        hf_encoded = hf.model.encoder(torch.from_numpy(features)).last_hidden_state.numpy()
    cx.execute()
    np.testing.assert_allclose(encoded.numpy(), hf_encoded, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(logits.numpy(), hf_out.logits.numpy(), atol=ATOL, rtol=RTOL)
    cx.compile(lm.CPUCompiler())
    cx.execute()
    assert encoded.numpy().shape == (2, POSITIONS, 32)
    np.testing.assert_allclose(encoded.numpy(), hf_encoded, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(logits.numpy(), hf_out.logits.numpy(), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    "language, task",
    [(None, None), ("en", None), ("de", "translate")],
    ids=["detected", "english", "german-translate"],
)
def test_greedy_tokens_equal_transformers(hf, model, features, language, task) -> None:
    """Compiled decoding: the same forced start (start token, the language, detected per
    row when not given, the task, <|notimestamps|>) and the same greedy tokens."""
    ours = model.transcribe_tokens(features, language, task, max_new_tokens=NEW_TOKENS)
    theirs = hf_tokens(hf, features, language=language, task=task)
    np.testing.assert_array_equal(ours, theirs)
    session = model._sessions[True]
    expected_language = (
        hf.detect_language(torch.from_numpy(features)).tolist()
        if language is None
        else [LANGUAGES[f"<|{language}|>"]] * 2
    )
    start = session.start_tokens(language, task)
    assert start[:, 1].tolist() == expected_language
    assert start[:, 0].tolist() == [SOT, SOT] and start[:, -1].tolist() == [NO_TIMESTAMPS] * 2
    if language is not None:  # a given language brings a task token
        assert start[0, 2] == TASKS[task or "transcribe"]


def test_reference_runtime_session_and_generate(hf, model, features) -> None:
    """The uncompiled session gives the same tokens; lm.models.generate decodes over a
    session after encode(), and its first step's logits are transformers'."""
    ours = model.transcribe_tokens(features[:1], "fr", max_new_tokens=NEW_TOKENS, compile=False)
    np.testing.assert_array_equal(ours, hf_tokens(hf, features[:1], language="fr"))
    session = model.session(compile=False)
    session.encode(features)
    start = np.array([[SOT, 81, 87, NO_TIMESTAMPS]] * 2)
    first = session.prefill(start)
    with torch.no_grad():
        hf_first = hf(torch.from_numpy(features), decoder_input_ids=torch.from_numpy(start))
    np.testing.assert_allclose(first, hf_first.logits[:, -1].numpy(), atol=ATOL, rtol=RTOL)
    tokens = generate(session, start, 6, ignore_eos=True)
    sequence = torch.from_numpy(start)
    with torch.no_grad():  # greedy without a cache: argmax of each full forward pass
        for _ in range(6):
            logits = hf(torch.from_numpy(features), decoder_input_ids=sequence).logits
            sequence = torch.cat([sequence, logits[:, -1].argmax(-1, keepdim=True)], 1)
    np.testing.assert_array_equal(tokens, sequence.numpy()[:, -6:])


def test_end_token_ends_rows_and_pads(features) -> None:
    """With token 14 as the end token, row 1 ends after 3 tokens (row 0 never does): as
    transformers, the end token is cut and the row padded with pad_token_id (0); one
    row alone is not padded."""
    hf = hf_whisper()
    hf.generation_config.eos_token_id = 14
    model = luminal_whisper(hf)
    ours = model.transcribe_tokens(features, "en", max_new_tokens=NEW_TOKENS, compile=False)
    theirs = hf_tokens(hf, features, language="en")
    assert (theirs[1, 3:] == 0).all() and theirs.shape == (2, NEW_TOKENS)
    np.testing.assert_array_equal(ours, theirs)
    alone = model.transcribe_tokens(features[1], "en", max_new_tokens=NEW_TOKENS, compile=False)
    np.testing.assert_array_equal(alone, theirs[1, :3])


def test_from_pretrained_folder(hf, features, tmp_path: Path) -> None:
    """save_pretrained writes config.json, safetensors (no proj_out: it is tied) and
    generation_config.json; lm.models.from_pretrained builds the model without random
    initial weights, and it decodes as transformers does."""
    hf.save_pretrained(tmp_path)
    before = lm.nn.layers.default_generator().bit_generator.state
    model = lm.models.from_pretrained(tmp_path)  # config.json's model_type is "whisper"
    assert isinstance(model, Whisper)
    # no random initial weights were drawn (convolutions included) before loading
    assert lm.nn.layers.default_generator().bit_generator.state == before
    assert model.generation.no_timestamps_token_id == NO_TIMESTAMPS
    assert model.generation.suppress_tokens[0] == 5
    ours = model.transcribe_tokens(features, "en", max_new_tokens=NEW_TOKENS, compile=False)
    np.testing.assert_array_equal(ours, hf_tokens(hf, features, language="en"))


def test_untied_head_and_errors(features) -> None:
    """An untied proj_out loads and is used; bad inputs name what is wrong, and the
    session still decodes afterwards."""
    hf = hf_whisper(tie_word_embeddings=False)
    model = luminal_whisper(hf)
    assert model.proj_out is not None
    ours = model.transcribe_tokens(features[1], "de", max_new_tokens=NEW_TOKENS, compile=False)
    np.testing.assert_array_equal(ours[None], hf_tokens(hf, features[1:], language="de"))
    session = model._sessions[False]
    with pytest.raises(ShapeError, match=r"log-mel features must be \(16, 48\)"):
        session.encode(np.zeros((MELS, 30), np.float32))
    with pytest.raises(LuminalError, match="unknown language 'xx'"):
        model.transcribe_tokens(features[1], "xx", max_new_tokens=2, compile=False)
    with pytest.raises(ShapeError, match="exceed max_target_positions=40"):
        model.transcribe_tokens(features[1], "de", max_new_tokens=40, compile=False)
    with pytest.raises(LuminalError, match="encode\\(log_mel\\) the audio before decoding"):
        model.session(compile=False).prefill([SOT])
    again = model.transcribe_tokens(features[1], "de", max_new_tokens=NEW_TOKENS, compile=False)
    np.testing.assert_array_equal(again, ours)


def test_config_validation() -> None:
    base = hf_whisper().config.to_dict()
    with pytest.raises(ShapeError, match="d_model=30 is not a multiple of encoder_attention"):
        Whisper(lm.Graph(), {**base, "d_model": 30})
    with pytest.raises(LuminalError, match="lacks required field"):
        Whisper(lm.Graph(), {k: v for k, v in base.items() if k != "decoder_layers"})
    with pytest.raises(ShapeError, match="max_source_positions must be in"):
        Whisper(lm.Graph(), {**base, "max_source_positions": 0})


def write_tokenizer(folder: Path) -> None:
    """A word-level tokenizer.json for the test vocabulary: "t0".."t78", then special
    tokens named as Whisper's (decode with skip_special_tokens drops them)."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel

    special = ["<|endoftext|>", "<|startoftranscript|>", *LANGUAGES, "<|s84|>", "<|s85|>"]
    special += [*TASKS, "<|notimestamps|>"] + [f"<|{i * 0.02:.2f}|>" for i in range(11)]
    words = [f"t{i}" for i in range(EOT)] + special
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="t0"))
    tokenizer.add_special_tokens([AddedToken(w, special=True) for w in special])
    tokenizer.save(str(folder / "tokenizer.json"))


def test_transcribe_example(hf, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The example reads an 8 kHz stereo WAV, resamples it, and prints transformers'
    greedy tokens for the same log-mel features, and their text."""
    import wave

    from transformers import WhisperFeatureExtractor

    from luminal.examples import transcribe

    hf.save_pretrained(tmp_path / "model")
    write_tokenizer(tmp_path / "model")
    t = np.arange(4000) / 8000
    tone = np.sin(2 * np.pi * 300 * t) * np.linspace(0, 1, t.size) * 12000
    pcm = np.stack([tone, -0.5 * tone], axis=1).astype("<i2")
    with wave.open(str(tmp_path / "clip.wav"), "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(pcm.tobytes())
    args = [str(tmp_path / "clip.wav"), "--model", str(tmp_path / "model"), "--language", "en"]
    assert transcribe.main([*args, "--max-new-tokens", str(NEW_TOKENS), "--no-compile"]) == 0
    out = capsys.readouterr().out
    waveform = lm.audio.load_audio(tmp_path / "clip.wav")
    extractor = WhisperFeatureExtractor(feature_size=MELS)
    features = extractor(
        waveform, sampling_rate=16_000, max_length=2 * POSITIONS * 160, return_tensors="np"
    ).input_features
    expected = hf_tokens(hf, features, language="en")[0].tolist()
    assert f"): {expected}" in out
    assert "Text: " + " ".join(f"t{i}" for i in expected if i < EOT) in out
    assert "0.50 s at 8000 Hz" in out and "only the first 0.48 s are transcribed" in out

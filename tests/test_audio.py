"""lm.audio: Whisper's log-mel spectrogram against transformers' WhisperFeatureExtractor,
WAV reading with the standard library, and resampling against exact sinusoids."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from transformers import WhisperFeatureExtractor

import luminal as lm
from luminal.errors import LuminalError, ShapeError


def speech_like(seconds: float, rate: int = 16_000, seed: int = 0) -> np.ndarray:
    """Two tones and decaying noise: every mel band has energy, and the tail is quiet."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.size) * np.exp(-t)
    signal = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 2500 * t) + 0.1 * noise
    return signal.astype(np.float32)


@pytest.fixture(scope="module")
def extractor() -> WhisperFeatureExtractor:
    return WhisperFeatureExtractor()  # Whisper's 80 mel bins, 16 kHz, 30 s chunks


def test_log_mel_matches_whisper_feature_extractor(extractor) -> None:
    waveform = speech_like(7.0)
    ours = lm.audio.log_mel_spectrogram(waveform)
    theirs = extractor(waveform, sampling_rate=16_000, return_tensors="np").input_features[0]
    assert ours.shape == theirs.shape == (80, 3000) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)  # torch's float32 STFT
    # transformers' own numpy (float64) path agrees to float32 rounding
    padded = lm.audio.pad_or_trim(waveform, 480_000)[None]
    numpy_path = extractor._np_extract_fbank_features(padded, "cpu")[0]
    np.testing.assert_allclose(ours, numpy_path, atol=1e-6, rtol=0)


def test_log_mel_batch_long_input_and_filters(extractor) -> None:
    """A batch takes the floor per row; audio past 30 s is cut; the filters are equal."""
    batch = [speech_like(31.0, seed=1), speech_like(3.0, seed=2) * 0.01]
    ours = lm.audio.log_mel_spectrogram(np.stack([lm.audio.pad_or_trim(b, 496_000) for b in batch]))
    theirs = extractor(batch, sampling_rate=16_000, return_tensors="np").input_features
    assert ours.shape == (2, 80, 3000)
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    np.testing.assert_allclose(lm.audio.mel_filters(80), extractor.mel_filters, atol=1e-12)


def test_log_mel_rejects_bad_waveforms() -> None:
    with pytest.raises(ShapeError, match=r"\(samples,\) or \(batch, samples\)"):
        lm.audio.log_mel_spectrogram(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(LuminalError, match="NaN or infinite"):
        lm.audio.log_mel_spectrogram(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ShapeError, match="reflect padding needs more than 200 samples"):
        lm.audio.log_mel_spectrogram(np.zeros(100, np.float32), n_samples=None)


def write_wav(path: Path, samples: np.ndarray, rate: int, width: int = 2) -> None:
    """Integer PCM, channels last: (frames,) or (frames, channels)."""
    frames = samples.reshape(samples.shape[0], -1)
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(frames.shape[1])
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(frames.astype(f"<i{width}").tobytes())


def test_read_wav_16_bit_stereo_to_mono(tmp_path: Path) -> None:
    left = np.array([0, 16384, -32768, 32767], np.int16)
    right = np.array([0, -16384, -32768, 1], np.int16)
    write_wav(tmp_path / "s.wav", np.stack([left, right], axis=1), 8000)
    samples, rate = lm.audio.read_wav(tmp_path / "s.wav")
    assert rate == 8000 and samples.dtype == np.float32
    expected = (left.astype(np.float32) + right) / 2 / 32768
    np.testing.assert_array_equal(samples, expected)


def test_read_wav_32_bit_and_errors(tmp_path: Path) -> None:
    values = np.array([0, 2**30, -(2**31)], np.int32)
    write_wav(tmp_path / "w32.wav", values, 16_000, width=4)
    samples, _ = lm.audio.read_wav(tmp_path / "w32.wav")
    np.testing.assert_array_equal(samples, [0.0, 0.5, -1.0])
    (tmp_path / "junk.wav").write_bytes(b"RIFF....not a wave file")
    with pytest.raises(LuminalError, match="is not a PCM WAV file"):
        lm.audio.read_wav(tmp_path / "junk.wav")


@pytest.mark.parametrize("orig_rate", [44_100, 8_000])
def test_resample_sinusoid(orig_rate: int) -> None:
    """A 440 Hz tone keeps its shape: away from the edges the samples are the tone at the
    new times (the filter passes 440 Hz with gain ~1)."""
    t = np.arange(orig_rate // 2) / orig_rate
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    out = lm.audio.resample(tone, orig_rate, 16_000)
    assert out.shape == (8000,) and out.dtype == np.float32
    expected = np.sin(2 * np.pi * 440 * np.arange(8000) / 16_000)
    np.testing.assert_allclose(out[200:-200], expected[200:-200], atol=2e-3)


def test_resample_removes_what_the_new_rate_cannot_hold() -> None:
    """A 12 kHz tone at 44.1 kHz is above 16 kHz's Nyquist frequency: it must not alias
    into the output (naive decimation would keep it at 4 kHz)."""
    t = np.arange(44_100) / 44_100
    out = lm.audio.resample(np.sin(2 * np.pi * 12_000 * t), 44_100, 16_000)
    assert np.abs(out[500:-500]).max() < 0.02
    same = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(lm.audio.resample(same, 16_000, 16_000), same)
    with pytest.raises(LuminalError, match="orig_rate must be a positive int"):
        lm.audio.resample(same, 0, 16_000)


def test_load_audio_resamples_to_16k(tmp_path: Path) -> None:
    rate = 22_050
    tone = (np.sin(2 * np.pi * 300 * np.arange(rate) / rate) * 16000).astype(np.int16)
    write_wav(tmp_path / "tone.wav", tone, rate)
    samples = lm.audio.load_audio(tmp_path / "tone.wav")
    expected = np.sin(2 * np.pi * 300 * np.arange(16_000) / 16_000) * 16000 / 32768
    assert samples.shape == (16_000,)
    np.testing.assert_allclose(samples[200:-200], expected[200:-200], atol=2e-3)

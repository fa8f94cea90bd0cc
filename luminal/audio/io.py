"""Reading WAV files with the standard library and resampling them with numpy.

`read_wav` takes what the `wave` module reads (integer PCM: 8-bit unsigned, 16-, 24- and
32-bit signed), averages the channels to mono and scales to [-1, 1) as torchaudio and
soundfile do (16-bit: / 32768). `resample` is band-limited interpolation with a
Hann-windowed sinc, computed per polyphase branch, so converting 44.1 kHz or 8 kHz audio
to Whisper's 16 kHz needs no extra package.
"""

from __future__ import annotations

import math
import os
import wave

import numpy as np

from luminal.audio.features import SAMPLE_RATE
from luminal.errors import LuminalError, ShapeError

PathLike = str | os.PathLike[str]

ZERO_CROSSINGS = 16  # sinc lobes kept on each side: the filter's sharpness
ROLLOFF = 0.945  # cutoff as a fraction of the lower Nyquist frequency, below aliasing


def read_wav(path: PathLike) -> tuple[np.ndarray, int]:
    """(mono float32 samples in [-1, 1), sample rate) of an integer-PCM WAV file."""
    try:
        with wave.open(os.fspath(path), "rb") as reader:
            channels, width = reader.getnchannels(), reader.getsampwidth()
            rate, frames = reader.getframerate(), reader.readframes(reader.getnframes())
    except (wave.Error, EOFError) as error:
        raise LuminalError(
            f"read_wav: {os.fspath(path)!r} is not a PCM WAV file: {error}"
        ) from None
    samples = _pcm_to_float(frames, width, os.fspath(path))
    usable = len(samples) // channels * channels
    return samples[:usable].reshape(-1, channels).mean(axis=1, dtype=np.float32), rate


def _pcm_to_float(frames: bytes, width: int, where: str) -> np.ndarray:
    """Little-endian PCM bytes of `width` bytes per sample as float32 in [-1, 1)."""
    if width == 1:  # 8-bit WAV is unsigned
        return (np.frombuffer(frames, np.uint8).astype(np.float32) - 128.0) / 128.0
    if width == 2:
        return np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0
    if width == 3:  # 24-bit: place the 3 bytes in the top of an int32
        raw = np.frombuffer(frames[: len(frames) // 3 * 3], np.uint8).reshape(-1, 3)
        padded = np.zeros((raw.shape[0], 4), np.uint8)
        padded[:, 1:] = raw
        return (padded.view("<i4")[:, 0] >> 8).astype(np.float32) / 8388608.0
    if width == 4:
        return (np.frombuffer(frames, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    raise LuminalError(f"read_wav: {where!r} has {8 * width}-bit samples; expected 8, 16, 24 or 32")


def resample(waveform: np.ndarray, orig_rate: int, new_rate: int) -> np.ndarray:
    """A 1-D signal from `orig_rate` to `new_rate` Hz (float32): output sample n is the
    windowed-sinc interpolation of the input at time n / new_rate, low-passed below the
    lower of the two Nyquist frequencies. Equal rates return the input unchanged."""
    signal = np.asarray(waveform, np.float64)
    if signal.ndim != 1:
        raise ShapeError(f"resample: expected a 1-D signal, got shape {signal.shape}")
    for name, rate in (("orig_rate", orig_rate), ("new_rate", new_rate)):
        if not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0:
            raise LuminalError(f"resample: {name} must be a positive int, got {rate!r}")
    if orig_rate == new_rate:
        return signal.astype(np.float32)
    divisor = math.gcd(orig_rate, new_rate)
    up, down = new_rate // divisor, orig_rate // divisor
    length = -(-len(signal) * up // down)  # ceil: output covers the input's duration
    cutoff = min(1.0, up / down) * ROLLOFF  # in cycles per input sample * 2
    half = math.ceil(ZERO_CROSSINGS / cutoff)  # taps each side, in input samples
    padded = np.pad(signal, (half, half + down + 1))
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    out = np.empty(length, np.float64)
    for phase in range(min(up, length)):
        start = phase * down // up  # first input sample at or before the output time
        offset = phase * down / up - start  # fractional position, in [0, 1)
        taps = np.arange(-half, half + 1) - offset  # input sample minus output time
        kernel = cutoff * np.sinc(cutoff * taps) * _hann(taps / (half + 1))
        out[phase::up] = windows[start : start + (length - phase - 1) // up * down + 1 : down] @ (
            kernel
        )
    return out.astype(np.float32)


def _hann(position: np.ndarray) -> np.ndarray:
    """A Hann window over position in [-1, 1] (zero at the ends and beyond)."""
    return np.where(np.abs(position) < 1.0, 0.5 + 0.5 * np.cos(np.pi * position), 0.0)


def load_audio(path: PathLike, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A WAV file as mono float32 samples at `sample_rate` (Whisper's 16 kHz by default)."""
    samples, rate = read_wav(path)
    return resample(samples, rate, sample_rate)


__all__ = ["load_audio", "read_wav", "resample"]

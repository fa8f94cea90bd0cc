"""Whisper's log-mel spectrogram in numpy, equal to transformers' `WhisperFeatureExtractor`.

The steps are Whisper's: pad (or cut) the waveform to 30 s (`n_samples`), a centred
STFT (reflect padding, periodic Hann window, `n_fft`-point real FFT every `hop_length`
samples), the power spectrum, Slaney-style mel filters from 0 to 8 kHz, log10 with a floor
of 1e-10, everything below the loudest value minus 8 raised to it, then (x + 4) / 4. The
last STFT frame is dropped, so 30 s at 16 kHz give exactly 3000 frames: what the encoder's
two convolutions turn into its 1500 positions. Computed in float64, returned as float32.
"""

from __future__ import annotations

import functools

import numpy as np

from luminal.errors import LuminalError, ShapeError

SAMPLE_RATE = 16_000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30  # seconds
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # what one encoder input holds: 3000 frames
MAX_FREQUENCY = 8000.0

# Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above
_LINEAR_HZ_PER_MEL = 200.0 / 3.0
_LOG_START_HZ = 1000.0
_LOG_START_MEL = _LOG_START_HZ / _LINEAR_HZ_PER_MEL
_LOG_STEP = np.log(6.4) / 27.0


def hertz_to_mel(hertz: np.ndarray) -> np.ndarray:
    """Frequencies in Hz on Slaney's mel scale (librosa's `htk=False`)."""
    hertz = np.asarray(hertz, np.float64)
    linear = hertz / _LINEAR_HZ_PER_MEL
    logarithmic = (
        _LOG_START_MEL + np.log(np.maximum(hertz, _LOG_START_HZ) / _LOG_START_HZ) / _LOG_STEP
    )
    return np.where(hertz >= _LOG_START_HZ, logarithmic, linear)


def mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    """The inverse of `hertz_to_mel`."""
    mels = np.asarray(mels, np.float64)
    linear = mels * _LINEAR_HZ_PER_MEL
    logarithmic = _LOG_START_HZ * np.exp(
        _LOG_STEP * (np.maximum(mels, _LOG_START_MEL) - _LOG_START_MEL)
    )
    return np.where(mels >= _LOG_START_MEL, logarithmic, linear)


@functools.lru_cache(maxsize=8)
def mel_filters(
    n_mels: int = 80,
    n_fft: int = N_FFT,
    sample_rate: int = SAMPLE_RATE,
    max_frequency: float = MAX_FREQUENCY,
) -> np.ndarray:
    """(n_fft // 2 + 1, n_mels) float64 triangular filters, centres evenly spaced in mels
    from 0 Hz to `max_frequency`, each scaled by 2 / its width in Hz (Slaney's
    constant-energy normalisation). Read-only: it is cached."""
    if n_mels < 1 or n_fft < 2:
        raise ShapeError(f"mel_filters: need n_mels >= 1 and n_fft >= 2, got {n_mels}, {n_fft}")
    edges = mel_to_hertz(np.linspace(0.0, hertz_to_mel(max_frequency), n_mels + 2))
    bins = np.linspace(0, sample_rate // 2, n_fft // 2 + 1)
    slopes = edges[None, :] - bins[:, None]  # (bins, n_mels + 2)
    widths = np.diff(edges)
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    filters *= 2.0 / (edges[2:] - edges[:-2])
    filters.setflags(write=False)
    return filters


def hann_window(length: int) -> np.ndarray:
    """The periodic Hann window (torch.hann_window's default), float64."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)


def power_spectrogram(waveform: np.ndarray, n_fft: int, hop_length: int) -> np.ndarray:
    """|STFT|^2 of a 1-D signal, centred frames (reflect padding of n_fft // 2 each side),
    (n_fft // 2 + 1, 1 + len // hop_length) float64, as torch.stft(center=True)."""
    half = n_fft // 2
    if waveform.shape[0] <= half:
        raise ShapeError(
            f"log_mel_spectrogram: reflect padding needs more than {half} samples, "
            f"got {waveform.shape[0]}"
        )
    padded = np.pad(waveform.astype(np.float64), half, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop_length]
    spectrum = np.fft.rfft(frames * hann_window(n_fft), axis=-1)
    return (spectrum.real**2 + spectrum.imag**2).T


def pad_or_trim(waveform: np.ndarray, length: int) -> np.ndarray:
    """The last axis cut to `length` samples or padded with silence (zeros) after."""
    have = waveform.shape[-1]
    if have >= length:
        return waveform[..., :length]
    pad = [(0, 0)] * (waveform.ndim - 1) + [(0, length - have)]
    return np.pad(waveform, pad)


def log_mel_spectrogram(
    waveform: np.ndarray,
    n_mels: int = 80,
    *,
    sample_rate: int = SAMPLE_RATE,
    n_fft: int = N_FFT,
    hop_length: int = HOP_LENGTH,
    n_samples: int | None = N_SAMPLES,
) -> np.ndarray:
    """Whisper's input features: a mono waveform (samples,) at `sample_rate`, or a batch
    (batch, samples), -> float32 (n_mels, frames) or (batch, n_mels, frames). The waveform
    is first padded with silence (or cut) to `n_samples` (30 s at 16 kHz: 3000 frames,
    what Whisper's encoder takes; a model with other `max_source_positions` needs
    2 * max_source_positions * hop_length); `n_samples=None` keeps its length. The floor
    (loudest - 8) is taken per waveform, as transformers does."""
    array = np.asarray(waveform)
    if array.dtype.kind not in "fiu" or array.ndim not in (1, 2):
        raise ShapeError(
            "log_mel_spectrogram: expected real samples of shape (samples,) or "
            f"(batch, samples), got {array.dtype} of shape {array.shape}"
        )
    if not np.isfinite(array).all():
        raise LuminalError("log_mel_spectrogram: the waveform holds NaN or infinite samples")
    # transformers turns the waveform into float32 first; the STFT runs in float64 here
    array = array.astype(np.float32)
    if n_samples is not None:
        array = pad_or_trim(array, n_samples)
    if array.ndim == 2:
        return np.stack([_log_mel(row, n_mels, sample_rate, n_fft, hop_length) for row in array])
    return _log_mel(array, n_mels, sample_rate, n_fft, hop_length)


def _log_mel(
    waveform: np.ndarray, n_mels: int, sample_rate: int, n_fft: int, hop_length: int
) -> np.ndarray:
    power = power_spectrogram(waveform, n_fft, hop_length)[:, :-1]  # the last frame is dropped
    filters = mel_filters(n_mels, n_fft, sample_rate)
    mel = filters.T @ power
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


__all__ = [
    "CHUNK_LENGTH",
    "HOP_LENGTH",
    "N_FFT",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "hann_window",
    "hertz_to_mel",
    "log_mel_spectrogram",
    "mel_filters",
    "mel_to_hertz",
    "pad_or_trim",
    "power_spectrogram",
]

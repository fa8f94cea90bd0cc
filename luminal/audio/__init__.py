"""Audio front ends in numpy: Whisper's log-mel spectrogram, WAV reading, resampling."""

from luminal.audio.features import (
    HOP_LENGTH,
    N_FFT,
    N_SAMPLES,
    SAMPLE_RATE,
    log_mel_spectrogram,
    mel_filters,
    pad_or_trim,
)
from luminal.audio.io import load_audio, read_wav, resample

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "load_audio",
    "log_mel_spectrogram",
    "mel_filters",
    "pad_or_trim",
    "read_wav",
    "resample",
]

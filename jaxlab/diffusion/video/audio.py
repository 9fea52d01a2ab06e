"""Audio front-end in JAX: a log-mel spectrogram at the video frame rate and per-frame windows.

``log_mel(w)[t, m] = log(eps + sum_f |STFT(w)[t, f]|^2 M[f, m])`` with a Hann-windowed STFT whose
frame ``t`` is centred on video frame ``t`` (hop = samples per video frame) and ``M`` the
triangular HTK mel filterbank. The learnable part of the front-end (a projection of every window
of mel frames to the model width) lives in the denoiser's audio encoder.

``audio_windows`` gives each video frame the mel frames ``t - r .. t + r`` (edge padded), the
wav2vec-window convention of EMO/Hallo/Loopy's audio cross-attention.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def mel_filterbank(n_fft: int, sample_rate: int | float, n_mels: int) -> np.ndarray:
    """``(n_fft // 2 + 1, n_mels)`` triangular filters evenly spaced on the HTK mel scale
    ``mel(f) = 2595 log10(1 + f / 700)`` between 0 and the Nyquist frequency."""
    if n_mels < 1 or n_fft < 2:
        raise ValueError(f"n_mels={n_mels}, n_fft={n_fft}: expected n_mels >= 1, n_fft >= 2")
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    inv = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    edges = inv(np.linspace(0.0, mel(sample_rate / 2), n_mels + 2))
    freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lo) / np.maximum(mid - lo, 1e-9)
    down = (hi - freqs[None]) / np.maximum(hi - mid, 1e-9)
    return np.maximum(0.0, np.minimum(up, down)).T.astype(np.float32)


def log_mel(
    waveform: Float[Array, "... samples"],
    *,
    hop: int,
    n_fft: int,
    n_mels: int,
    sample_rate: int | float,
    n_frames: int | None = None,
    eps: float = 1e-4,
) -> Float[Array, "... frames n_mels"]:
    """Log-mel frames centred on every ``hop``-th sample (one per video frame).

    Args:
        waveform: ``[..., samples]`` audio.
        hop: samples per video frame.
        n_fft: STFT window length.
        n_mels: mel bands.
        sample_rate: samples per second.
        n_frames: frames to return (default ``samples // hop``).

    Raises:
        ValueError: if the audio is shorter than ``n_frames`` video frames.
    """
    samples = waveform.shape[-1]
    n_frames = samples // hop if n_frames is None else n_frames
    if n_frames < 1 or samples < n_frames * hop:
        raise ValueError(
            f"waveform: shape {tuple(waveform.shape)} holds {samples // hop} frames of "
            f"{hop} samples, shorter than the requested {n_frames} video frames"
        )
    pad = [(0, 0)] * (waveform.ndim - 1) + [(n_fft // 2, n_fft // 2)]
    padded = jnp.pad(waveform, pad)
    idx = hop * np.arange(n_frames)[:, None] + hop // 2 + np.arange(n_fft)[None, :]
    window = jnp.asarray(np.hanning(n_fft + 2)[1:-1], jnp.float32)
    frames = padded[..., idx] * window.reshape((1,) * (waveform.ndim - 1) + (1, n_fft))
    power = jnp.abs(jnp.fft.rfft(frames, axis=-1)) ** 2
    return jnp.log(eps + power @ jnp.asarray(mel_filterbank(n_fft, sample_rate, n_mels)))


def audio_windows(feats: Float[Array, "... t f"], radius: int) -> Float[Array, "... t w f"]:
    """``out[..., t, j] = feats[..., clip(t - radius + j, 0, T - 1)]``, ``w = 2 radius + 1``."""
    t = feats.shape[-2]
    idx = np.clip(np.arange(t)[:, None] + np.arange(-radius, radius + 1)[None, :], 0, t - 1)
    return feats[..., idx, :]

"""Held-out likelihood of a decoder on a token stream: nats and bits per token, perplexity.

The stream is cut into non-overlapping windows of ``seq_len + 1`` tokens (the remainder is
dropped), as training packs it, and every window is scored by teacher forcing:
``L = -(1/N) Σ_windows Σ_t log p(w_{t+1} | w_{≤t})`` over the ``N = windows · seq_len``
predicted tokens. ``perplexity = exp(L)``, ``bits_per_token = L / ln 2``; with the text's UTF-8
byte count ``bits_per_byte = N · L / (bytes · ln 2)`` compares models with different tokenizers.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Int, Integer

from jaxlab.lm.model import Decoder, next_token_loss


def windows_of(tokens: Integer[np.ndarray, " n"], seq_len: int) -> Int[np.ndarray, "num window"]:
    """``tokens`` cut into ``[num, seq_len + 1]`` int32 windows.

    Raises:
        ValueError: if ``tokens`` holds fewer than ``seq_len + 1`` ids.
    """
    window = seq_len + 1
    num = len(tokens) // window
    if num < 1:
        raise ValueError(f"{len(tokens)} tokens make no window of seq_len + 1 = {window}")
    return np.asarray(tokens[: num * window], np.int32).reshape(num, window)


def evaluate(
    model: Decoder,
    params: Any,
    windows: Int[np.ndarray, "num window"],
    *,
    batch_size: int = 8,
    num_bytes: int | None = None,
) -> dict[str, float]:
    """Likelihood metrics of ``params`` over ``windows`` (see the module docstring).

    Args:
        model: the decoder.
        params: its ``{"params": ...}``.
        windows: ``[num, seq_len + 1]`` token windows (ids below ``model.cfg.vocab_size``).
        batch_size: windows per forward pass (the last batch is padded and masked, so one
            program serves every batch).
        num_bytes: UTF-8 bytes of the text the windows hold, for ``bits_per_byte``.

    Returns:
        ``{"tokens", "windows", "nats_per_token", "bits_per_token", "perplexity"}`` and
        ``bits_per_byte`` when ``num_bytes`` is given.
    """

    @jax.jit
    def total(params, tokens, weights):
        logits = model.apply(params, tokens[:, :-1])
        return next_token_loss(logits, tokens[:, 1:], weights) * jnp.sum(weights)

    num, window = windows.shape
    nats = 0.0
    for start in range(0, num, batch_size):
        batch = windows[start : start + batch_size]
        weights = np.ones((batch_size, window - 1), np.float32)
        if len(batch) < batch_size:
            weights[len(batch) :] = 0.0
            batch = np.concatenate([batch, np.zeros((batch_size - len(batch), window), np.int32)])
        nats += float(total(params, jnp.asarray(batch), jnp.asarray(weights)))
    count = num * (window - 1)
    mean = nats / count
    out = {
        "tokens": count,
        "windows": num,
        "nats_per_token": mean,
        "bits_per_token": mean / math.log(2),
        "perplexity": math.exp(mean),
    }
    if num_bytes:
        out["bits_per_byte"] = nats / (num_bytes * math.log(2))
    return out

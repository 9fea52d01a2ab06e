"""Sinusoidal embedding of the noise-level conditioning (Vaswani et al. 2017; DDPM; EDM)."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jaxtyping import Array, Float


def sinusoidal_embedding(
    c: Float[Array, " batch"], dim: int, *, max_period: float = 10_000.0
) -> Float[Array, "batch dim"]:
    """[cos(c w_k), sin(c w_k)]_k with w_k = max_period^{-k / (dim/2)}, k = 0 .. dim/2 - 1.

    Args:
        c: per-sample conditioning scalar (a time, a step index or EDM's c_noise = ln(sigma) / 4).
        dim: an even embedding width.
        max_period: the longest wavelength.

    Returns:
        (batch, dim) embedding.
    """
    if dim % 2:
        raise ValueError(f"dim: got {dim}, expected an even width")
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    args = jnp.asarray(c, jnp.float32).reshape(-1, 1) * freqs[None, :]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)

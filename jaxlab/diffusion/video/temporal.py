"""Temporal attention over video tokens by reshaping to per-pixel sequences ``(B·H·W, T, C)``.

Every spatial position (pixel or patch token) is its own sequence over time; attention mixes
frames at that position only (the AnimateDiff / Loopy temporal layer). A learnable temporal
position table ``P[T, C]`` is added before attending.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.nn import MultiHeadAttention


def to_pixel_sequences(x: Float[Array, "b t *s c"]) -> Float[Array, "bs t c"]:
    """``[B, T, *S, C] -> [B·prod(S), T, C]`` (row ``b·prod(S) + s`` is position ``s`` of video ``b``)."""
    b, t, c = x.shape[0], x.shape[1], x.shape[-1]
    return jnp.moveaxis(x.reshape(b, t, -1, c), 1, 2).reshape(-1, t, c)


def from_pixel_sequences(y: Float[Array, "bs t c"], shape: tuple[int, ...]) -> Float[Array, "..."]:
    """Inverse of :func:`to_pixel_sequences` for an input of ``shape``."""
    b, t, c = shape[0], shape[1], shape[-1]
    return jnp.moveaxis(y.reshape(b, -1, t, c), 2, 1).reshape(shape)


class TemporalAttention(nn.Module):
    """Self-attention along time at every spatial position (bidirectional, no RoPE).

    ``y[b, :, s] = Attn(x[b, :, s] + P[:T])`` for every position ``s``; input and output
    ``[B, T, *S, C]``.

    Attributes:
        heads: attention heads (``C`` divisible by it).
        max_len: rows of the learnable temporal position table.
    """

    heads: int
    max_len: int

    @nn.compact
    def __call__(self, x: Float[Array, "b t *s c"]) -> Float[Array, "b t *s c"]:
        t, c = x.shape[1], x.shape[-1]
        if t > self.max_len:
            raise ValueError(
                f"x: {t} frames in shape {tuple(x.shape)}, more than max_len={self.max_len}"
            )
        table = self.param("temporal_pos", nn.initializers.normal(0.02), (self.max_len, c))
        seq = to_pixel_sequences(x) + table[None, :t]
        out, _ = MultiHeadAttention(
            self.heads, c // self.heads, causal=False, use_rope=False, name="attn"
        )(seq)
        return from_pixel_sequences(out, x.shape)

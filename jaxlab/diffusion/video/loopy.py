"""Loopy (Jiang et al., ICLR 2025): long-term motion dependency for audio-only portrait video.

* :class:`InterClipTemporalLayer`: motion-frame tokens (features of the previous clips' frames
  from the reference network) are concatenated with the noisy clip's tokens along time at every
  spatial position, learnable temporal embeddings are added, and attention runs with the mask of
  :func:`inter_clip_mask`: clip tokens see the motion frames and the clip, motion tokens see only
  motion tokens. Motion tokens are re-read from the reference network at every stage, so only the
  clip rows are computed: the clip tokens are the queries and ``[motion ‖ clip]`` the keys.
* :class:`IntraClipTemporalLayer`: temporal self-attention within the noisy clip only.
* :func:`temporal_segment` (TSM): a long motion context of ``L`` frames is cut into segments of
  ``stride`` frames, each widened by ``expand`` frames on both sides (overlapping, clipped at the
  ends), and every segment is averaged into one abstract frame; the most recent ``keep_recent``
  frames are kept unpooled. The paper does not state the pooling [unverified]; we chose a mean,
  because it is parameter-free (the abstract frame is an unbiased summary of the segment's pose,
  so the model can read a slow drift's phase from a sequence of them) and linear, so it commutes
  with the linear patch embedding and can be applied to the frames before the reference network;
  the overlap (``expand``) smooths the segment boundaries. The unpooled recent frames keep the
  clip transition continuous.
* :class:`AudioToLatents`: one shared network maps per-frame audio windows or (during training)
  motion features (head speed, expression level) to motion latents that join the audio
  cross-attention context; inference uses audio only.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxlab.diffusion.video.temporal import (
    TemporalAttention,
    from_pixel_sequences,
    to_pixel_sequences,
)
from jaxlab.nn import MLP, MultiHeadAttention


def segment_matrix(length: int, stride: int, expand: int) -> np.ndarray:
    """``[length // stride, length]`` row-stochastic pooling: row ``k`` averages frames
    ``max(0, k·stride - expand) .. min(length, (k+1)·stride + expand) - 1``."""
    if stride < 1 or expand < 0 or length % stride:
        raise ValueError(
            f"stride={stride}, expand={expand}: expected stride >= 1 dividing the pooled "
            f"length {length} and expand >= 0"
        )
    n = length // stride
    w = np.zeros((n, length), np.float32)
    for k in range(n):
        lo, hi = max(0, k * stride - expand), min(length, (k + 1) * stride + expand)
        w[k, lo:hi] = 1.0 / (hi - lo)
    return w


def tsm_output_len(length: int, stride: int, keep_recent: int) -> int:
    """Abstract frames produced by :func:`temporal_segment` from ``length`` frames."""
    return (length - keep_recent) // stride + keep_recent


def temporal_segment(
    motion: Float[Array, "b l *rest"], *, stride: int, expand: int, keep_recent: int = 0
) -> Float[Array, "b m *rest"]:
    """Temporal segment module: ``[B, L, ...] -> [B, (L - r) / stride + r, ...]``.

    ``out = [W @ motion[:, :L - r] ‖ motion[:, L - r:]]`` with ``W`` = :func:`segment_matrix`
    (oldest segment first, the ``r = keep_recent`` most recent frames last).
    """
    length = motion.shape[1]
    if not 0 <= keep_recent < length:
        raise ValueError(f"keep_recent={keep_recent}: expected 0 <= keep_recent < L={length}")
    w = jnp.asarray(segment_matrix(length - keep_recent, stride, expand))
    pooled = jnp.einsum("ml,bl...->bm...", w, motion[:, : length - keep_recent])
    return jnp.concatenate([pooled, motion[:, length - keep_recent :]], axis=1)


def inter_clip_mask(n_motion: int, clip_len: int) -> np.ndarray:
    """``[M + T, M + T]`` boolean mask of the inter-clip layer over ``[motion ‖ clip]``:
    clip rows see everything, motion rows see motion only."""
    m = np.ones((n_motion + clip_len, n_motion + clip_len), bool)
    m[:n_motion, n_motion:] = False
    return m


class InterClipTemporalLayer(nn.Module):
    """Clip tokens attend over ``[motion ‖ clip]`` along time at every position (see module doc).

    Attributes:
        heads: attention heads.
        n_motion: motion tokens ``M`` (after the TSM).
        clip_len: clip frames ``T``.
    """

    heads: int
    n_motion: int
    clip_len: int

    @nn.compact
    def __call__(
        self,
        clip: Float[Array, "b t n d"],
        motion: Float[Array, "b m n d"],
        motion_valid: Bool[Array, "b m"] | None = None,
    ) -> Float[Array, "b t n d"]:
        b, t, n, d = clip.shape
        if t != self.clip_len or motion.shape != (b, self.n_motion, n, d):
            raise ValueError(
                f"clip/motion: got shapes {tuple(clip.shape)}, {tuple(motion.shape)}, expected "
                f"({b}, {self.clip_len}, {n}, {d}) and ({b}, {self.n_motion}, {n}, {d})"
            )
        table = self.param(
            "temporal_pos", nn.initializers.normal(0.02), (self.n_motion + self.clip_len, d)
        )
        q = to_pixel_sequences(clip) + table[None, self.n_motion :]
        kv = jnp.concatenate([to_pixel_sequences(motion) + table[None, : self.n_motion], q], axis=1)
        valid = jnp.ones((b, self.n_motion), bool) if motion_valid is None else motion_valid
        ctx_mask = jnp.concatenate([valid, jnp.ones((b, t), bool)], axis=1)
        ctx_mask = jnp.repeat(ctx_mask, n, axis=0)  # row b·N + s belongs to video b
        out, _ = MultiHeadAttention(
            self.heads, d // self.heads, causal=False, use_rope=False, name="attn"
        )(q, context=kv, context_mask=ctx_mask)
        return from_pixel_sequences(out, clip.shape)


class IntraClipTemporalLayer(nn.Module):
    """Temporal self-attention within the noisy clip (``[B, T, N, D]``)."""

    heads: int
    clip_len: int

    @nn.compact
    def __call__(self, clip: Float[Array, "b t n d"]) -> Float[Array, "b t n d"]:
        return TemporalAttention(self.heads, self.clip_len, name="temporal")(clip)


class AudioToLatents(nn.Module):
    """Shared audio/motion -> motion-latent network.

    ``z = F(E_a(audio))`` at inference, ``z = F(E_m(motion))`` for the training rows chosen by
    ``use_motion``; ``F`` is shared, so motion latents and audio latents live in one space.
    Input ``audio [B, T, W, F]``, ``motion [B, T, Fm]``; output ``[B, T, K, D]``.

    Attributes:
        width: model width ``D``.
        n_latents: latent tokens ``K`` per frame.
    """

    width: int
    n_latents: int = 2

    @nn.compact
    def __call__(
        self,
        audio: Float[Array, "b t w f"],
        motion: Float[Array, "b t fm"] | None = None,
        use_motion: Bool[Array, " b"] | None = None,
    ) -> Float[Array, "b t k d"]:
        b, t = audio.shape[:2]
        h = nn.Dense(self.width, name="audio_in")(audio.reshape(b, t, -1))
        if motion is not None:
            hm = nn.Dense(self.width, name="motion_in")(motion)
            keep = jnp.zeros((b,), bool) if use_motion is None else use_motion
            h = jnp.where(keep[:, None, None], hm, h)
        z = MLP((2 * self.width, self.n_latents * self.width), activation=nn.gelu, name="shared")(
            nn.gelu(h)
        )
        return z.reshape(b, t, self.n_latents, self.width)

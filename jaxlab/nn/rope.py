"""Rotary position embeddings (RoPE; Su et al., 2021, RoFormer)."""

import jax.numpy as jnp
from jaxtyping import Array, Float, Int


def rope_inverse_frequencies(head_dim: int, base: float = 10_000.0) -> Float[Array, " half"]:
    """Inverse frequencies ``θ_i = base^(-2i/d)`` for ``i = 0 … d/2-1`` (RoFormer eq. 15).

    Args:
        head_dim: ``d``, the (even) per-head feature size.
        base: the wavelength base (OLMoE ``rope_theta = 10000``).

    Returns:
        ``[d/2]`` float32 inverse frequencies.

    Raises:
        ValueError: if ``head_dim`` is not a positive even integer.
    """
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim={head_dim!r}: expected a positive even integer for RoPE")
    exponents = jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim
    return jnp.power(jnp.float32(base), -exponents)


def apply_rope(
    x: Float[Array, "batch seq heads head_dim"],
    positions: Int[Array, "batch seq"],
    *,
    base: float = 10_000.0,
) -> Float[Array, "batch seq heads head_dim"]:
    """Rotates query or key features by their absolute position (RoFormer eq. 34).

    Uses the "rotate-half" layout (GPT-NeoX, LLaMA, OLMo): feature ``i`` is paired with feature
    ``i + d/2`` and the pair is rotated by the angle ``m·θ_i`` for position ``m``:

        ``y_i       = x_i cos(mθ_i) - x_{i+d/2} sin(mθ_i)``
        ``y_{i+d/2} = x_{i+d/2} cos(mθ_i) + x_i sin(mθ_i)``

    Because rotations compose, ``<R_m q, R_n k> = <q, R_{n-m} k>``: attention scores depend on the
    positions only through the offset ``n - m``.

    Args:
        x: queries or keys ``[batch, seq, heads, head_dim]``.
        positions: integer positions ``[batch, seq]`` (may be offset, e.g. during cached decoding).
        base: the wavelength base.

    Returns:
        The rotated features, same shape and dtype as ``x`` (computed in float32).
    """
    head_dim = x.shape[-1]
    inv_freq = rope_inverse_frequencies(head_dim, base)
    angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq[None, None, None, :]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., : head_dim // 2], x32[..., head_dim // 2 :]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)

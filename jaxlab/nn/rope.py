"""Rotary position embeddings (RoPE; Su et al., 2021, RoFormer) and Llama 3's scaled variant."""

import dataclasses

import jax.numpy as jnp
import numpy as np
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
    inv_freq: Float[Array, " half"] | None = None,
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
        inv_freq: ``[head_dim / 2]`` inverse frequencies replacing ``base^(-2i/d)`` (scaled
            RoPE, e.g. :func:`llama3_inverse_frequencies`); ``None``: computed from ``base``.

    Returns:
        The rotated features, same shape and dtype as ``x`` (computed in float32).
    """
    head_dim = x.shape[-1]
    if inv_freq is None:
        inv_freq = rope_inverse_frequencies(head_dim, base)
    angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq[None, None, None, :]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., : head_dim // 2], x32[..., head_dim // 2 :]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


def llama3_inverse_frequencies(
    head_dim: int,
    base: float,
    *,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_position_embeddings: int,
) -> np.ndarray:
    """Llama 3.1's scaled RoPE inverse frequencies (``rope_scaling.rope_type = "llama3"``).

    With wavelengths ``λ_i = 2π / θ_i`` and ``L = original_max_position_embeddings``: components
    with ``λ_i < L / high_freq_factor`` keep ``θ_i``; those with ``λ_i > L / low_freq_factor``
    become ``θ_i / factor``; in between they interpolate with
    ``s = (L / λ_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``:
    ``(1 - s) θ_i / factor + s θ_i``. Computed in float32 numpy as Hugging Face does, so it can
    be stored in a static config.

    Returns:
        ``[head_dim / 2]`` float32 inverse frequencies.
    """
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim={head_dim!r}: expected a positive even integer for RoPE")
    inv_freq = 1.0 / (
        base ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim)
    )
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's RoPE frequency scaling (Hugging Face ``rope_scaling`` with ``rope_type="llama3"``).

    Attributes:
        factor: divisor of the low frequencies.
        low_freq_factor: wavelengths above ``original_max_position_embeddings / low_freq_factor``
            are scaled by ``1 / factor``.
        high_freq_factor: wavelengths below ``original_max_position_embeddings / high_freq_factor``
            are kept.
        original_max_position_embeddings: the pre-training context length ``L``.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "original_max_position_embeddings"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"Llama3RopeScaling.{name}={getattr(self, name)!r}: expected a positive number"
                )
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"Llama3RopeScaling.high_freq_factor={self.high_freq_factor!r}: expected more "
                f"than low_freq_factor={self.low_freq_factor!r}"
            )

    def inverse_frequencies(self, head_dim: int, base: float) -> tuple[float, ...]:
        """:func:`llama3_inverse_frequencies` as a (hashable) tuple of floats."""
        return tuple(
            float(f)
            for f in llama3_inverse_frequencies(
                head_dim,
                base,
                factor=self.factor,
                low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor,
                original_max_position_embeddings=self.original_max_position_embeddings,
            )
        )

"""CyberHost (Lin, Jiang et al., ICLR 2025): region attention and human-prior conditions.

* :class:`RegionAttention` (RAM): for every region ``r`` (hand, face) a learnable spatio-temporal
  latent bank ``B_r[T, K_b, D]`` (an identity-agnostic motion prior) is concatenated with identity
  tokens ``I_r[K_i, D]`` encoded from a crop of the reference image around the region; the frame's
  tokens attend to ``[B_r[t] ‖ I_r]`` and the result is written back under the region mask:
  ``x' = x + sum_r m_r ⊙ Attn_r(x, [B_r ‖ I_r])`` [interp: exact wiring]. A linear head predicts
  the region masks from the tokens (used when no mask is given, i.e. at inference).
* :func:`movement_map`: the body-movement map, a box covering the range of the body's root
  positions (plus the body's half size), fed as an extra input channel to stabilise the body.
* hand clarity: a scalar condition (the Laplacian-energy sharpness of the hand,
  :func:`jaxlab.diffusion.video.measure.hand_sharpness`, log-scaled) embedded like the time.
* :func:`pose_map`: the pose-aligned reference feature, Gaussian heat maps of the reference's
  keypoints given to the reference network with the reference image.
* :func:`local_enhancement_loss`: the denoising error averaged inside each region mask, added to
  the global loss.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.nn import MultiHeadAttention


class RegionAttention(nn.Module):
    """Region attention module over frame tokens ``[B, T, N, D]`` (see the module docstring).

    Attributes:
        n_regions: regions ``R``.
        bank_size: bank tokens ``K_b`` per region and frame.
        clip_len: frames ``T`` of the bank.
        heads: attention heads.
    """

    n_regions: int
    bank_size: int
    clip_len: int
    heads: int

    @nn.compact
    def __call__(
        self,
        x: Float[Array, "b t n d"],
        identity: Float[Array, "b r ki d"],
        masks: Float[Array, "b t n r"] | None = None,
    ) -> tuple[Float[Array, "b t n d"], Float[Array, "b t n r"]]:
        """Returns ``(x', mask_logits)``; ``masks=None`` writes back under ``sigmoid(logits)``."""
        b, t, n, d = x.shape
        r = self.n_regions
        if identity.shape[:2] != (b, r) or identity.shape[-1] != d:
            raise ValueError(
                f"identity: got shape {tuple(identity.shape)}, expected ({b}, {r}, K, {d})"
            )
        if t != self.clip_len:
            raise ValueError(f"x: {t} frames in shape {tuple(x.shape)}, expected {self.clip_len}")
        logits = nn.Dense(r, name="mask_head")(x)
        if masks is None:
            masks = jax.nn.sigmoid(logits)
        elif masks.shape != (b, t, n, r):
            raise ValueError(f"masks: got shape {tuple(masks.shape)}, expected {(b, t, n, r)}")
        bank = self.param(
            "bank", nn.initializers.normal(0.02), (r, self.clip_len, self.bank_size, d)
        )
        q = x.reshape(b * t, n, d)
        out = x
        for i in range(r):
            ctx = jnp.concatenate(
                [
                    jnp.broadcast_to(bank[i][None], (b, t, self.bank_size, d)),
                    jnp.broadcast_to(identity[:, i, None], (b, t) + identity.shape[2:]),
                ],
                axis=2,
            ).reshape(b * t, -1, d)
            y, _ = MultiHeadAttention(
                self.heads, d // self.heads, causal=False, use_rope=False, name=f"attn{i}"
            )(q, context=ctx)
            out = out + masks[..., i : i + 1] * y.reshape(b, t, n, d)
        return out, logits


def region_crop(
    image: Float[Array, "s s c"], mask: Float[Array, "s s"], crop: int
) -> Float[Array, "crop crop c"]:
    """The ``crop x crop`` window of ``image`` centred on ``mask``'s centroid (clipped inside)."""
    s = image.shape[0]
    if mask.shape != image.shape[:2]:
        raise ValueError(f"mask: got shape {tuple(mask.shape)}, expected {image.shape[:2]}")
    c = jnp.arange(s, dtype=jnp.float32) + 0.5
    tot = jnp.sum(mask) + 1e-6
    cy, cx = jnp.sum(mask * c[:, None]) / tot, jnp.sum(mask * c[None, :]) / tot
    y0 = jnp.clip(jnp.round(cy - crop / 2), 0, s - crop).astype(jnp.int32)
    x0 = jnp.clip(jnp.round(cx - crop / 2), 0, s - crop).astype(jnp.int32)
    return jax.lax.dynamic_slice(image, (y0, x0, 0), (crop, crop, image.shape[-1]))


def movement_map(
    centres: Float[Array, "t 2"], half_size: tuple[float, float], size: int
) -> Float[Array, "s s 1"]:
    """Soft box ``[min x - hx, max x + hx] x [min y - hy, max y + hy]`` over the root positions."""
    c = jnp.arange(size, dtype=jnp.float32) + 0.5
    lo, hi = centres.min(0), centres.max(0)
    bx = jax.nn.sigmoid((c - lo[0] + half_size[0]) / 0.3) * jax.nn.sigmoid(
        (hi[0] + half_size[0] - c) / 0.3
    )
    by = jax.nn.sigmoid((c - lo[1] + half_size[1]) / 0.3) * jax.nn.sigmoid(
        (hi[1] + half_size[1] - c) / 0.3
    )
    return (by[:, None] * bx[None, :])[..., None]


def pose_map(keypoints: Float[Array, "k 2"], size: int, sd: float = 1.0) -> Float[Array, "s s 1"]:
    """Sum of Gaussian heat maps (sd ``sd`` px) at the (x, y) keypoints."""
    c = jnp.arange(size, dtype=jnp.float32) + 0.5
    gx = jnp.exp(-0.5 * ((c[None, :] - keypoints[:, :1]) / sd) ** 2)  # [k, s]
    gy = jnp.exp(-0.5 * ((c[None, :] - keypoints[:, 1:]) / sd) ** 2)
    return jnp.einsum("ky,kx->yx", gy, gx)[..., None]


def local_enhancement_loss(
    sq_err: Float[Array, "b t s s c"], masks: Float[Array, "b t s s r"]
) -> Float[Array, ""]:
    """``sum_r sum(m_r ⊙ e) / sum(m_r)``: the squared error averaged inside every region."""
    if sq_err.shape[:-1] != masks.shape[:-1]:
        raise ValueError(
            f"masks: got shape {tuple(masks.shape)}, expected {tuple(sq_err.shape[:-1])} + (R,)"
        )
    e = jnp.mean(sq_err, -1, keepdims=True)
    return jnp.sum(jnp.sum(e * masks, (0, 1, 2, 3)) / (jnp.sum(masks, (0, 1, 2, 3)) + 1e-6))

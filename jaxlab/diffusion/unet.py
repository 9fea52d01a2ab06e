"""A small U-Net for images (NHWC) in the style of DDPM / ADM, conditioned on a noise-level scalar.

Each resolution has ``blocks_per_level`` residual blocks
h <- h + Conv(silu(GN(Conv(silu(GN(h)))) (1 + s) + b)) with (s, b) = W emb(c) (ADM's scale-shift
norm: an added bias before the group norm would be removed by it), skip connections from the down
path to the
up path, strided-conv downsampling and nearest-neighbour upsampling, and optional non-causal
self-attention (jaxlab.nn.MultiHeadAttention without RoPE) at the lowest resolution. The output
convolution is zero-initialised. Convolutions are ``jaxlab.nn.conv.Conv`` (``nn.Conv``'s parameters
and results as im2col + matmul: training and sampling run inside ``lax.scan``, where XLA:CPU's
weight-gradient convolution is much slower than a matmul).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.time_embedding import sinusoidal_embedding
from jaxlab.nn import MultiHeadAttention
from jaxlab.nn.conv import Conv


def _conv(features: int, name: str, *, kernel: int = 3, stride: int = 1, zero: bool = False):
    init = nn.initializers.zeros_init() if zero else nn.initializers.lecun_normal()
    return Conv(
        features,
        kernel,
        stride,
        kernel_init=init,
        kernel_axes=(None, None, "embed", "mlp"),
        name=name,
    )


def _groups(ch: int) -> int:
    for g in (8, 4, 2, 1):
        if ch % g == 0:
            return g
    return 1


class ResBlock(nn.Module):
    """Residual block; the conditioning scales and shifts the normalised features (ADM)."""

    features: int

    @nn.compact
    def __call__(self, h, emb):
        y = nn.silu(nn.GroupNorm(num_groups=_groups(h.shape[-1]), name="gn1")(h))
        y = _conv(self.features, "conv1")(y)
        scale, shift = jnp.split(nn.Dense(2 * self.features, name="emb")(nn.silu(emb)), 2, -1)
        y = nn.GroupNorm(num_groups=_groups(self.features), name="gn2")(y)
        y = nn.silu(y * (1 + scale[:, None, None, :]) + shift[:, None, None, :])
        y = _conv(self.features, "conv2", zero=True)(y)
        if h.shape[-1] != self.features:
            h = _conv(self.features, "skip", kernel=1)(h)
        return h + y


class UNet(nn.Module):
    """U-Net denoiser: (batch, H, W, C) images and (batch,) conditioning -> (batch, H, W, C).

    Attributes:
        channels: feature width per resolution level (H must be divisible by 2^(levels - 1)).
        blocks_per_level: residual blocks per level on the way down (one more on the way up).
        attention: add one self-attention layer at the lowest resolution.
        heads: attention heads.
        emb_dim: width of the conditioning embedding.
        time_scale: multiplies the conditioning before the sinusoidal embedding.
    """

    channels: tuple[int, ...] = (32, 64)
    blocks_per_level: int = 1
    attention: bool = True
    heads: int = 4
    emb_dim: int = 128
    time_scale: float = 1.0

    @nn.compact
    def __call__(
        self, x: Float[Array, "batch h w c"], c: Float[Array, " batch"]
    ) -> Float[Array, "batch h w c"]:
        if x.ndim != 4:
            raise ValueError(f"x: got shape {x.shape}, expected (batch, H, W, C)")
        levels = len(self.channels)
        if x.shape[1] % 2 ** (levels - 1) or x.shape[2] % 2 ** (levels - 1):
            raise ValueError(
                f"x: got spatial size {x.shape[1:3]}, expected multiples of {2 ** (levels - 1)}"
            )
        emb = sinusoidal_embedding(jnp.broadcast_to(c, x.shape[:1]) * self.time_scale, self.emb_dim)
        emb = nn.Dense(4 * self.emb_dim, name="emb0")(emb)
        emb = nn.Dense(4 * self.emb_dim, name="emb1")(nn.silu(emb))
        h = _conv(self.channels[0], "conv_in")(x)
        skips = [h]
        for lvl, ch in enumerate(self.channels):
            for b in range(self.blocks_per_level):
                h = ResBlock(ch, name=f"down{lvl}_{b}")(h, emb)
                skips.append(h)
            if lvl < levels - 1:
                h = _conv(ch, f"downsample{lvl}", stride=2)(h)
                skips.append(h)
        h = ResBlock(self.channels[-1], name="mid0")(h, emb)
        if self.attention:
            bsz, hh, ww, ch = h.shape
            y = nn.GroupNorm(num_groups=_groups(ch), name="attn_norm")(h).reshape(bsz, hh * ww, ch)
            y, _ = MultiHeadAttention(
                n_heads=self.heads,
                head_dim=ch // self.heads,
                causal=False,
                use_rope=False,
                name="attn",
            )(y)
            h = h + y.reshape(bsz, hh, ww, ch)
        h = ResBlock(self.channels[-1], name="mid1")(h, emb)
        for lvl in reversed(range(levels)):
            ch = self.channels[lvl]
            for b in range(self.blocks_per_level + 1):
                h = ResBlock(ch, name=f"up{lvl}_{b}")(jnp.concatenate([h, skips.pop()], -1), emb)
            if lvl > 0:
                h = jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2)  # nearest-neighbour x2
                h = _conv(ch, f"upsample{lvl}")(h)
        h = nn.silu(nn.GroupNorm(num_groups=_groups(h.shape[-1]), name="gn_out")(h))
        return _conv(x.shape[-1], "conv_out", zero=True)(h)

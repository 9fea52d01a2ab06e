"""A small DiT (Peebles & Xie 2023): patchify, transformer blocks with adaLN-Zero, unpatchify.

Tokens are p x p patches of an NHWC image plus a fixed 2-D sinusoidal position embedding. Each block
is x <- x + g1 * Attn(LN(x) (1 + s1) + b1); x <- x + g2 * MLP(LN(x) (1 + s2) + b2), with
(s, b, g) regressed from the conditioning embedding by a zero-initialised layer (adaLN-Zero), so
every block starts as the identity. Attention is jaxlab.nn.MultiHeadAttention without RoPE or mask.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxlab.diffusion.time_embedding import sinusoidal_embedding
from jaxlab.nn import MLP, MultiHeadAttention


def _pos_embedding(gh: int, gw: int, dim: int) -> Float[Array, "tokens dim"]:
    """Fixed 2-D sinusoidal positions: half the width encodes the row, half the column."""
    rows = sinusoidal_embedding(jnp.repeat(jnp.arange(gh), gw).astype(jnp.float32), dim // 2)
    cols = sinusoidal_embedding(jnp.tile(jnp.arange(gw), gh).astype(jnp.float32), dim // 2)
    return jnp.concatenate([rows, cols], -1)


class DiTBlock(nn.Module):
    """One adaLN-Zero transformer block, optionally with a key padding mask and cross-attention.

    Self-attention part (DiT): x <- x + g1 Attn(LN(x)(1 + s1) + b1; padding_mask);
    x <- x + g2 MLP(LN(x)(1 + s2) + b2), with (s, b, g) from a zero-initialised Dense of
    silu(emb) (emb: (batch, width)).

    With ``context`` (batch, ctx, ctx_width) a cross-attention stage follows (Diffusion Planner's
    decoder block, ``model/module/dit.py``), with affine LayerNorms LN3, LN4 and a second MLP:

    - ``cross_residual=False`` (the original's code, reproduced): x <- XAttn(LN3(x), context);
      x <- MLP2(LN4(x)) -- neither stage keeps a skip connection;
    - ``cross_residual=True``: x <- x + XAttn(LN3(x), context); x <- x + MLP2(LN4(x)).

    Attributes:
        width, heads, mlp_ratio: sizes.
        cross_residual: the form of the cross-attention stage (ignored without ``context``).
    """

    width: int
    heads: int
    mlp_ratio: int = 4
    cross_residual: bool = True

    @nn.compact
    def __call__(
        self,
        x: Float[Array, "batch tokens width"],
        emb: Float[Array, "batch width"],
        *,
        mask: Bool[Array, "batch tokens"] | None = None,
        context: Float[Array, "batch ctx cw"] | None = None,
        context_mask: Bool[Array, "batch ctx"] | None = None,
    ) -> Float[Array, "batch tokens width"]:
        """``mask``: True for real tokens (padded tokens are never attended to)."""
        mod = nn.Dense(6 * self.width, kernel_init=nn.initializers.zeros_init(), name="ada")(
            nn.silu(emb)
        )
        s1, b1, g1, s2, b2, g2 = (m[:, None, :] for m in jnp.split(mod, 6, axis=-1))
        y = nn.LayerNorm(use_scale=False, use_bias=False, name="ln1")(x) * (1 + s1) + b1
        y, _ = MultiHeadAttention(
            n_heads=self.heads,
            head_dim=self.width // self.heads,
            causal=False,
            use_rope=False,
            name="attn",
        )(y, padding_mask=mask)
        x = x + g1 * y
        y = nn.LayerNorm(use_scale=False, use_bias=False, name="ln2")(x) * (1 + s2) + b2
        y = MLP((self.mlp_ratio * self.width, self.width), activation=nn.gelu, name="mlp")(y)
        x = x + g2 * y
        if context is None:
            if context_mask is not None:
                raise ValueError("context_mask: given without context")
            return x
        y, _ = MultiHeadAttention(
            n_heads=self.heads,
            head_dim=self.width // self.heads,
            causal=False,
            use_rope=False,
            name="cross_attn",
        )(nn.LayerNorm(name="ln3")(x), context=context, context_mask=context_mask)
        x = x + y if self.cross_residual else y
        y = MLP((self.mlp_ratio * self.width, self.width), activation=nn.gelu, name="mlp2")(
            nn.LayerNorm(name="ln4")(x)
        )
        return x + y if self.cross_residual else y


class DiT(nn.Module):
    """DiT denoiser: (batch, H, W, C) images and (batch,) conditioning -> (batch, H, W, C).

    Attributes:
        patch: patch size p (H and W divisible by p).
        width: token width.
        depth: number of blocks.
        heads: attention heads.
        time_scale: multiplies the conditioning before the sinusoidal embedding.
    """

    patch: int = 2
    width: int = 64
    depth: int = 4
    heads: int = 4
    time_scale: float = 1.0

    @nn.compact
    def __call__(
        self, x: Float[Array, "batch h w c"], c: Float[Array, " batch"]
    ) -> Float[Array, "batch h w c"]:
        if x.ndim != 4:
            raise ValueError(f"x: got shape {x.shape}, expected (batch, H, W, C)")
        b, h, w, ch = x.shape
        p = self.patch
        if h % p or w % p:
            raise ValueError(f"x: got spatial size {(h, w)}, expected multiples of patch={p}")
        gh, gw = h // p, w // p
        tok = x.reshape(b, gh, p, gw, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, -1)
        tok = nn.Dense(self.width, name="embed")(tok) + _pos_embedding(gh, gw, self.width)[None]
        emb = sinusoidal_embedding(jnp.broadcast_to(c, (b,)) * self.time_scale, self.width)
        emb = nn.Dense(self.width, name="t0")(emb)
        emb = nn.Dense(self.width, name="t1")(nn.silu(emb))
        for i in range(self.depth):
            tok = DiTBlock(self.width, self.heads, name=f"block{i}")(tok, emb)
        shift, scale = jnp.split(
            nn.Dense(2 * self.width, kernel_init=nn.initializers.zeros_init(), name="ada_out")(
                nn.silu(emb)
            ),
            2,
            axis=-1,
        )
        tok = nn.LayerNorm(use_scale=False, use_bias=False, name="ln_out")(tok)
        tok = tok * (1 + scale[:, None]) + shift[:, None]
        out = nn.Dense(p * p * ch, kernel_init=nn.initializers.zeros_init(), name="out")(tok)
        return out.reshape(b, gh, gw, p, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, ch)

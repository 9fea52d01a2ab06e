"""An MLP denoiser for low-dimensional data (2-D toys): out = MLP([x, emb(c)]) with time FiLM."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.time_embedding import sinusoidal_embedding


def _dense(features: int, axes: tuple[str, str], name: str, zero: bool = False) -> nn.Dense:
    init = nn.initializers.zeros_init() if zero else nn.initializers.lecun_normal()
    return nn.Dense(features, kernel_init=nn.with_logical_partitioning(init, axes), name=name)


class MLPDenoiser(nn.Module):
    """Residual MLP: h <- h + W2 silu(LN(h) W1 * (1 + s(c)) + b(c)); out = W_o silu(LN(h)) + W_s x,
    with W_o and W_s zero-initialised.

    Attributes:
        width: hidden width.
        depth: number of residual blocks.
        emb_dim: width of the sinusoidal conditioning embedding.
        time_scale: multiplies the conditioning before the embedding (e.g. 1000 for t in [0, 1]).
    """

    width: int = 128
    depth: int = 3
    emb_dim: int = 64
    time_scale: float = 1.0

    @nn.compact
    def __call__(
        self, x: Float[Array, "batch d"], c: Float[Array, " batch"]
    ) -> Float[Array, "batch d"]:
        """Predict an array shaped like x (noise, data or v, by how it is trained)."""
        if x.ndim != 2:
            raise ValueError(f"x: got shape {x.shape}, expected (batch, d)")
        emb = sinusoidal_embedding(jnp.broadcast_to(c, x.shape[:1]) * self.time_scale, self.emb_dim)
        emb = nn.silu(_dense(self.width, ("embed", "mlp"), "emb_0")(emb))
        emb = _dense(self.width, ("mlp", "embed"), "emb_1")(emb)
        h = _dense(self.width, ("embed", "mlp"), "in")(x)
        for i in range(self.depth):
            mod = _dense(2 * self.width, ("embed", "mlp"), f"mod_{i}")(nn.silu(emb))
            scale, shift = jnp.split(mod, 2, axis=-1)
            y = nn.LayerNorm(name=f"norm_{i}")(h)
            y = _dense(self.width, ("embed", "mlp"), f"fc1_{i}")(y) * (1 + scale) + shift
            y = _dense(self.width, ("mlp", "embed"), f"fc2_{i}")(nn.silu(y))
            h = h + y
        h = nn.silu(nn.LayerNorm(name="norm_out")(h))
        out = _dense(x.shape[-1], ("embed", "mlp"), "out", zero=True)(h)
        # a linear skip from the input keeps outputs proportional to x available for large |x|
        # (the layer norms bound everything else; noise prediction near t_max is eps ~ x)
        return out + _dense(x.shape[-1], ("embed", "mlp"), "skip", zero=True)(x)

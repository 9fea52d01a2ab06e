"""The networks of a DreamerV3-style world model: encoder, RSSM, decoder and heads (flax linen).

RSSM (Hafner et al. 2019/2023) with a deterministic state ``h`` (GRU of ``deter`` units) and a
stochastic state ``z`` of ``groups`` one-hot categoricals over ``classes``::

    h_t = GRU(h_{t-1}, MLP([z_{t-1}, a_{t-1}]))          (sequence model)
    z_t ~ q(z | h_t, e_t),  e_t = enc(o_t)                 (posterior, "obs_step")
    ẑ_t ~ p(z | h_t)                                       (prior, "img_step")

Categorical logits are mixed with 1% uniform (``unimix``); samples are one-hot with
straight-through gradients ``onehot + p - sg(p)``. The model state's feature is ``[h, z]``.
Heads on the feature: the image decoder (transposed convolutions back to ``S x S x 3``), reward
(two-hot bins), continue (Bernoulli logit). ``aux_heads`` adds LS-Imagine's heads: jump
(Bernoulli logit on ``feat_t``), intrinsic reward (two-hot, ``feat_t``) and, on the pair
``[feat_t, feat_{t+1}]`` of a jumpy transition, the skipped steps Δ and the accumulated reward Ĝ
(two-hot each).

The encoder is ``jaxlab.rl.networks.PixelEncoder`` (16@8x8/4, 32@4x4/2) followed by a dense layer;
actions arrive as one-hot vectors of ``action_dim`` (LS-Imagine appends one "jump" entry).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.nn.conv import ConvTranspose
from jaxlab.rl.networks import PixelEncoder


@dataclasses.dataclass(frozen=True)
class NetConfig:
    """Static network sizes.

    Attributes:
        obs_size: image side ``S`` (decoder output ``S x S x 3``).
        action_dim: size of the one-hot action input.
        deter: GRU units.
        groups, classes: the discrete latent's shape.
        hidden: MLP width of the sequence model, posterior, prior and heads.
        embed: encoder output width.
        depth: decoder channels (doubled per upsampling stage).
        num_bins: two-hot bins of the reward/value heads.
        unimix: uniform mixture of the latent categoricals.
        aux_heads: LS-Imagine's jump, Δ, Ĝ and intrinsic-reward heads.
    """

    obs_size: int = 32
    action_dim: int = 5
    deter: int = 64
    groups: int = 8
    classes: int = 8
    hidden: int = 64
    embed: int = 64
    depth: int = 8
    num_bins: int = 255
    unimix: float = 0.01
    aux_heads: bool = False

    @property
    def feat(self) -> int:
        return self.deter + self.groups * self.classes


@struct.dataclass
class Latent:
    """RSSM state: ``deter`` [*b, D], ``stoch`` one-hot [*b, G, K], ``logits`` [*b, G, K]."""

    deter: Float[Array, "*b d"]
    stoch: Float[Array, "*b g k"]
    logits: Float[Array, "*b g k"]

    def feat(self) -> Float[Array, "*b f"]:
        """``[h, flatten(z)]``."""
        z = self.stoch.reshape(self.stoch.shape[:-2] + (-1,))
        return jnp.concatenate([self.deter, z], -1)


def zeros_latent(cfg: NetConfig, batch: tuple[int, ...]) -> Latent:
    """The initial (all-zero) latent of a batch."""
    return Latent(
        deter=jnp.zeros(batch + (cfg.deter,)),
        stoch=jnp.zeros(batch + (cfg.groups, cfg.classes)),
        logits=jnp.zeros(batch + (cfg.groups, cfg.classes)),
    )


def mixed_logits(logits: Float[Array, "*b k"], unimix: float) -> Float[Array, "*b k"]:
    """Log of ``(1 - unimix) softmax(logits) + unimix / K``."""
    probs = jax.nn.softmax(logits, -1)
    probs = (1 - unimix) * probs + unimix / logits.shape[-1]
    return jnp.log(probs)


def straight_through_sample(
    key: PRNGKeyArray, logits: Float[Array, "*b k"]
) -> Float[Array, "*b k"]:
    """A one-hot sample with straight-through gradients ``onehot + p - sg(p)``."""
    idx = jax.random.categorical(key, logits, -1)
    onehot = jax.nn.one_hot(idx, logits.shape[-1], dtype=logits.dtype)
    probs = jax.nn.softmax(logits, -1)
    return onehot + probs - jax.lax.stop_gradient(probs)


class MLP(nn.Module):
    """Dense -> LayerNorm -> SiLU layers, then a linear output (zero-initialised if ``zero``)."""

    hidden: int
    out: int
    layers: int = 1
    zero: bool = False

    @nn.compact
    def __call__(self, x):
        for _ in range(self.layers):
            x = nn.silu(nn.LayerNorm()(nn.Dense(self.hidden)(x)))
        init = nn.initializers.zeros if self.zero else nn.initializers.lecun_normal()
        return nn.Dense(self.out, kernel_init=init)(x)


@struct.dataclass
class _Pixels:
    image: Float[Array, "*b s s 3"]
    global_info: Float[Array, "*b 0"]


class WorldModel(nn.Module):
    """Encoder, RSSM, decoder and heads; call the methods through ``apply(..., method=...)``."""

    cfg: NetConfig

    def setup(self):
        c = self.cfg
        self.pixel_encoder = PixelEncoder()
        self.embed_dense = nn.Dense(c.embed)
        self.img_in = MLP(c.hidden, c.hidden, layers=0)
        self.gru = nn.GRUCell(c.deter)
        self.prior_net = MLP(c.hidden, c.groups * c.classes)
        self.post_net = MLP(c.hidden, c.groups * c.classes)
        s0 = c.obs_size // 8
        self.dec_in = nn.Dense(s0 * s0 * 4 * c.depth)
        self.dec_convs = [
            ConvTranspose(2 * c.depth, 4, strides=2),
            ConvTranspose(c.depth, 4, strides=2),
            ConvTranspose(3, 4, strides=2),
        ]
        self.reward_head = MLP(c.hidden, c.num_bins, zero=True)
        self.cont_head = MLP(c.hidden, 1)
        if c.aux_heads:
            self.jump_head = MLP(c.hidden, 1)
            self.intrinsic_head = MLP(c.hidden, c.num_bins, zero=True)
            self.delta_head = MLP(c.hidden, c.num_bins, zero=True)
            self.acc_head = MLP(c.hidden, c.num_bins, zero=True)

    def encode(self, image: Float[Array, "*b s s 3"]) -> Float[Array, "*b e"]:
        """Image in ``[-0.5, 0.5]`` -> embedding."""
        lead = image.shape[:-3]
        x = _Pixels(image, jnp.zeros(lead + (0,), image.dtype))
        return nn.silu(self.embed_dense(self.pixel_encoder(x)))

    def _split(self, logits):
        c = self.cfg
        logits = logits.reshape(logits.shape[:-1] + (c.groups, c.classes))
        return mixed_logits(logits, c.unimix)

    def img_step(self, key: PRNGKeyArray, prev: Latent, action: Float[Array, "*b a"]) -> Latent:
        """Prior step: ``h' = GRU(h, MLP([z, a]))``, ``ẑ ~ p(z | h')``."""
        z = prev.stoch.reshape(prev.stoch.shape[:-2] + (-1,))
        x = nn.silu(self.img_in(jnp.concatenate([z, action], -1)))
        h, _ = self.gru(prev.deter, x)
        logits = self._split(self.prior_net(h))
        return Latent(deter=h, stoch=straight_through_sample(key, logits), logits=logits)

    def obs_step(self, key: PRNGKeyArray, prior: Latent, embed: Float[Array, "*b e"]) -> Latent:
        """Posterior: ``z ~ q(z | h, e)`` on the prior's ``h``."""
        logits = self._split(self.post_net(jnp.concatenate([prior.deter, embed], -1)))
        return Latent(deter=prior.deter, stoch=straight_through_sample(key, logits), logits=logits)

    def decode(self, feat: Float[Array, "*b f"]) -> Float[Array, "*b s s 3"]:
        """Feature -> image mean in ``[-0.5, 0.5]`` space."""
        c = self.cfg
        lead = feat.shape[:-1]
        s0 = c.obs_size // 8
        x = self.dec_in(feat.reshape((-1, feat.shape[-1]))).reshape((-1, s0, s0, 4 * c.depth))
        for i, conv in enumerate(self.dec_convs):
            x = conv(x)
            if i < len(self.dec_convs) - 1:
                x = nn.silu(x)
        return x.reshape(lead + (c.obs_size, c.obs_size, 3))

    def heads(self, feat: Float[Array, "*b f"]) -> dict[str, Array]:
        """Reward logits [*b, K], continue logit [*b] (and jump logit, intrinsic logits)."""
        out = {"reward": self.reward_head(feat), "cont": self.cont_head(feat)[..., 0]}
        if self.cfg.aux_heads:
            out["jump"] = self.jump_head(feat)[..., 0]
            out["intrinsic"] = self.intrinsic_head(feat)
        return out

    def jump_heads(self, feat: Float[Array, "*b f"], feat_next: Float[Array, "*b f"]):
        """Δ logits and Ĝ logits [*b, K] of a jumpy transition ``feat -> feat_next``."""
        pair = jnp.concatenate([feat, feat_next], -1)
        return self.delta_head(pair), self.acc_head(pair)

    def __call__(self, key: PRNGKeyArray, image, action):
        """Touches every parameter (for ``init``): one observe step from the zero latent."""
        lead = image.shape[:-3]
        prior = self.img_step(key, zeros_latent(self.cfg, lead), action)
        post = self.obs_step(key, prior, self.encode(image))
        feat = post.feat()
        out = {"image": self.decode(feat), **self.heads(feat)}
        if self.cfg.aux_heads:
            out["delta"], out["acc"] = self.jump_heads(feat, feat)
        return out


class Actor(nn.Module):
    """Feature -> categorical logits over ``num_actions`` (1% uniform mix)."""

    hidden: int
    num_actions: int
    unimix: float = 0.01

    @nn.compact
    def __call__(self, feat):
        logits = MLP(self.hidden, self.num_actions, layers=2)(feat)
        return mixed_logits(logits, self.unimix)


class Critic(nn.Module):
    """Feature -> two-hot value logits (zero-initialised output)."""

    hidden: int
    num_bins: int

    @nn.compact
    def __call__(self, feat):
        return MLP(self.hidden, self.num_bins, layers=2, zero=True)(feat)

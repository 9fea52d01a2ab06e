"""Actor-critic networks: the Kinetix entity transformer, an MLP for flat observations and a small CNN.

Every network is ``ActorCritic(cfg, head)``: a *torso* maps the observation to one embedding
``e``; two separate tanh (or relu) MLPs of ``actor_depth``/``critic_depth`` layers of ``width``
units map ``e`` to the policy head's inputs and to the value ``V(s)`` (paper §3 / Appendix:
5 x 128 tanh layers, no RNN). Inputs carry any number of leading batch axes.

Torsos:

* ``"mlp"`` (flat or padded observations): ``e = relu(W x + b)`` on the flattened observation.
* ``"cnn"`` (pixel observations): two convolutions (16 filters 8x8 stride 4, 32 filters 4x4 stride
  2, relu), flattened and concatenated with ``global_info`` (the original's ``impala_fast``).
* ``"transformer"`` (entity observations, the paper's permutation-invariant network,
  ``kinetix/models/transformer_model.py``):

  1. per-type encoders ``tanh(W_type f + b)``: polygons and circles to ``d - 1`` features plus an
     entity-type scalar (1 polygon, 0 circle), joints and thrusters to ``d``;
  2. a learned-free *dummy* token (all ones) prepended to the shapes;
  3. ``depth`` gated (GTrXL) pre-LayerNorm attention layers; ``num_heads`` heads are split evenly
     over the 4 attention-mask channels (all shapes / joint-connected / one hop / in contact; the
     dummy attends and is attended everywhere; inactive shapes are masked out);
  4. after each attention layer, joint and thruster message passing: joint row ``j`` from shape
     ``a`` to ``b`` sends ``m_j = W_J [s_a, s_b, e_j] + c`` (times the joint mask) to ``s_a``,
     thruster ``t`` on shape ``a`` sends ``m_t = W_T [s_a, e_t] + c`` to ``s_a`` (scatter-add);
  5. masked mean pooling over the dummy and the active shapes.

  No positional encodings, and gathers/scatters follow the given entity indexes, so permuting
  the entities (and their index references) leaves the output unchanged (tested).

Gated residual (GTrXL, Parisotto et al. 2020, eq. 8-11) used twice per layer:
``r = σ(W_r y + U_r x)``, ``z = σ(W_z y + U_z x - b_g)``, ``h = tanh(W_g y + U_g (r ⊙ x))``,
``g(x, y) = (1 - z) ⊙ x + z ⊙ h``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.config import ConfigError
from jaxlab.nn.conv import Conv
from jaxlab.nn.initializers import orthogonal
from jaxlab.rl.action_heads import ActionHead, HeadSpec

NUM_MASK_CHANNELS = 4
#: head sizes up to this compute attention as broadcast products (``MaskedSelfAttention``)
_BROADCAST_HEAD_SIZE = 8


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Static network hyper-parameters (paper defaults for the transformer).

    Attributes:
        kind: torso, ``"transformer"`` (entity obs), ``"mlp"`` (flat obs) or ``"cnn"`` (pixels).
        activation: non-linearity of the encoders and the actor/critic MLPs.
        width: units per actor/critic layer (and the MLP torso's width).
        actor_depth: hidden layers of the actor MLP.
        critic_depth: hidden layers of the critic MLP.
        encoder_size: transformer embedding size ``d``.
        num_heads: attention heads (a multiple of the 4 mask channels).
        qkv_features: total query/key/value features over all heads (flax semantics; the head
            size is ``qkv_features // num_heads``, 2 in the original's 16/8).
        depth: transformer layers.
    """

    kind: Literal["transformer", "mlp", "cnn"] = "transformer"
    activation: Literal["tanh", "relu"] = "tanh"
    width: int = 128
    actor_depth: int = 5
    critic_depth: int = 5
    encoder_size: int = 128
    num_heads: int = 8
    qkv_features: int = 16
    depth: int = 2

    def __post_init__(self):
        for name in ("width", "encoder_size", "num_heads", "qkv_features", "depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"network.{name}", getattr(self, name), "an integer >= 1")
        for name in ("actor_depth", "critic_depth"):
            if getattr(self, name) < 0:
                raise ConfigError(f"network.{name}", getattr(self, name), "an integer >= 0")
        if self.num_heads % NUM_MASK_CHANNELS:
            raise ConfigError(
                "network.num_heads", self.num_heads, "a multiple of the 4 attention-mask channels"
            )
        if self.qkv_features % self.num_heads:
            raise ConfigError(
                "network.qkv_features",
                self.qkv_features,
                f"a multiple of network.num_heads={self.num_heads}",
            )
        if self.encoder_size < 2:
            raise ConfigError("network.encoder_size", self.encoder_size, "an integer >= 2")


def _activation(name: str):
    return nn.tanh if name == "tanh" else nn.relu


def _dense(features: int, scale: float = np.sqrt(2), name: str | None = None) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=constant(0.0), name=name)


class Gating(nn.Module):
    """GRU-style gate ``g(x, y)`` of GTrXL (module docstring); ``x`` the residual stream.

    Inputs are ``[rows, d]`` (tokens flattened), which XLA's CPU backend differentiates about
    twice as fast as ``[batch, tokens, d]``."""

    features: int
    bias: float = 0.0

    @nn.compact
    def __call__(self, x: Float[Array, "r d"], y: Float[Array, "r d"]) -> Float[Array, "r d"]:
        d = self.features
        wy = nn.Dense(3 * d, use_bias=False, name="w_y")(y)
        ux = nn.Dense(2 * d, use_bias=False, name="u_x")(x)
        b_g = self.param("gating_bias", constant(self.bias), (d,))[None]
        r = jax.nn.sigmoid(wy[:, :d] + ux[:, :d])
        z = jax.nn.sigmoid(wy[:, d : 2 * d] + ux[:, d:] - b_g)
        h = jnp.tanh(wy[:, 2 * d :] + nn.Dense(d, use_bias=False, name="u_g")(r * x))
        return (1.0 - z) * x + z * h


class MaskedSelfAttention(nn.Module):
    """Multi-head dot-product self-attention ``softmax(q k^T / sqrt(d_h) + mask) v`` with a
    per-head boolean mask; a query whose keys are all masked attends uniformly (as flax's
    attention does), which only happens for inactive entities.

    Tokens come in flattened (``[B * n, d]``) for the projections and are reshaped to
    ``[B, n, heads, d_h]`` only for the attention weights."""

    num_heads: int
    qkv_features: int
    out_features: int

    @nn.compact
    def __call__(self, x: Float[Array, "r d"], mask: Bool[Array, "b h n n"]) -> Float[Array, "r o"]:
        b, h, n = mask.shape[0], self.num_heads, mask.shape[-1]
        dh = self.qkv_features // h
        qkv = nn.Dense(3 * self.qkv_features, name="qkv")(x).reshape(b, n, 3, h, dh)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        root = np.sqrt(dh).astype(np.float32)
        if dh <= _BROADCAST_HEAD_SIZE:
            # [b, q, k, h]: products summed over the head's few features in one fused loop (a
            # dot with a contraction of 2 costs XLA's CPU backend ~1000 tiny matmuls, and its
            # gradient more)
            logits = jnp.sum(q[:, :, None] * k[:, None], axis=-1) / root
            logits = jnp.where(mask.transpose(0, 2, 3, 1), logits, jnp.finfo(logits.dtype).min)
            weights = jax.nn.softmax(logits, axis=2)
            out = jnp.sum(weights[..., None] * v[:, None], axis=2)
        else:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / root
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
            weights = jax.nn.softmax(logits, axis=-1)
            out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return nn.Dense(self.out_features, name="out")(out.reshape(b * n, self.qkv_features))


class GatedAttentionLayer(nn.Module):
    """Pre-LayerNorm masked multi-head attention with two GTrXL gates (no FFN expansion):
    ``y = g1(x, relu(MHA(LN(x))))``, ``out = g2(y, relu(W LN(y) + b))``; ``x`` is ``[B * n, d]``."""

    features: int
    num_heads: int
    qkv_features: int

    @nn.compact
    def __call__(self, x: Float[Array, "r d"], mask: Bool[Array, "b h n n"]) -> Float[Array, "r d"]:
        attn = MaskedSelfAttention(
            self.num_heads, self.qkv_features, self.features, name="attention"
        )(nn.LayerNorm(name="ln1")(x), mask)
        y = Gating(self.features, name="gate1")(x, nn.relu(attn))
        e = nn.Dense(self.features, name="dense")(nn.LayerNorm(name="ln2")(y))
        return Gating(self.features, name="gate2")(y, nn.relu(e))


def _one_hot_rows(idx: Int[Array, "b k"], n: int, dtype) -> Float[Array, "b k n"]:
    return jax.nn.one_hot(idx, n, dtype=dtype)


def _gather(shapes: Float[Array, "b n d"], onehot: Float[Array, "b k n"]) -> Float[Array, "b k d"]:
    """``shapes[idx]`` per batch element, as a one-hot matmul (cheap gradients on CPU)."""
    return jnp.einsum("bkn,bnd->bkd", onehot, shapes)


def _scatter_add(
    shapes: Float[Array, "b n d"], onehot: Float[Array, "b k n"], delta: Float[Array, "b k d"]
) -> Float[Array, "b n d"]:
    """``shapes.at[idx].add(delta)`` per batch element (one-hot matmul)."""
    return shapes + jnp.einsum("bkn,bkd->bnd", onehot, delta)


class EntityTransformer(nn.Module):
    """The permutation-invariant entity encoder (module docstring, steps 1-5).

    Input: an ``EntityObservation`` (``jaxlab.envs.kinetix``) with leading batch axes ``*b``:
    polygons [*b, P, 27], circles [*b, C, 19], joints [*b, 2J, 22], thrusters [*b, T, 8], masks,
    ``attention_mask`` [*b, 4, N, N] (N = P + C, polygons first), ``joint_indexes`` [*b, 2J, 2]
    and ``thruster_indexes`` [*b, T]. Output: the pooled embedding [*b, d].
    """

    cfg: NetworkConfig

    @nn.compact
    def __call__(self, obs) -> Float[Array, "*b d"]:
        cfg = self.cfg
        d = cfg.encoder_size
        act = _activation(cfg.activation)
        lead = obs.polygons.shape[:-2]
        # the observation may be NumPy (a user's or a test's); the helpers below take JAX arrays
        obs = jax.tree.map(lambda x: jnp.asarray(x).reshape((-1,) + x.shape[len(lead) :]), obs)
        b = obs.polygons.shape[0]

        def encode(features, name, type_id=None):
            k = features.shape[1]
            width = d - 1 if type_id is not None else d
            e = act(_dense(width, name=name)(features.reshape(b * k, -1)))
            if type_id is not None:
                e = jnp.concatenate([e, jnp.full((b * k, 1), float(type_id), e.dtype)], axis=-1)
            return e.reshape(b, k, d)

        polys = encode(obs.polygons, "polygon_encoder", 1)
        circles = encode(obs.circles, "circle_encoder", 0)
        joints = encode(obs.joints, "joint_encoder")
        thrusters = encode(obs.thrusters, "thruster_encoder")

        dummy = jnp.ones((b, 1, d), polys.dtype)
        shapes = jnp.concatenate([dummy, polys, circles], axis=1)
        active = jnp.concatenate(
            [jnp.ones((b, 1), bool), obs.polygon_mask, obs.circle_mask], axis=1
        )
        n = shapes.shape[1]
        mask = jnp.ones((b, NUM_MASK_CHANNELS, n, n), bool)
        mask = mask.at[:, :, 1:, 1:].set(obs.attention_mask)
        mask = mask & active[:, None, :, None] & active[:, None, None, :]
        mask = jnp.repeat(mask, cfg.num_heads // NUM_MASK_CHANNELS, axis=1)

        # +1: the dummy is entity 0.
        j_from = _one_hot_rows(obs.joint_indexes[..., 0] + 1, n, shapes.dtype)
        j_to = _one_hot_rows(obs.joint_indexes[..., 1] + 1, n, shapes.dtype)
        t_on = _one_hot_rows(obs.thruster_indexes + 1, n, shapes.dtype)
        joint_mask = obs.joint_mask[..., None].astype(shapes.dtype)
        thruster_mask = obs.thruster_mask[..., None].astype(shapes.dtype)
        nj, nt = joints.shape[1], thrusters.shape[1]

        x = shapes.reshape(b * n, d)
        for layer in range(cfg.depth):
            x = GatedAttentionLayer(d, cfg.num_heads, cfg.qkv_features, name=f"layer_{layer}")(
                x, mask
            )
            s = x.reshape(b, n, d)
            joint_in = jnp.concatenate([_gather(s, j_from), _gather(s, j_to), joints], axis=-1)
            joint_msg = nn.Dense(d, name=f"joint_mp_{layer}")(joint_in.reshape(b * nj, -1))
            thruster_in = jnp.concatenate([_gather(s, t_on), thrusters], axis=-1)
            thruster_msg = nn.Dense(d, name=f"thruster_mp_{layer}")(thruster_in.reshape(b * nt, -1))
            s = _scatter_add(s, j_from, joint_msg.reshape(b, nj, d) * joint_mask)
            s = _scatter_add(s, t_on, thruster_msg.reshape(b, nt, d) * thruster_mask)
            x = s.reshape(b * n, d)

        w = active[..., None].astype(x.dtype)
        pooled = jnp.sum(x.reshape(b, n, d) * w, axis=1) / jnp.sum(w, axis=1)
        return pooled.reshape(lead + (d,))


class FlatEncoder(nn.Module):
    """``e = relu(W flatten(x) + b)`` for flat ``[*b, D]`` (or padded ``[*b, R, W]``) inputs;
    ``obs_ndim`` is the number of trailing observation axes."""

    width: int
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, x: Float[Array, "*b ..."]) -> Float[Array, "*b w"]:
        lead = x.shape[: x.ndim - self.obs_ndim]
        x = x.reshape(lead + (-1,))
        return nn.relu(_dense(self.width, name="encoder")(x))


class PixelEncoder(nn.Module):
    """Two convolutions (16@8x8/4, 32@4x4/2, relu), flattened, with ``global_info`` appended."""

    @nn.compact
    def __call__(self, obs) -> Float[Array, "*b k"]:
        image = obs.image
        lead = image.shape[:-3]
        x = image.reshape((-1,) + image.shape[-3:])
        x = nn.relu(Conv(16, kernel_size=8, strides=4, name="conv1")(x))
        x = nn.relu(Conv(32, kernel_size=4, strides=2, name="conv2")(x))
        x = x.reshape(lead + (-1,))
        return jnp.concatenate([x, obs.global_info], axis=-1)


class ActorCritic(nn.Module):
    """``obs -> (pi, V)``: torso, then separate actor and critic MLPs (module docstring).

    Attributes:
        cfg: the network configuration.
        head: the action head (``action_heads.head_for_space(env.action_space())``).
        obs_ndim: trailing axes of one flat/padded observation (``"mlp"`` torso only).
    """

    cfg: NetworkConfig
    head: HeadSpec
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs) -> tuple[distrax.Distribution, Float[Array, "*b"]]:
        cfg = self.cfg
        act = _activation(cfg.activation)
        if cfg.kind == "transformer":
            e = EntityTransformer(cfg, name="torso")(obs)
        elif cfg.kind == "cnn":
            e = PixelEncoder(name="torso")(obs)
        else:
            e = FlatEncoder(cfg.width, self.obs_ndim, name="torso")(obs)
        a = e
        for i in range(cfg.actor_depth):
            a = act(_dense(cfg.width, name=f"actor_{i}")(a))
        c = e
        for i in range(cfg.critic_depth):
            c = act(_dense(cfg.width, name=f"critic_{i}")(c))
        pi = ActionHead(self.head, name="actor_head")(a)
        value = _dense(1, scale=1.0, name="critic_head")(c)[..., 0]
        return pi, value


def check_network_for_observation(cfg: NetworkConfig, observation_type: str) -> None:
    """Raises ConfigError when the torso cannot read the observation type."""
    ok = {
        "transformer": ("symbolic_entity",),
        "mlp": ("symbolic_flat", "symbolic_flat_padded"),
        "cnn": ("pixels",),
    }[cfg.kind]
    if observation_type not in ok:
        raise ConfigError(
            "network.kind",
            cfg.kind,
            f"a torso for observation_type={observation_type!r} "
            f"(transformer: symbolic_entity, mlp: symbolic_flat(_padded), cnn: pixels)",
        )

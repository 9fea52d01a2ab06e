"""The models D-TSN searches with, and the behaviour-cloning networks built on the same encoders.

* Grid mazes (learned latent world model): encoder ``E`` (two 3x3 convolutions + a dense layer,
  latent ``h = tanh(W x)`` in ``[-1, 1]^d``), transition ``T(h, a) = tanh(h + MLP([h, onehot a]))``,
  reward ``R(h, a) = MLP([h, onehot a])`` and value ``V(h) = MLP(h)``. No termination model
  (every child's discount is 1; the reward model learns the goal reward).
* Game of 24 (known model): the latent is the exact state (numbers, alive); ``T``/``R`` and
  termination are the game's rules (``jaxlab.envs.game24.apply_action``), only ``V`` is learned,
  an MLP on per-slot features ``[sign(x) log(1 + |x|), x / 24, alive]``.
* Behaviour cloning: the same encoder (maze) or the same slot features (Game of 24), then an MLP
  to action logits; :func:`matched_width` picks its hidden width so the parameter count matches
  the D-TSN model's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.envs import game24
from jaxlab.nn.conv import Conv
from jaxlab.rl.search.dtsn import Expansion, SearchModel


class MazeEncoder(nn.Module):
    """``E``: symbolic maze observation ``[H, W, C]`` (or ``[..., H, W, C]``) to ``h`` ``[d]``."""

    latent_dim: int = 32
    channels: int = 16

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        if obs.dtype == jnp.uint8:
            x = x / 255.0
        x = nn.relu(Conv(self.channels, 3)(x))
        x = nn.relu(Conv(self.channels, 3)(x))
        x = x.reshape(x.shape[:-3] + (-1,))
        return jnp.tanh(nn.Dense(self.latent_dim)(x))


class MazeWorldModel(nn.Module):
    """Encoder, transition, reward and value networks of the maze D-TSN (module docstring)."""

    num_actions: int = 4
    latent_dim: int = 32
    hidden: int = 64
    channels: int = 16

    def setup(self):
        self.encoder = MazeEncoder(self.latent_dim, self.channels)
        self.trans_hidden = nn.Dense(self.hidden)
        self.trans_out = nn.Dense(self.latent_dim)
        self.reward_hidden = nn.Dense(self.hidden)
        self.reward_out = nn.Dense(1)
        self.value_hidden = nn.Dense(self.hidden)
        self.value_out = nn.Dense(1)

    def encode(self, obs):
        return self.encoder(obs)

    def expand(self, h):
        a = jnp.eye(self.num_actions, dtype=h.dtype)
        x = jnp.concatenate([jnp.broadcast_to(h, (self.num_actions,) + h.shape), a], axis=-1)
        nxt = jnp.tanh(h[None] + self.trans_out(nn.relu(self.trans_hidden(x))))
        reward = self.reward_out(nn.relu(self.reward_hidden(x)))[..., 0]
        return nxt, reward

    def value(self, h):
        return self.value_out(nn.relu(self.value_hidden(h)))[..., 0]

    def __call__(self, obs):
        h = self.encode(obs)
        nxt, r = self.expand(h)
        return h, nxt, r, self.value(h)


@functools.cache
def maze_search_model(net: MazeWorldModel | SpatialMazeWorldModel) -> SearchModel:
    """The :class:`SearchModel` of a maze world model (cached: one per network config)."""
    cls = type(net)

    def expand(params, h):
        nxt, r = net.apply(params, h, method=cls.expand)
        ones = jnp.ones((net.num_actions,), jnp.float32)
        return Expansion(latent=nxt, reward=r, discount=ones, valid=ones > 0)

    return SearchModel(
        encode=lambda p, obs: net.apply(p, obs, method=cls.encode),
        expand=expand,
        value=lambda p, h: net.apply(p, h, method=cls.value),
    )


class MazeBC(nn.Module):
    """Behaviour cloning on the maze: the same encoder, then ``hidden``-wide MLP to logits."""

    num_actions: int = 4
    latent_dim: int = 32
    hidden: int = 64
    channels: int = 16

    @nn.compact
    def __call__(self, obs):
        h = MazeEncoder(self.latent_dim, self.channels)(obs)
        x = nn.relu(nn.Dense(self.hidden)(h))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.num_actions)(x)


class SpatialMazeEncoder(nn.Module):
    """``E`` with a spatial latent: maze observation ``[H, W, C_in]`` to ``h`` ``[H, W, C]`` in
    ``[-1, 1]`` (two 3x3 convolutions, ``tanh``); the grid structure is kept, so a local
    transition model can move the agent and respect walls on any layout."""

    channels: int = 16

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        if obs.dtype == jnp.uint8:
            x = x / 255.0
        x = nn.relu(Conv(self.channels, 3)(x))
        return jnp.tanh(Conv(self.channels, 3)(x))


class SpatialMazeWorldModel(nn.Module):
    """Maze D-TSN with a spatial latent ``h`` ``[H, W, C]`` (module docstring).

    * ``T(h, a) = tanh(h + conv([h, onehot(a)]))``: two 3x3 convolutions on the latent map with
      the action broadcast over the grid (a 5x5 receptive field: moving the agent one cell and
      checking the walls around it are local operations, the same on every layout);
    * ``R(h, a) = w . maxpool(relu(conv([h, onehot(a)])))``;
    * ``V(h) = MLP(flatten(relu(conv(h))))``.
    """

    num_actions: int = 4
    hidden: int = 64
    channels: int = 16

    def setup(self):
        self.encoder = SpatialMazeEncoder(self.channels)
        self.trans_hidden = Conv(self.channels, 3)
        self.trans_out = Conv(self.channels, 3)
        self.reward_conv = Conv(self.channels, 3)
        self.reward_out = nn.Dense(1)
        self.value_conv = Conv(self.channels, 3)
        self.value_hidden = nn.Dense(self.hidden)
        self.value_out = nn.Dense(1)

    def encode(self, obs):
        return self.encoder(obs)

    def _with_actions(self, h):
        """``[A, H, W, C + A]``: the latent once per action with the action's one-hot planes."""
        a = self.num_actions
        planes = jnp.broadcast_to(
            jnp.eye(a, dtype=h.dtype)[:, None, None, :], (a,) + h.shape[:2] + (a,)
        )
        return jnp.concatenate([jnp.broadcast_to(h, (a,) + h.shape), planes], axis=-1)

    def expand(self, h):
        x = self._with_actions(h)
        nxt = jnp.tanh(h[None] + self.trans_out(nn.relu(self.trans_hidden(x))))
        r = nn.relu(self.reward_conv(x))
        reward = self.reward_out(jnp.max(r, axis=(-3, -2)))[..., 0]
        return nxt, reward

    def value(self, h):
        x = nn.relu(self.value_conv(h))
        x = x.reshape(x.shape[:-3] + (-1,))
        return self.value_out(nn.relu(self.value_hidden(x)))[..., 0]

    def __call__(self, obs):
        h = self.encode(obs)
        nxt, r = self.expand(h)
        return h, nxt, r, self.value(h)


class SpatialMazeBC(nn.Module):
    """Behaviour cloning with the spatial encoder: ``E``, flatten, ``hidden``-wide MLP, logits."""

    num_actions: int = 4
    hidden: int = 64
    channels: int = 16

    @nn.compact
    def __call__(self, obs):
        h = SpatialMazeEncoder(self.channels)(obs)
        x = h.reshape(h.shape[:-3] + (-1,))
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.num_actions)(x)


def slot_features(numbers: Float[Array, "... 4"], alive) -> Float[Array, "... 12"]:
    """Per-slot Game of 24 features ``[sign(x) log(1 + |x|), x / 24, alive]``, flattened."""
    x = jnp.where(alive, numbers, 0.0)
    f = jnp.stack(
        [jnp.sign(x) * jnp.log1p(jnp.abs(x)), jnp.clip(x / 24.0, -10, 10), alive.astype(x.dtype)],
        -1,
    )
    return f.reshape(f.shape[:-2] + (-1,))


class Game24Value(nn.Module):
    """``V(s)`` of a Game of 24 state from its slot features (``depth`` relu layers)."""

    hidden: int = 64
    depth: int = 2

    @nn.compact
    def __call__(self, numbers, alive):
        x = slot_features(numbers, alive)
        for _ in range(self.depth):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(1)(x)[..., 0]


def game24_obs_to_state(obs: Float[Array, " 8"]):
    """``(numbers, alive)`` from a Game of 24 observation."""
    return obs[:4], obs[4:] > 0.5


@functools.cache
def game24_search_model(net: Game24Value) -> SearchModel:
    """Known-model :class:`SearchModel` for Game of 24 with a learned value (cached)."""

    def expand(params, latent):
        numbers, alive = latent
        nn_, na, valid = jax.vmap(game24.apply_action, in_axes=(None, None, 0))(
            numbers, alive, jnp.arange(game24.NUM_ACTIONS)
        )
        success = jax.vmap(game24.is_success)(nn_, na)
        terminal = jnp.sum(na, axis=-1) <= 1
        reward = jnp.where(valid & success, 1.0, 0.0)
        return Expansion(
            latent=(nn_, na),
            reward=reward,
            discount=jnp.where(terminal | ~valid, 0.0, 1.0),
            valid=valid,
        )

    return SearchModel(
        encode=lambda p, obs: game24_obs_to_state(obs),
        expand=expand,
        value=lambda p, latent: net.apply(p, *latent),
    )


class Game24BC(nn.Module):
    """Behaviour cloning on Game of 24: slot features, ``depth`` relu layers, 48 logits."""

    hidden: int = 64
    depth: int = 2

    @nn.compact
    def __call__(self, obs):
        numbers, alive = obs[..., :4], obs[..., 4:] > 0.5
        x = slot_features(numbers, alive)
        for _ in range(self.depth):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(game24.NUM_ACTIONS)(x)


def param_count(params) -> int:
    """Number of scalars in a parameter tree."""
    return int(sum(x.size for x in jax.tree.leaves(params)))


def matched_width(count: Callable[[int], int], target: int, lo: int = 1, hi: int = 4096) -> int:
    """The width ``w`` in ``[lo, hi]`` whose ``count(w)`` is closest to ``target`` (count is
    increasing in ``w``; bisection)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo if abs(count(lo) - target) <= abs(count(hi) - target) else hi

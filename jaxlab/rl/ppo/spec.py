"""What one PPO run is made of (:class:`PPO`, static) and what it carries (:class:`PPOState`).

:class:`PPO` holds only static things: the config, the env, the network, the curriculum and
the mesh axis; every PPO function takes it first and is pure over the state. With
``axis_name`` set (inside ``shard_map`` over the ``data`` mesh axis) each device steps its own
share of the envs; the helpers here give it the right keys and averages.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.optim import OptimConfig
from jaxlab.envs.base import Environment
from jaxlab.envs.wrappers import EpisodeStatistics, EpisodeStatisticsState
from jaxlab.rl import normalization as norm
from jaxlab.rl.ppo.config import OPTIM, PPOConfig, hparams_from
from jaxlab.rl.ued import Curriculum


@struct.dataclass
class PPOState:
    """Everything one PPO run carries between updates (a checkpointable pytree).

    Attributes:
        params: network parameters.
        opt_state: optax state.
        obs_stats: running observation statistics (unused unless ``normalize_obs``).
        env_state: [num_envs] ``EpisodeStatisticsState`` of the envs.
        obs: [num_envs] current observations.
        levels: [num_envs] start level of each env (curricula that force levels), else ``()``.
        curriculum: the curriculum's state.
        key: raw ``uint32[2]`` PRNG key.
        update: number of updates done.
        hparams: the traced hyper-parameters (:data:`TRACED` -> float32 scalar).
    """

    params: Any
    opt_state: Any
    obs_stats: norm.RunningStats
    env_state: EpisodeStatisticsState
    obs: Any
    levels: Any
    curriculum: Any
    key: jax.Array
    update: jax.Array
    hparams: dict[str, jax.Array] = struct.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, eq=False)
class PPO:
    """PPO on ``env`` with ``network``: the static half of a run (hashed by identity).

    Attributes:
        cfg: hyper-parameters.
        env: a functional env (``jaxlab.envs`` contract; auto-reset on).
        env_params: its traced parameters.
        network: a flax module ``obs -> (distribution, value)`` accepting batched observations.
        optim: the optimiser (default :data:`~jaxlab.rl.ppo.config.OPTIM`).
        num_updates: updates in the whole run (for the learning-rate schedule).
        curriculum: level curriculum (``ued.make_curriculum``); ``None`` = the env's own resets.
        axis_name: mesh axis to average over when run per device inside ``shard_map``.
    """

    cfg: PPOConfig
    env: Environment
    env_params: Any
    network: nn.Module
    optim: OptimConfig = OPTIM
    num_updates: int = 1
    curriculum: Curriculum | None = None
    axis_name: str | None = None

    def __post_init__(self):
        if not getattr(self.env, "auto_reset", True):
            raise ValueError("PPO needs an auto-resetting env (auto_reset=True)")

    @functools.cached_property
    def stats_env(self) -> EpisodeStatistics:
        """The env wrapped to report finished episodes' returns, lengths and solves."""
        return EpisodeStatistics(self.env)

    @functools.cached_property
    def obs_example(self) -> Any:
        """One observation's zeros: only shapes matter for the network's init and the
        statistics, and an abstract sample never runs the env's reset (for procedurally
        generated levels that is a whole generator and filter run at build time)."""
        space = self.env.observation_space(self.env_params)
        abstract = jax.eval_shape(space.sample, jax.random.PRNGKey(0))
        return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), abstract)


def pmean(agent: PPO, x):
    """``x`` averaged over the devices of the agent's mesh axis (itself without one)."""
    return jax.lax.pmean(x, agent.axis_name) if agent.axis_name is not None else x


def device_key(agent: PPO, key):
    """A key of this device's own (the key itself without a mesh axis)."""
    if agent.axis_name is None:
        return key
    return jax.random.fold_in(key, jax.lax.axis_index(agent.axis_name))


def local_key(agent: PPO, key):
    """The key a device draws with: shared when ``shard_invariant``, else its own."""
    return key if agent.cfg.shard_invariant else device_key(agent, key)


def env_keys(agent: PPO, key, n: int):
    """``n`` keys for this device's envs: with ``shard_invariant`` on a mesh axis, the slice of
    the keys of *all* envs (global index order) that belongs to this device."""
    if agent.axis_name is None or not agent.cfg.shard_invariant:
        return jax.random.split(key, n)
    shards = jax.lax.axis_size(agent.axis_name)
    keys = jax.random.split(key, n * shards)
    return jax.lax.dynamic_slice_in_dim(keys, jax.lax.axis_index(agent.axis_name) * n, n)


def hparams(agent: PPO, state: PPOState) -> dict[str, Any]:
    """The state's traced hyper-parameters (the config's value for a missing key)."""
    own = hparams_from(agent.cfg, agent.optim)
    return {k: state.hparams.get(k, v) for k, v in own.items()}


def normalise(agent: PPO, obs_stats: norm.RunningStats, obs):
    """Observations under the running statistics when ``normalize_obs``, else as they are."""
    return norm.normalise(obs_stats, obs) if agent.cfg.normalize_obs else obs


def policy(agent: PPO, params, obs_stats, obs):
    """``(pi, V)`` for a batch of raw observations."""
    return agent.network.apply(params, normalise(agent, obs_stats, obs))


def batch_size(tree) -> int:
    """The leading (env) axis of a batched pytree."""
    return jax.tree.leaves(tree)[0].shape[0]


def mean_where(x, w, axis_name: str | None = None):
    """Mean of ``x`` where ``w``, over all devices of ``axis_name``."""
    w = w.astype(jnp.float32)
    num, den = jnp.sum(x * w), jnp.sum(w)
    if axis_name is not None:
        num, den = jax.lax.psum((num, den), axis_name)
    return num / jnp.maximum(den, 1.0)

"""Wrappers around the functional env contract.

* ``EpisodeStatistics``: running and last-finished episode return, length and solved flag.
* ``LegacyStep``: the five-value step ``(obs, state, reward, done, info)`` of older gymnax code
  (purejaxrl), with ``done = terminated | truncated``.
* ``VecEnv`` (and ``vmap_reset``/``vmap_step``): a batch of ``num_envs`` independent copies under
  ``vmap``, one key per copy split from a single key.

Wrappers forward unknown attributes to the wrapped env, so ``wrapper.static_params`` etc. work.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.envs.base import Environment


class Wrapper(Environment):
    """Forwards everything to ``env``; subclasses override what they change."""

    def __init__(self, env: Environment):
        self._env = env

    def __getattr__(self, name: str):
        if name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def unwrapped(self) -> Environment:
        """The innermost environment."""
        env = self._env
        while isinstance(env, Wrapper):
            env = env._env
        return env

    @property
    def auto_reset(self) -> bool:  # type: ignore[override]
        return self._env.auto_reset

    @property
    def default_params(self):
        return self._env.default_params

    def reset_env(self, key, params):
        return self._env.reset_env(key, params)

    def step_env(self, key, state, action, params):
        return self._env.step_env(key, state, action, params)

    def get_obs(self, state, params):
        return self._env.get_obs(state, params)

    def action_space(self, params=None):
        return self._env.action_space(params)

    def observation_space(self, params=None):
        return self._env.observation_space(params)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None, *, reset_state=None):
        return self._env.step(key, state, action, params, reset_state=reset_state)

    @property
    def name(self) -> str:
        return f"{type(self).__name__}({self._env.name})"


@struct.dataclass
class EpisodeStatisticsState:
    """Wrapped state plus episode bookkeeping.

    Attributes:
        env_state: the wrapped env's state.
        episode_return: return of the running episode.
        episode_length: steps of the running episode.
        returned_episode_return: return of the last finished episode.
        returned_episode_length: length of the last finished episode.
        returned_episode_solved: whether the last finished episode was solved.
        timestep: total steps taken since reset.
    """

    env_state: Any
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]
    returned_episode_return: Float[Array, ""]
    returned_episode_length: Int[Array, ""]
    returned_episode_solved: Bool[Array, ""]
    timestep: Int[Array, ""]


class EpisodeStatistics(Wrapper):
    """Tracks episode return, length and solved flag (``info["solved"]`` of the final step).

    Adds to ``info``: ``returned_episode`` (an episode ended this step), ``returned_episode_returns``,
    ``returned_episode_lengths``, ``returned_episode_solved`` (values of the last finished episode)
    and ``timestep``. Resetting of the counters follows ``terminated | truncated``.
    """

    def reset(self, key: PRNGKeyArray, params=None):
        obs, env_state = self._env.reset(key, params)
        zf, zi = jnp.float32(0.0), jnp.int32(0)
        return obs, EpisodeStatisticsState(env_state, zf, zi, zf, zi, jnp.asarray(False), zi)

    def step(self, key, state: EpisodeStatisticsState, action, params=None, *, reset_state=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params, reset_state=reset_state
        )
        done = jnp.logical_or(terminated, truncated)
        ret = state.episode_return + reward
        length = state.episode_length + 1
        solved = jnp.asarray(info.get("solved", False), bool)
        new = EpisodeStatisticsState(
            env_state=env_state,
            episode_return=jnp.where(done, 0.0, ret).astype(jnp.float32),
            episode_length=jnp.where(done, 0, length).astype(jnp.int32),
            returned_episode_return=jnp.where(done, ret, state.returned_episode_return).astype(
                jnp.float32
            ),
            returned_episode_length=jnp.where(done, length, state.returned_episode_length).astype(
                jnp.int32
            ),
            returned_episode_solved=jnp.where(done, solved, state.returned_episode_solved),
            timestep=state.timestep + 1,
        )
        info = dict(info)
        info["returned_episode"] = done
        info["returned_episode_returns"] = new.returned_episode_return
        info["returned_episode_lengths"] = new.returned_episode_length
        info["returned_episode_solved"] = new.returned_episode_solved
        info["timestep"] = new.timestep
        return obs, new, reward, terminated, truncated, info

    def get_obs(self, state: EpisodeStatisticsState, params):
        return self._env.get_obs(state.env_state, params)


class LegacyStep(Wrapper):
    """Five-value step for code written for older gymnax (e.g. purejaxrl):
    ``obs, state, reward, done, info = env.step(key, state, action, params)`` with
    ``done = terminated | truncated`` and ``info["terminated"]``/``info["truncated"]`` kept."""

    def step(self, key, state, action, params=None, *, reset_state=None):  # type: ignore[override]
        obs, state, reward, terminated, truncated, info = self._env.step(
            key, state, action, params, reset_state=reset_state
        )
        info = dict(info)
        info["terminated"] = terminated
        info["truncated"] = truncated
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


def vmap_reset(env: Environment, num_envs: int):
    """``reset(key, params) -> (obs[B], state[B])`` for ``B = num_envs`` copies (keys split)."""

    def reset(key: PRNGKeyArray, params=None):
        keys = jax.random.split(key, num_envs)
        return jax.vmap(env.reset, in_axes=(0, None))(keys, params)

    return reset


def vmap_step(env: Environment, num_envs: int):
    """``step(key, state[B], action[B], params)`` over ``B = num_envs`` copies (keys split)."""

    def step(key: PRNGKeyArray, state, action, params=None):
        keys = jax.random.split(key, num_envs)
        return jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)

    return step


class VecEnv(Wrapper):
    """``num_envs`` independent copies of ``env`` under ``vmap``.

    ``reset(key, params)`` and ``step(key, state, action, params)`` take one key and split it into
    ``num_envs`` keys (copy ``i`` gets ``jax.random.split(key, num_envs)[i]``); states, actions,
    observations, rewards, flags and info leaves carry a leading ``[num_envs]`` axis. ``params``
    is shared (not batched). Spaces describe a single copy.
    """

    def __init__(self, env: Environment, num_envs: int):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"VecEnv num_envs={num_envs!r}; expected a Python int >= 1")
        super().__init__(env)
        self.num_envs = num_envs

    def reset(self, key, params=None):
        return vmap_reset(self._env, self.num_envs)(key, params)

    def step(self, key, state, action, params=None, *, reset_state=None):
        if reset_state is not None:
            raise ValueError("VecEnv.step reset_state is not supported; vmap env.step yourself")
        return vmap_step(self._env, self.num_envs)(key, state, action, params)

    def sample_actions(self, key: PRNGKeyArray, params=None):
        """One action per copy from ``action_space(params).sample``."""
        space = self._env.action_space(params)
        return jax.vmap(space.sample)(jax.random.split(key, self.num_envs))

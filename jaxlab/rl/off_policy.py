"""The acting and replay schedule every off-policy agent shares (SAC, METRA, CSF, Dreamer).

An off-policy run steps ``num_envs`` vectorised envs once per iteration, stores what they saw in an
on-device replay buffer of ``buffer_size`` items (``jaxlab.rl.replay``), acts uniformly at random
for the first ``learning_starts`` iterations and then takes ``updates_per_iteration`` gradient
steps per iteration, each on a fresh batch of ``batch_size`` items (sequences for Dreamer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.envs.spaces import Box


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """Env, replay and update schedule of an off-policy agent.

    Attributes:
      env: registered env name.
      num_envs: parallel envs (>= 1).
      buffer_size: replay capacity in items over all envs (>= batch_size and >= num_envs; a
        sequence buffer keeps ``buffer_size // num_envs`` items per env).
      batch_size: items (or sequences) per gradient step (>= 1).
      learning_starts: iterations of uniform random acting before learning (>= 0).
      updates_per_iteration: gradient steps per iteration once learning (>= 1).
    """

    env: str = "point-mass-2d"
    num_envs: int = 4
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 25
    updates_per_iteration: int = 1

    def __post_init__(self):
        if self.env not in envs.names():
            raise ConfigError("env", self.env, "one of: " + ", ".join(envs.names()))
        for name in ("num_envs", "batch_size", "updates_per_iteration"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ConfigError(name, v, "an int >= 1")
        if not _is_int(self.learning_starts) or self.learning_starts < 0:
            raise ConfigError("learning_starts", self.learning_starts, "an int >= 0")
        if not _is_int(self.buffer_size) or self.buffer_size < max(self.batch_size, self.num_envs):
            raise ConfigError(
                "buffer_size",
                self.buffer_size,
                f">= batch_size ({self.batch_size}) and >= num_envs ({self.num_envs})",
            )


def make_box_env(name: str, options: Mapping[str, Any]) -> tuple[Any, Any, int, int]:
    """``(env, params, obs_dim, act_dim)`` of the registered env ``name``; refuses envs whose
    actions are not a 1-D ``Box`` in ``[-1, 1]`` (the tanh-squashed policies' range)."""
    env, env_params = envs.make(name, **dict(options))
    space = env.action_space(env_params)
    if not isinstance(space, Box) or len(space.shape) != 1:
        raise ConfigError("env", name, "an env with a 1-D Box action space")
    if not (np.all(space.low == -1.0) and np.all(space.high == 1.0)):
        raise ConfigError("env", name, "an env whose actions lie in [-1, 1] (tanh-squashed)")
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    return env, env_params, obs_dim, int(space.shape[0])

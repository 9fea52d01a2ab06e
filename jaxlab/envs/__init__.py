"""jaxlab.envs: functional environments (gymnax 1.0 style contract) and the Kinetix env space.

Quick start::

    import jax
    from jaxlab import envs

    env, params = envs.make("kinetix-s", level="path/to/level.json")
    obs, state = env.reset(jax.random.key(0), params)
    action = env.action_space(params).sample(jax.random.key(1))
    obs, state, reward, terminated, truncated, info = env.step(jax.random.key(2), state, action, params)
"""

from jaxlab.envs.base import Environment, tree_select
from jaxlab.envs.registry import describe, make, names, register, spec
from jaxlab.envs.spaces import Box, Dict, Discrete, MultiDiscrete, Space
from jaxlab.envs.wrappers import (
    EpisodeStatistics,
    EpisodeStatisticsState,
    LegacyStep,
    VecEnv,
    Wrapper,
    vmap_reset,
    vmap_step,
)

__all__ = [
    "Box",
    "Dict",
    "Discrete",
    "Environment",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "LegacyStep",
    "MultiDiscrete",
    "Space",
    "VecEnv",
    "Wrapper",
    "describe",
    "make",
    "names",
    "register",
    "spec",
    "tree_select",
    "vmap_reset",
    "vmap_step",
]

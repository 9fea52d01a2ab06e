"""Shared pieces of the studio tests: a level of a fixed platform and a motor-driven wheel, and a
rollout of a saved level through ``KinetixEnv.step`` compiled once per level size."""

from __future__ import annotations

import functools

import jax
import numpy as np

from jaxlab.envs.kinetix import KinetixEnv, StaticEnvParams

#: The wheel level's edits: a fixed platform (polygon 4) and a free circle (shape 5) pinned to
#: it by a revolute joint with its motor on (binding 0, driven by the right arrow).
WHEEL_EDITS = (
    {
        "op": "add_polygon",
        "vertices": [[1.0, 1.5], [2.0, 1.5], [2.0, 1.0], [1.0, 1.0]],
        "fixed": True,
    },
    {"op": "add_circle", "position": [1.5, 1.25], "radius": 0.3, "role": 1},
    {"op": "add_joint", "a": 4, "b": 5, "position": [1.5, 1.25], "motor_on": True},
)
WHEEL = 5


@functools.lru_cache(maxsize=4)
def env_step(static_params: StaticEnvParams):
    """``KinetixEnv.step`` (continuous actions, no auto-reset) jitted for ``static_params``."""
    from jaxlab.envs.kinetix import create_empty_env

    env = KinetixEnv(
        static_params,
        action_type="continuous",
        observation_type="symbolic_flat",
        level=create_empty_env(static_params),
        auto_reset=False,
    )
    key = jax.random.PRNGKey(0)
    return jax.jit(lambda s, a, p: env.step(key, s, a, p)[1])


def rollout_poses(level, actions) -> tuple[np.ndarray, np.ndarray]:
    """Positions [N, 2] and rotations [N] of all shapes after stepping ``level`` (a ``Level``)
    through ``actions`` [T, U] with the env."""
    step = env_step(level.static_params)
    state = level.state
    for a in actions:
        state = step(state, np.asarray(a, np.float32), level.params)
    sim = jax.device_get(state.sim)
    pos = np.concatenate([sim.polygon.position, sim.circle.position])
    rot = np.concatenate([sim.polygon.rotation, sim.circle.rotation])
    return pos, rot

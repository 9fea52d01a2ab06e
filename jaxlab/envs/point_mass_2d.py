"""A 2-D point mass with continuous velocity actions in an open square arena.

The skill-discovery testbed of "Can a MISL Fly?" (CSF vs METRA; Zheng et al. 2025) and a
standard continuous-control task for SAC. Registered as ``"point-mass-2d"``.

Dynamics (``dt`` = 1 step), action ``a in [-1, 1]^2`` (a velocity command):

    p_{t+1} = clip(p_t + max_speed * clip(a, -1, 1), -size, size)

Reward ``-||p_{t+1} - goal|| / size`` (dense goal reaching; skill methods ignore it). No terminal
states: episodes are truncated after ``max_steps`` steps (fixed horizon, as in the paper).
Resets draw ``p_0 ~ U(-reset_noise, reset_noise)^2``. Observation ``p`` (shape ``[2]``);
``info["xy"]`` is the position for the coverage metric and ``info["success"]`` is
``||p_{t+1} - goal|| < goal_radius``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box


@struct.dataclass
class PointMass2DState:
    """Attributes: ``pos`` position ``[2]``, ``t`` steps taken (leading batch axes under vmap)."""

    pos: Float[Array, "*b 2"]
    t: Int[Array, "*b"]


@struct.dataclass
class PointMass2DParams:
    """Traced parameters: speed per step, episode length, goal, success radius, reset noise."""

    max_speed: float = 0.2
    max_steps: int = 50
    goal: tuple[float, float] = (0.5, 0.5)
    goal_radius: float = 0.1
    reset_noise: float = 0.05


class PointMass2D(Environment):
    """The 2-D point mass of the module docstring; ``size`` (static) is the arena half-width."""

    obs_is_function_of_state = True

    def __init__(self, size: float = 1.0, auto_reset: bool = True):
        if isinstance(size, bool) or not isinstance(size, int | float) or not size > 0:
            raise ConfigError("size", size, "a float > 0 (arena half-width)")
        self.size = float(size)
        self.auto_reset = bool(auto_reset)

    @property
    def default_params(self) -> PointMass2DParams:
        return PointMass2DParams()

    def get_obs(self, state: PointMass2DState, params: PointMass2DParams) -> Float[Array, " 2"]:
        return state.pos

    def reset_env(self, key: PRNGKeyArray, params: PointMass2DParams):
        noise = jnp.asarray(params.reset_noise, jnp.float32)
        pos = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0) * noise
        state = PointMass2DState(pos=pos.astype(jnp.float32), t=jnp.int32(0))
        return self.get_obs(state, params), state

    def move(self, pos: Float[Array, " 2"], velocity: Float[Array, " 2"]) -> Float[Array, " 2"]:
        """Position after moving ``velocity`` for one step (the arena walls clip it)."""
        return jnp.clip(pos + velocity, -self.size, self.size)

    def step_env(self, key, state: PointMass2DState, action, params: PointMass2DParams):
        del key
        a = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        pos = self.move(state.pos, params.max_speed * a).astype(jnp.float32)
        t = state.t + 1
        new = PointMass2DState(pos=pos, t=t)
        dist = jnp.linalg.norm(pos - jnp.asarray(params.goal, jnp.float32))
        reward = (-dist / self.size).astype(jnp.float32)
        terminated = jnp.asarray(False)
        truncated = t >= params.max_steps
        info = {"xy": pos, "success": dist < params.goal_radius}
        return self.get_obs(new, params), new, reward, terminated, truncated, info

    def action_space(self, params=None) -> Box:
        return Box(-1.0, 1.0, (2,), jnp.float32)

    def observation_space(self, params=None) -> Box:
        return Box(-self.size, self.size, (2,), jnp.float32)


def check_goal(goal, low: float, high: float) -> tuple[float, float]:
    """``goal`` as a float pair inside ``[low, high]^2``, else ``ConfigError('goal', ...)``."""
    try:
        g = tuple(float(v) for v in goal)
    except (TypeError, ValueError):
        g = ()
    if len(g) != 2 or not all(low <= v <= high for v in g):
        raise ConfigError("goal", goal, f"two floats inside the arena [{low}, {high}]^2")
    return g

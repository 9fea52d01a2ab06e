"""A tiny 1-D point mass: the smallest env that exercises the whole env contract.

Used by the contract tests (``tests/envs/test_contract.py``) and as a template for new envs; it
compiles in well under a second. Registered as ``"point-mass"``.

Dynamics (``dt`` = 1 step), with action ``a in {0, 1, 2}`` meaning force ``u = a - 1``:

    v_{t+1} = clip(v_t + force_scale * u, -max_speed, max_speed),   x_{t+1} = x_t + v_{t+1}

Reward ``-x_{t+1}^2``; the episode terminates with reward ``-1`` when ``|x_{t+1}| >= 1`` (fell off
the track) and is truncated after ``max_steps`` steps. ``info["solved"]`` is true when the
episode is truncated (survived) within ``|x| < 0.1``. Resets draw ``x_0 ~ U(-0.5, 0.5)``,
``v_0 = 0``. Observation ``[x, v, t / max_steps]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box, Discrete


@struct.dataclass
class PointMassState:
    """Attributes: ``x`` position, ``v`` velocity, ``t`` steps taken."""

    x: Float[Array, ""]
    v: Float[Array, ""]
    t: Int[Array, ""]


@struct.dataclass
class PointMassParams:
    """Traced parameters: force per action unit, speed limit, episode length."""

    force_scale: float = 0.05
    max_speed: float = 0.2
    max_steps: int = 20


class PointMass(Environment):
    """The 1-D point mass described in the module docstring."""

    def __init__(self, auto_reset: bool = True):
        self.auto_reset = bool(auto_reset)

    @property
    def default_params(self) -> PointMassParams:
        return PointMassParams()

    def get_obs(self, state: PointMassState, params: PointMassParams) -> Float[Array, " 3"]:
        return jnp.stack([state.x, state.v, state.t / jnp.asarray(params.max_steps, jnp.float32)])

    def reset_env(self, key: PRNGKeyArray, params: PointMassParams):
        x = jax.random.uniform(key, (), minval=-0.5, maxval=0.5)
        state = PointMassState(x=x, v=jnp.float32(0.0), t=jnp.int32(0))
        return self.get_obs(state, params), state

    def step_env(self, key, state: PointMassState, action, params: PointMassParams):
        del key
        u = jnp.asarray(action, jnp.float32) - 1.0
        v = jnp.clip(state.v + params.force_scale * u, -params.max_speed, params.max_speed)
        x = state.x + v
        t = state.t + 1
        new = PointMassState(x=x, v=v, t=t)
        terminated = jnp.abs(x) >= 1.0
        truncated = jnp.logical_and(t >= params.max_steps, jnp.logical_not(terminated))
        reward = jnp.where(terminated, -1.0, -(x**2)).astype(jnp.float32)
        info = {"solved": jnp.logical_and(truncated, jnp.abs(x) < 0.1)}
        return self.get_obs(new, params), new, reward, terminated, truncated, info

    def action_space(self, params=None) -> Discrete:
        return Discrete(3)

    def observation_space(self, params=None) -> Box:
        return Box([-jnp.inf, -jnp.inf, 0.0], [jnp.inf, jnp.inf, 1.0], (3,), jnp.float32)

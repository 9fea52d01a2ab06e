"""Kinetix action spaces and their mapping to engine actions (``kinetix/environment/utils.py``).

Every action type is first converted to the *unified* action ``u`` of length
``U = num_motor_bindings + num_thruster_bindings`` (6 by default): ``u[:M]`` drive motors in
``[-1, 1]``, ``u[M:]`` fire thrusters in ``[0, 1]``. The engine action of joint ``j`` is
``clip(u[motor_bindings[j]], -1, 1)`` (``+1`` when ``motor_auto[j]``), of thruster ``t``
``clip(u[M + thruster_bindings[t]], 0, 1)``; several joints/thrusters may share one binding.

Action types:
    * ``"continuous"``: ``Box(-1, 1, (U,))``; ``u = a`` (then clipped as above).
    * ``"multi_discrete"`` (default): ``MultiDiscrete([3]*M + [2]*N)``; motors
      ``{0: 0, 1: +1, 2: -1}``, thrusters ``{0: off, 1: on}``.
    * ``"discrete"``: ``Discrete(2M + 1 + N)``: ``a < 2M`` drives motor binding ``a // 2`` with
      ``-1`` for even and ``+1`` for odd ``a``; ``a == 2M`` is the no-op; ``a > 2M`` fires thruster
      binding ``a - 2M - 1``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.envs.kinetix.state import EnvState, StaticEnvParams
from jaxlab.envs.spaces import Box, Discrete, MultiDiscrete, Space

ACTION_TYPES = ("multi_discrete", "continuous", "discrete")


def check_action_type(action_type: str) -> str:
    """Validate ``action_type`` (raises ``ValueError`` naming the allowed values)."""
    if action_type not in ACTION_TYPES:
        raise ValueError(f"action_type={action_type!r}; expected one of {list(ACTION_TYPES)}")
    return action_type


def action_space(action_type: str, static_params: StaticEnvParams) -> Space:
    """The agent-facing action space of ``action_type``."""
    check_action_type(action_type)
    M, N = static_params.num_motor_bindings, static_params.num_thruster_bindings
    if action_type == "continuous":
        return Box(-1.0, 1.0, (M + N,), jnp.float32)
    if action_type == "multi_discrete":
        return MultiDiscrete([3] * M + [2] * N)
    return Discrete(2 * M + 1 + N)


def to_unified(action, action_type: str, static_params: StaticEnvParams) -> Float[Array, " u"]:
    """The unified action ``u`` [U] (motors then thrusters) of an agent action."""
    M, N = static_params.num_motor_bindings, static_params.num_thruster_bindings
    if action_type == "continuous":
        a = jnp.asarray(action, jnp.float32)
        if a.shape != (M + N,):
            raise ValueError(f"continuous action has shape {a.shape}; expected ({M + N},)")
        return a
    if action_type == "multi_discrete":
        a = jnp.asarray(action)
        if a.shape != (M + N,):
            raise ValueError(f"multi_discrete action has shape {a.shape}; expected ({M + N},)")
        # lax.switch in the original clamps the index: >= 2 means -1, < 0 means 0.
        motors = jnp.where(a[:M] == 1, 1.0, jnp.where(a[:M] >= 2, -1.0, 0.0))
        thrusters = jnp.where(a[M:] == 0, 0.0, 1.0)
        return jnp.concatenate([motors, thrusters]).astype(jnp.float32)
    if action_type == "discrete":
        a = jnp.asarray(action)
        if a.shape != ():
            raise ValueError(f"discrete action has shape {a.shape}; expected ()")
        idx = jnp.arange(M + N)
        motor = (idx == a // 2) & (a < 2 * M)
        thruster = (idx == M + a - 2 * M - 1) & (a > 2 * M)
        value = jnp.where(motor, (a % 2) * 2.0 - 1.0, 0.0) + jnp.where(thruster, 1.0, 0.0)
        return value.astype(jnp.float32)
    check_action_type(action_type)
    raise AssertionError("unreachable")


def engine_actions(
    unified: Float[Array, " u"], state: EnvState, static_params: StaticEnvParams
) -> Float[Array, " jt"]:
    """Engine actions [J + T] from the unified action via the state's bindings.

    ``motor_j = 1 if motor_auto[j] else clip(u[motor_bindings[j]], -1, 1)`` and
    ``thrust_t = clip(u[M + thruster_bindings[t]], 0, 1)``.
    """
    M = static_params.num_motor_bindings
    motors = jnp.clip(unified[:M][state.motor_bindings], -1.0, 1.0)
    motors = jnp.where(state.motor_auto, 1.0, motors)
    thrusters = jnp.clip(unified[M:][state.thruster_bindings], 0.0, 1.0)
    return jnp.concatenate([motors, thrusters]).astype(jnp.float32)


def process_action(
    action, action_type: str, state: EnvState, static_params: StaticEnvParams
) -> Float[Array, " jt"]:
    """Agent action -> engine actions [J + T] (``to_unified`` then ``engine_actions``)."""
    return engine_actions(to_unified(action, action_type, static_params), state, static_params)


def noop_action(action_type: str, static_params: StaticEnvParams):
    """The action that drives no motor and fires no thruster (auto motors still run)."""
    check_action_type(action_type)
    M, N = static_params.num_motor_bindings, static_params.num_thruster_bindings
    if action_type == "continuous":
        return jnp.zeros(M + N, jnp.float32)
    if action_type == "multi_discrete":
        return jnp.zeros(M + N, jnp.int32)
    return jnp.int32(2 * M)


def random_action(key: PRNGKeyArray, action_type: str, static_params: StaticEnvParams):
    """A random action as the original samples it: continuous motors ``U(-1, 1)`` and thrusters
    ``|U(-1, 1)|``; discrete types uniformly over their space."""
    check_action_type(action_type)
    if action_type == "continuous":
        M = static_params.num_motor_bindings
        a = jax.random.uniform(key, (static_params.unified_action_size,), minval=-1.0, maxval=1.0)
        return jnp.where(np.arange(a.shape[0]) >= M, jnp.abs(a), a)
    return action_space(action_type, static_params).sample(key)

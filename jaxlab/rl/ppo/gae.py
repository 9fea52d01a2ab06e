"""A rollout step and generalised advantage estimation (Schulman et al. 2016, eq. 11-16).

With ``d_t`` the end of an episode at step ``t``:

    delta_t = r_t + gamma V(s_{t+1}) (1 - d_t) - V(s_t),
    A_t = delta_t + gamma lambda (1 - d_t) A_{t+1},   G_t = A_t + V(s_t).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float


@struct.dataclass
class Transition:
    """One rollout step for all envs (leading axis [num_envs]; stacked to [T, num_envs])."""

    obs: Any
    action: Any
    log_prob: Float[Array, " b"]
    value: Float[Array, " b"]
    reward: Float[Array, " b"]
    done: Bool[Array, " b"]
    solved: Bool[Array, " b"]
    ep_return: Float[Array, " b"]
    ep_length: Float[Array, " b"]


def compute_gae(
    rewards: Float[Array, "t b"],
    values: Float[Array, "t b"],
    dones: Bool[Array, "t b"],
    last_value: Float[Array, " b"],
    gamma: float,
    gae_lambda: float,
) -> tuple[Float[Array, "t b"], Float[Array, "t b"]]:
    """GAE advantages and returns ``(A, G = A + V)`` (module docstring), by a reverse scan."""

    def step(carry, x):
        gae, next_value = carry
        r, v, d = x
        live = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * next_value * live - v
        gae = delta + gamma * gae_lambda * live * gae
        return (gae, v), gae

    _, adv = jax.lax.scan(
        step, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True
    )
    return adv, adv + values

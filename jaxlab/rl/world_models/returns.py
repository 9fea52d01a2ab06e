"""Lambda returns of imagined trajectories: Dreamer's and LS-Imagine's long-short mixed return.

Dreamer (DreamerV3 eq. 7), for ``t = 0..H-1`` with ``R_H = V_H``::

    R_t = r_t + γ c_t [(1 - λ) V_{t+1} + λ R_{t+1}]

where ``r_t``/``c_t`` are the reward and continue flag of the transition from step ``t`` to
``t+1`` and ``V_{t+1}`` the value of the state it reaches.

LS-Imagine (paper eq. 9; ``tools.lambda_return_for_ls_imagine``): a transition may be a jump that
skips ``Δ_t`` environment steps and collects the accumulated reward ``Ĝ_t`` on the way::

    R_t = γ^(Δ_t - 1) r_t + Ĝ_t + γ^(Δ_t) c_t [(1 - λ) V_{t+1} + λ R_{t+1}]

With ``Δ_t = 1`` and ``Ĝ_t = 0`` (no jump) it is Dreamer's return. Both are reverse ``lax.scan``s
over the time axis (axis 0); extra trailing axes are batch axes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def mixed_lambda_return(
    reward: Float[Array, "h ..."],
    cont: Float[Array, "h ..."],
    value_next: Float[Array, "h ..."],
    delta: Float[Array, "h ..."],
    acc_reward: Float[Array, "h ..."],
    gamma: float,
    lam: float,
) -> Float[Array, "h ..."]:
    """LS-Imagine's long-short return (module docstring); ``value_next[t] = V_{t+1}`` and the
    bootstrap is ``R_H = value_next[-1]``."""
    delta = delta.astype(jnp.float32)
    disc = jnp.power(gamma, delta) * cont
    immediate = jnp.power(gamma, delta - 1.0) * reward + acc_reward

    def body(nxt, xs):
        imm, d, v = xs
        ret = imm + d * ((1.0 - lam) * v + lam * nxt)
        return ret, ret

    _, out = jax.lax.scan(body, value_next[-1], (immediate, disc, value_next), reverse=True)
    return out


def lambda_return(
    reward: Float[Array, "h ..."],
    cont: Float[Array, "h ..."],
    value_next: Float[Array, "h ..."],
    gamma: float,
    lam: float,
) -> Float[Array, "h ..."]:
    """Dreamer's lambda return (module docstring): the mixed return without jumps."""
    return mixed_lambda_return(
        reward, cont, value_next, jnp.ones_like(reward), jnp.zeros_like(reward), gamma, lam
    )

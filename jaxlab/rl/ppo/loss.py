"""PPO's loss on one minibatch (Schulman et al. 2017), with ``r_t = pi(a_t|s_t) / pi_old(a_t|s_t)``
and ``A_t`` normalised per minibatch when ``normalize_advantages``:

    L_pi = -E[min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)]                     (PPO eq. 7)
    L_V  = 0.5 E[max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2)]     (value clipping)
    L    = L_pi + c_V L_V - c_H E[H(pi(.|s_t))]
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.rl.ppo.config import PPOConfig


def ppo_loss(
    pi,
    value: Float[Array, " b"],
    batch: dict[str, Any],
    cfg: PPOConfig,
    hparams: dict[str, Any] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Clipped surrogate + value + entropy loss of one minibatch (module docstring); the clip
    range and coefficients come from ``hparams`` (traced, :data:`TRACED`), else from ``cfg``."""
    hp = hparams or {}
    clip_eps = hp.get("ppo.clip_eps", cfg.clip_eps)
    vf_coef, ent_coef = hp.get("ppo.vf_coef", cfg.vf_coef), hp.get("ppo.ent_coef", cfg.ent_coef)
    log_prob = pi.log_prob(batch["action"])
    log_ratio = log_prob - batch["log_prob"]
    ratio = jnp.exp(log_ratio)
    adv = batch["advantage"]
    if cfg.normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))
    target, old_v = batch["target"], batch["value"]
    v_loss = jnp.square(value - target)
    if cfg.clip_value:
        clipped = old_v + jnp.clip(value - old_v, -clip_eps, clip_eps)
        v_loss = jnp.maximum(v_loss, jnp.square(clipped - target))
    v_loss = 0.5 * jnp.mean(v_loss)
    entropy = jnp.mean(pi.entropy())
    total = pg + vf_coef * v_loss - ent_coef * entropy
    aux = {
        "policy_loss": pg,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)),
    }
    return total, aux

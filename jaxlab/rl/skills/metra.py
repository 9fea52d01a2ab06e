"""METRA (Park, Rybkin, Levine, ICLR 2024): metric-aware abstraction for skill discovery.

With ``Delta = phi(s') - phi(s)`` and ``z`` the trajectory's unit-sphere skill, one gradient step
on a replay batch (``update``):

1. representation (eq. 8 of Park et al. 2024 relaxed by a Lagrange multiplier): maximise

       E[Delta^T z + lambda * min(1 - ||Delta||^2, epsilon)]

   so ``phi`` is 1-Lipschitz in the temporal distance (``||phi(s') - phi(s)|| <= 1`` for every
   transition) while aligning its steps with ``z``; ``epsilon = dual_slack = 1e-3``;
2. dual descent on ``lambda = exp(log_lambda)`` (init 30): minimise
   ``log_lambda * sg(E[min(1 - ||Delta||^2, epsilon)])`` (``lambda`` grows while the constraint
   is violated);
3. reward ``r = (phi(s') - phi(s))^T z`` with the updated ``phi`` (relabelled on every batch);
4. SAC (``jaxlab.rl.sac.SACLearner``) on the skill-conditioned policy ``pi(a | [s, z])``:
   twin critics ``Q([s, z], a)``, actor, automatic temperature, Polyak targets.

``make_parts(cfg, off_policy, optim)`` builds the shared acting loop of ``jaxlab.rl.skills.training`` around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.sac import TwinCritic
from jaxlab.rl.skills import training
from jaxlab.rl.skills.training import (
    Nets,
    SkillConfig,
    SkillOptim,
    SkillParts,
    SkillState,
    make_skill_parts,
    policy_input,
)

#: METRA's traced hyper-parameters: the shared ones, the dual variable's rate and the slack
TRACED: tuple[str, ...] = (*training.TRACED, "optim.dual.lr", "skills.dual_slack")


def constraint_penalty(
    delta: Float[Array, "b d"], slack: float | Float[Array, ""]
) -> Float[Array, " b"]:
    """``min(1 - ||Delta||^2, slack)``: negative exactly where a transition violates
    ``||phi(s') - phi(s)|| <= 1``."""
    return jnp.minimum(1.0 - jnp.sum(delta**2, axis=-1), slack)


def metra_objective(
    delta: Float[Array, "b d"],
    skill: Float[Array, "b d"],
    lam: Float[Array, ""],
    slack: float | Float[Array, ""],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(E[Delta^T z + lam * penalty], E[penalty])``: the quantity ``phi`` maximises and the
    mean constraint penalty (the dual variable's gradient)."""
    penalty = constraint_penalty(delta, slack)
    return jnp.mean(jnp.sum(delta * skill, -1) + lam * penalty), jnp.mean(penalty)


def make_update(
    cfg: SkillConfig, nets: Nets
) -> Callable[[SkillState, dict, PRNGKeyArray], tuple[SkillState, dict]]:
    """METRA's gradient step ``update(state, batch, key)`` (module docstring, steps 1-4)."""
    phi, learner = nets.phi, nets.learner

    def update(state: SkillState, b: dict, key: PRNGKeyArray) -> tuple[SkillState, dict]:
        k_critic, k_actor = jax.random.split(key)
        lam = jnp.exp(state.log_dual_lam)

        def phi_loss(p):
            delta = phi.apply(p, b["next_obs"]) - phi.apply(p, b["obs"])
            obj, penalty = metra_objective(
                delta, b["skill"], lam, state.hparams["skills.dual_slack"]
            )
            return -obj, (penalty, jnp.linalg.norm(delta, axis=-1))

        (p_loss, (penalty, delta_norm)), p_grad = jax.value_and_grad(phi_loss, has_aux=True)(
            state.phi
        )
        p_upd, phi_opt = learner.tx("phi", state).update(p_grad, state.phi_opt, state.phi)
        phi_p = optax.apply_updates(state.phi, p_upd)

        penalty = jax.lax.stop_gradient(penalty)
        d_grad = jax.grad(lambda log_lam: log_lam * penalty)(state.log_dual_lam)
        dual_tx = learner.tx("dual", state)
        d_upd, dual_opt = dual_tx.update(d_grad, state.dual_opt, state.log_dual_lam)
        log_lam = optax.apply_updates(state.log_dual_lam, d_upd)
        state = state.replace(phi=phi_p, phi_opt=phi_opt, log_dual_lam=log_lam, dual_opt=dual_opt)

        delta = phi.apply(phi_p, b["next_obs"]) - phi.apply(phi_p, b["obs"])
        reward = jax.lax.stop_gradient(jnp.sum(delta * b["skill"], -1))
        sac_batch = {
            "obs": policy_input(b["obs"], b["skill"]),
            "action": b["action"],
            "reward": reward,
            "next_obs": policy_input(b["next_obs"], b["skill"]),
            "discount": jnp.ones_like(reward),
        }
        state, c_metrics = learner.critic_step(state, sac_batch, k_critic)
        state, a_metrics = learner.actor_step(state, sac_batch["obs"], k_actor)
        metrics = {
            "phi_loss": p_loss,
            "reward": reward.mean(),
            "delta_norm": delta_norm.mean(),
            "delta_norm_max": delta_norm.max(),
            "dual_lambda": jnp.exp(log_lam),
            **c_metrics,
            **a_metrics,
        }
        return state, metrics

    return update


def make_parts(
    cfg: SkillConfig,
    off_policy: OffPolicyConfig,
    optim: SkillOptim,
    **kwargs: Any,
) -> SkillParts:
    """METRA's ``init``/``iteration``/``update`` (``kwargs``: ``env_options``, ``iterations``,
    ``spread`` of ``training.make_skill_parts``)."""
    critic = TwinCritic(tuple(cfg.hidden))
    return make_skill_parts(cfg, off_policy, optim, critic, make_update, TRACED, **kwargs)

"""Contrastive successor features (CSF; Zheng, Tuyls, Peng, Eysenbach, "Can a MISL Fly?",
ICLR 2025): mutual-information skill learning with METRA's representation and SF critics.

With ``Delta = phi(s') - phi(s)``, the trajectory's skill ``z`` and ``K`` negatives
``z'_k ~ p(z)`` (the unit-sphere prior, drawn afresh for every batch), one gradient step
(``update``) is:

1. representation: maximise the contrastive lower bound on ``I(S, S'; Z)``

       E[Delta^T z - c * logsumexp_k(Delta^T z'_k)]        (K = 256, c = 5 as in the original;
                                                            ``--log_sum_exp 1 --infonce_lam 5``)

   (``contrastive_objective``; no constraint, no dual variable);
2. the information-bottleneck reward is the positive term only: ``r = Delta^T z`` (= ``phi(s')^T
   z - phi(s)^T z``), written as the vector features ``Delta`` so that ``r = Delta^T z``;
3. successor features: twin ``psi_i([s, z], a) in R^d`` regress the target (``sf_target``)

       Delta + gamma * psibar_j([s', z], a'),   a' ~ pi(.|[s', z]),   j = argmin_i psibar_i^T z

   (the target twin whose Q is smaller; no entropy term and no dones, as in ``metra_sf.py``),
   loss ``sum_i mean (psi_i - target)^2``, Polyak-averaged targets;
4. actor against ``Q = min_i psi_i^T z`` (``sf_q``): ``mean(alpha log pi - Q)``, with SAC's
   automatic temperature (``jaxlab.rl.sac.SACLearner.actor_step``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.sac import MLP
from jaxlab.rl.skills import training
from jaxlab.rl.skills.training import (
    Nets,
    SkillConfig,
    SkillOptim,
    SkillParts,
    SkillState,
    make_skill_parts,
    policy_input,
    sample_skills,
)
from jaxlab.rl.squashed_gaussian import sample_and_log_prob

#: CSF's traced hyper-parameters: the shared ones and the contrastive coefficient
TRACED: tuple[str, ...] = (*training.TRACED, "skills.infonce_coef")


class TwinSuccessorFeatures(nn.Module):
    """Two independent ``psi([s, z], a)`` MLPs with ``dim`` outputs each: ``[..., 2, dim]``."""

    hidden: tuple[int, ...]
    dim: int

    @nn.compact
    def __call__(self, obs: Float[Array, "*b o"], action: Float[Array, "*b a"]):
        x = jnp.concatenate([obs, action], axis=-1)
        psis = [
            nn.Dense(self.dim, name=f"psi{i}_out")(MLP(self.hidden, name=f"psi{i}")(x))
            for i in range(2)
        ]
        return jnp.stack(psis, axis=-2)


def contrastive_objective(
    delta: Float[Array, "b d"],
    skill: Float[Array, "b d"],
    negatives: Float[Array, "k d"],
    coef: float | Float[Array, ""],
) -> tuple[Float[Array, ""], Float[Array, " b"]]:
    """``(E[Delta^T z - coef * logsumexp_k(Delta^T z'_k)], Delta^T z)``: the quantity ``phi``
    maximises and the positive term (the reward)."""
    positive = jnp.sum(delta * skill, axis=-1)
    negative = jax.nn.logsumexp(delta @ negatives.T, axis=-1)
    return jnp.mean(positive - coef * negative), positive


def sf_q(psi: Float[Array, "b 2 d"], skill: Float[Array, "b d"]) -> Float[Array, " b"]:
    """``Q = min_i psi_i^T z``."""
    return jnp.min(jnp.sum(psi * skill[:, None, :], axis=-1), axis=-1)


def sf_target(
    delta: Float[Array, "b d"],
    next_psi: Float[Array, "b 2 d"],
    skill: Float[Array, "b d"],
    gamma: float,
) -> Float[Array, "b d"]:
    """``Delta + gamma * psibar_j``, ``j = argmin_i psibar_i^T z`` per row."""
    j = jnp.argmin(jnp.sum(next_psi * skill[:, None, :], axis=-1), axis=-1)
    chosen = jnp.take_along_axis(next_psi, j[:, None, None], axis=1)[:, 0]
    return delta + gamma * chosen


def make_update(
    cfg: SkillConfig, nets: Nets
) -> Callable[[SkillState, dict, PRNGKeyArray], tuple[SkillState, dict]]:
    """CSF's gradient step ``update(state, batch, key)`` (module docstring, steps 1-4)."""
    phi, actor, critic, learner = nets.phi, nets.actor, nets.critic, nets.learner
    d = cfg.skill_dim

    def update(state: SkillState, b: dict, key: PRNGKeyArray) -> tuple[SkillState, dict]:
        k_neg, k_next, k_actor = jax.random.split(key, 3)
        negatives = sample_skills(k_neg, cfg.num_negatives, d)

        def phi_loss(p):
            delta = phi.apply(p, b["next_obs"]) - phi.apply(p, b["obs"])
            coef = state.hparams["skills.infonce_coef"]
            obj, _ = contrastive_objective(delta, b["skill"], negatives, coef)
            return -obj, jnp.linalg.norm(delta, axis=-1)

        (p_loss, delta_norm), p_grad = jax.value_and_grad(phi_loss, has_aux=True)(state.phi)
        p_upd, phi_opt = learner.tx("phi", state).update(p_grad, state.phi_opt, state.phi)
        phi_p = optax.apply_updates(state.phi, p_upd)
        state = state.replace(phi=phi_p, phi_opt=phi_opt)

        delta = phi.apply(phi_p, b["next_obs"]) - phi.apply(phi_p, b["obs"])
        obs = policy_input(b["obs"], b["skill"])
        next_obs = policy_input(b["next_obs"], b["skill"])
        next_a, _ = sample_and_log_prob(actor.apply(state.actor, next_obs), k_next)
        next_psi = critic.apply(state.target_critic, next_obs, next_a)
        target = jax.lax.stop_gradient(sf_target(delta, next_psi, b["skill"], float(cfg.gamma)))

        def sf_loss(p):
            psi = critic.apply(p, obs, b["action"])
            return jnp.sum(jnp.mean((psi - target[:, None, :]) ** 2, axis=(0, 2))), psi

        (c_loss, psi), c_grad = jax.value_and_grad(sf_loss, has_aux=True)(state.critic)
        state = learner.apply_critic_grad(state, c_grad)

        def q_fn(p, o, a):
            return sf_q(critic.apply(p, o, a), o[:, -d:])

        state, a_metrics = learner.actor_step(state, obs, k_actor, q_fn)
        metrics = {
            "phi_loss": p_loss,
            "reward": jnp.sum(delta * b["skill"], -1).mean(),
            "delta_norm": delta_norm.mean(),
            "delta_norm_max": delta_norm.max(),
            "critic_loss": c_loss,
            "q": sf_q(psi, b["skill"]).mean(),
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
    """CSF's ``init``/``iteration``/``update`` (``kwargs``: ``env_options``, ``iterations``,
    ``spread`` of ``training.make_skill_parts``)."""
    critic = TwinSuccessorFeatures(tuple(cfg.hidden), cfg.skill_dim)
    return make_skill_parts(cfg, off_policy, optim, critic, make_update, TRACED, **kwargs)

"""Dreamer's actor-critic in imagination: ``horizon`` imagined steps from every posterior
state, the critic's two-hot regression towards lambda returns (and the slow critic), the
actor's REINFORCE with normalised returns; steps 2-4 of ``jaxlab.rl.world_models.dreamer``.
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import optax

from jaxlab.rl.world_models import ls_imagine, twohot
from jaxlab.rl.world_models.agent import Agent, DreamerState
from jaxlab.rl.world_models.returns import mixed_lambda_return
from jaxlab.rl.world_models.rssm import Latent, WorldModel


def _make_imagine(a: Agent):
    """``imagine(wm_p, actor_p, start, key)``: the actor's rollout in the world model."""
    cfg, ls, wm, actor, action_vec = a.cfg, a.ls, a.wm, a.actor, a.action_vec

    def imagine(wm_p, actor_p, start: Latent, key):
        """``horizon`` imagined steps from ``start`` [N]: features [H+1, N, F], actions [H, N],
        jump flags [H, N] (all False without LS), Δ and Ĝ [H, N]."""

        def step(latent, k):
            k_a, k_s, k_g, k_j = jax.random.split(k, 4)
            feat = latent.feat()
            a = jax.random.categorical(k_a, actor.apply(actor_p, feat), -1)
            if ls is not None:
                h = wm.apply(wm_p, feat, method=WorldModel.heads)
                gate = jax.random.uniform(k_g, a.shape)
                jump = ls_imagine.imagined_jump(
                    h["jump"], jax.nn.sigmoid(h["cont"]), gate, ls.jump_prob
                )
            else:
                jump = jnp.zeros(a.shape, bool)
            nxt = wm.apply(wm_p, k_s, latent, action_vec(a, jump), method=WorldModel.img_step)
            if ls is not None:
                d_logits, g_logits = wm.apply(wm_p, feat, nxt.feat(), method=WorldModel.jump_heads)
                delta = jnp.where(jump, jnp.maximum(twohot.mean(d_logits), 1.0), 1.0)
                acc = jnp.where(jump, twohot.mean(g_logits), 0.0)
            else:
                delta, acc = jnp.ones(a.shape), jnp.zeros(a.shape)
            return nxt, (feat, a, jump, delta, acc)

        last, (feats, acts, jumps, delta, acc) = jax.lax.scan(
            step, start, jax.random.split(key, cfg.horizon)
        )
        feats = jnp.concatenate([feats, last.feat()[None]], 0)
        return feats, acts, jumps, delta, acc

    return imagine


def _imagined_targets(a: Agent, state: DreamerState, feats, jumps, delta, acc):
    """Rewards, lambda returns, cumulative-continue weights, the updated return-scale EMA,
    the scale, normalised advantages and the actor's step weights of an imagined rollout."""
    cfg, ls, wm, critic = a.cfg, a.ls, a.wm, a.critic
    heads = wm.apply(state.wm, feats[1:], method=WorldModel.heads)
    reward = twohot.mean(heads["reward"])
    if ls is not None:
        reward = reward + twohot.mean(heads["intrinsic"])  # the paid reward, scales in it
    cont = jax.nn.sigmoid(heads["cont"])
    value = twohot.mean(critic.apply(state.critic, feats))
    ret = mixed_lambda_return(reward, cont, value[1:], delta, acc, cfg.gamma, cfg.lam)
    ret = jax.lax.stop_gradient(ret)
    weight = jax.lax.stop_gradient(
        jnp.cumprod(jnp.concatenate([jnp.ones_like(cont[:1]), cont[:-1]], 0), 0)
    )
    lo, hi = jnp.percentile(ret, 5.0), jnp.percentile(ret, 95.0)
    d = cfg.retnorm_decay
    retnorm = d * state.retnorm + (1 - d) * jnp.stack([lo, hi])
    scale = jnp.maximum(1.0, retnorm[1] - retnorm[0])
    adv = jax.lax.stop_gradient((ret - value[:-1]) / scale)
    policy_w = weight * (1.0 - jumps.astype(jnp.float32))  # jumps are not the actor's
    return reward, ret, weight, retnorm, scale, adv, policy_w


def _losses(a: Agent, state: DreamerState, feats, acts, ret, weight, adv, policy_w):
    """``(actor_loss(p) -> (loss, entropy), critic_loss(p) -> loss)`` on the imagined steps."""
    actor, critic = a.actor, a.critic

    def actor_loss(p):
        logits = actor.apply(p, feats[:-1])
        dist = distrax.Categorical(logits=logits)
        logp = dist.log_prob(acts)
        ent = dist.entropy()
        eta = state.hparams["dreamer.entropy"]
        return -jnp.mean(policy_w * (logp * adv + eta * ent)), ent.mean()

    slow_target = twohot.mean(critic.apply(state.slow_critic, feats[:-1]))

    def critic_loss(p):
        logits = critic.apply(p, feats[:-1])
        ce = twohot.loss(logits, ret) + twohot.loss(logits, slow_target)
        return jnp.mean(weight * ce)

    return actor_loss, critic_loss


def make_actor_critic_fns(a: Agent):
    """Imagination and the actor-critic step: ``(imagine(wm_p, actor_p, start, key),
    ac_update(state, posterior, key) -> (state, metrics))`` (module docstring, steps 2-4)."""
    cfg, tx = a.cfg, a.tx
    imagine = _make_imagine(a)

    def ac_update(state: DreamerState, post: Latent, key):
        start = jax.tree.map(lambda x: jax.lax.stop_gradient(x.reshape((-1,) + x.shape[2:])), post)
        feats, acts, jumps, delta, acc = imagine(state.wm, state.actor, start, key)
        feats = jax.lax.stop_gradient(feats)
        reward, ret, weight, retnorm, scale, adv, policy_w = _imagined_targets(
            a, state, feats, jumps, delta, acc
        )
        actor_loss, critic_loss = _losses(a, state, feats, acts, ret, weight, adv, policy_w)
        (a_loss, ent), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(state.actor)
        a_upd, actor_opt = tx("actor", state.hparams).update(a_grad, state.actor_opt, state.actor)
        c_loss, c_grad = jax.value_and_grad(critic_loss)(state.critic)
        c_tx = tx("critic", state.hparams)
        c_upd, critic_opt = c_tx.update(c_grad, state.critic_opt, state.critic)
        critic_p = optax.apply_updates(state.critic, c_upd)
        slow = optax.incremental_update(critic_p, state.slow_critic, cfg.slow_rate)
        state = state.replace(
            actor=optax.apply_updates(state.actor, a_upd),
            actor_opt=actor_opt,
            critic=critic_p,
            critic_opt=critic_opt,
            slow_critic=slow,
            retnorm=retnorm,
        )
        metrics = {
            "actor_loss": a_loss,
            "critic_loss": c_loss,
            "entropy": ent,
            "imag_return": ret.mean(),
            "imag_reward": reward.mean(),
            "return_scale": scale,
            "imag_jump_rate": jumps.astype(jnp.float32).mean(),
        }
        return state, metrics

    return imagine, ac_update

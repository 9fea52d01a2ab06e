"""One Dreamer training iteration: acting and collecting one buffer item per env, replayed
gradient updates (world model, actor-critic, LS-Imagine's affordance learners), and the
initial state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.rl.world_models import affordance
from jaxlab.rl.world_models.agent import ROLES, Agent, DreamerState, hparams, preprocess
from jaxlab.rl.world_models.rssm import WorldModel, zeros_latent


def make_init(a: Agent, env: Any, env_params: Any, replay: Any, item_of: Callable):
    """``init(key) -> DreamerState``: networks, optimiser states, an empty buffer, reset envs."""
    cfg, ls, net, wm, actor, critic = a.cfg, a.ls, a.net, a.wm, a.actor, a.critic
    size, n, optim = a.size, a.off.num_envs, a.optim
    relevance, predictor = affordance.Relevance(), affordance.AffordancePredictor()
    init_tx = {r: optim_lib.make(getattr(optim, r), 1) for r in ROLES}  # the states' structure

    def init(key: PRNGKeyArray) -> DreamerState:
        k_wm, k_a, k_c, k_env, k_aff, k_run = jax.random.split(key, 6)
        dummy_img = jnp.zeros((1, size, size, 3))
        wm_p = wm.init(k_wm, k_wm, dummy_img, jnp.zeros((1, net.action_dim)))
        feat0 = jnp.zeros((1, net.feat))
        actor_p, critic_p = actor.init(k_a, feat0), critic.init(k_c, feat0)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_env, n), env_params
        )
        aff = None
        if ls is not None:
            k1, k2 = jax.random.split(k_aff)
            rel_p, pred_p = relevance.init(k1, dummy_img), predictor.init(k2, dummy_img)
            aff = {
                "relevance": rel_p,
                "predictor": pred_p,
                "relevance_opt": init_tx["affordance"].init(rel_p),
                "predictor_opt": init_tx["affordance"].init(pred_p),
                "stat_mean": jnp.float32(0.0),
                "score_mean": jnp.float32(0.0),
                "score_sq": jnp.float32(0.0),
                # the episode's best concentration / relevance scores so far, per env
                "best_score": jnp.zeros((n,), jnp.float32),
                "best_relevance": jnp.zeros((n,), jnp.float32),
            }
        example, _ = item_of(
            obs[:1],
            jnp.zeros((1,), jnp.int32),
            jnp.zeros((1,)),
            jnp.ones((1,)),
            jnp.ones((1,), bool),
            aff,
            jnp.zeros((1,)),
            (jnp.zeros((1,)), jnp.zeros((1,))),
        )
        example = jax.tree.map(lambda x: jnp.zeros_like(x[0]), example)
        return DreamerState(
            wm=wm_p,
            actor=actor_p,
            critic=critic_p,
            slow_critic=critic_p,
            wm_opt=init_tx["model"].init(wm_p),
            actor_opt=init_tx["actor"].init(actor_p),
            critic_opt=init_tx["critic"].init(critic_p),
            retnorm=jnp.zeros((2,), jnp.float32),
            buffer=replay.init(example),
            env_state=env_state,
            obs=obs,
            need_first=jnp.ones((n,), bool),
            action=jnp.zeros((n,), jnp.int32),
            latent=zeros_latent(net, (n,)),
            episode_return=jnp.zeros((n,)),
            last_return=jnp.zeros((n,)),
            successes=jnp.float32(0),
            episodes=jnp.float32(0),
            key=k_run,
            iteration=jnp.int32(0),
            hparams=hparams(cfg, optim, ls is not None),
            aff=aff,
        )

    return init


def make_collect(a: Agent, env: Any, env_params: Any, replay: Any, item_of: Callable):
    """``collect(state) -> (state, metrics)``: one env step per env (or the first observation
    of a new episode), one buffer item each, and the acting latent observed."""
    ls, wm, actor, action_vec = a.ls, a.wm, a.actor, a.action_vec
    n, off = a.off.num_envs, a.off

    def collect(state: DreamerState) -> tuple[DreamerState, dict]:
        """One env step per env (or the first observation of a new episode), one item each."""
        key, k_step, k_lat, k_act = jax.random.split(state.key, 4)
        obs2, env2, r, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, n), state.env_state, state.action, env_params
        )
        first = state.need_first
        keep = lambda new, old: jax.tree.map(
            lambda a, b: jnp.where(first.reshape((n,) + (1,) * (a.ndim - 1)), b, a), new, old
        )
        item_obs = jnp.where(first[:, None, None, None], state.obs, info["final_observation"])
        rel = best = None
        if ls is not None:
            rel_first = jax.vmap(_relevance_of_state)(state.env_state)
            rel = jnp.where(first, rel_first, info["relevance"])
            best = (state.aff["best_score"], state.aff["best_relevance"])
        item, best = item_of(
            item_obs,
            jnp.where(first, 0, state.action),
            jnp.where(first, 0.0, r),
            jnp.where(first, 1.0, 1.0 - term.astype(jnp.float32)),
            first,
            state.aff,
            rel,
            best,
        )
        done = ~first & (term | trunc)
        env_state = keep(env2, state.env_state)
        obs = jnp.where(first[:, None, None, None], state.obs, obs2)
        # the agent's latent for acting: reset at a first item, then observe it
        k1, k2 = jax.random.split(k_lat)
        reset = (1.0 - first.astype(jnp.float32))[:, None]
        prev = jax.tree.map(
            lambda x: x * reset.reshape(reset.shape + (1,) * (x.ndim - 2)), state.latent
        )
        embed = wm.apply(state.wm, preprocess(item_obs), method=WorldModel.encode)
        prior = wm.apply(
            state.wm, k1, prev, action_vec(item["prev_action"]) * reset, method=WorldModel.img_step
        )
        latent = wm.apply(state.wm, k2, prior, embed, method=WorldModel.obs_step)
        logits = actor.apply(state.actor, latent.feat())
        warm = state.iteration < off.learning_starts
        logits = jnp.where(warm, jnp.zeros_like(logits), logits)
        action = jax.random.categorical(k_act, logits, -1).astype(jnp.int32)
        buffer = replay.add(state.buffer, jax.tree.map(lambda x: x[:, None], item))
        ep_ret = state.episode_return + jnp.where(first, 0.0, r)
        aff = state.aff
        if ls is not None:
            dcy = ls.stats_decay
            aff = {
                **aff,
                "stat_mean": dcy * aff["stat_mean"] + (1 - dcy) * item["zoom_stat"].mean(),
                "score_mean": dcy * aff["score_mean"] + (1 - dcy) * item["intrinsic"].mean(),
                "score_sq": dcy * aff["score_sq"] + (1 - dcy) * (item["intrinsic"] ** 2).mean(),
                "best_score": best[0],
                "best_relevance": best[1],
            }
        success = done & (r > 0)
        state = state.replace(
            buffer=buffer,
            env_state=env_state,
            obs=obs,
            need_first=done,
            action=action,
            latent=latent,
            episode_return=jnp.where(done, 0.0, ep_ret),
            last_return=jnp.where(done, ep_ret, state.last_return),
            successes=state.successes + success.sum(),
            episodes=state.episodes + done.sum(),
            key=key,
            iteration=state.iteration + 1,
            aff=aff,
        )
        metrics = {"episode_return": state.last_return.mean(), "env_steps": (~first).sum()}
        if ls is not None:
            metrics["jump_flag_rate"] = item["jump"].astype(jnp.float32).mean()
            metrics["intrinsic"] = item["intrinsic"].mean()
            metrics["intrinsic_reward"] = item["intrinsic_reward"].mean()
        return state, metrics

    return collect


def make_update(
    a: Agent,
    replay: Any,
    wm_loss: Callable,
    ac_update: Callable,
    aff_update: Callable,
    spread: Callable[[Any], Any] | None,
):
    """``update(state, key) -> (state, metrics)``: one gradient step of the world model on a
    replayed ``[batch_size, sequence_length]`` batch, then critic and actor in imagination from
    its posteriors, then (LS-Imagine) the affordance learners; ``spread`` (data parallel)
    constrains the batch's leading axis to the mesh's data axes."""
    ls, tx = a.ls, a.tx

    def update(state: DreamerState, key: PRNGKeyArray):
        """One gradient step of the world model, then critic and actor in imagination."""
        k_s, k_wm, k_ac, k_aff = jax.random.split(key, 4)
        batch = replay.sample(state.buffer, k_s).experience
        if spread is not None:
            batch = spread(batch)
        scales = (state.hparams["dreamer.dyn_scale"], state.hparams["dreamer.rep_scale"])
        (_, (metrics, post)), grad = jax.value_and_grad(wm_loss, has_aux=True)(
            state.wm, batch, k_wm, scales
        )
        upd, wm_opt = tx("model", state.hparams).update(grad, state.wm_opt, state.wm)
        state = state.replace(wm=optax.apply_updates(state.wm, upd), wm_opt=wm_opt)
        state, ac_metrics = ac_update(state, post, k_ac)
        metrics = {**metrics, **ac_metrics}
        if ls is not None:
            aff, aff_metrics = aff_update(state.aff, batch, k_aff, state.hparams)
            state = state.replace(aff=aff)
            metrics.update(aff_metrics)
        return state, metrics

    return update


def _learn_metric_names(ls: bool) -> list[str]:
    """The names of the metrics of ``update`` (zeros on iterations that do not learn)."""
    zero_names = ["image_loss", "reward_loss", "cont_loss", "kl", "rep_kl", "actor_loss"]
    zero_names += ["critic_loss", "entropy", "imag_return", "imag_reward", "return_scale"]
    zero_names += ["imag_jump_rate"]
    if ls:
        zero_names += ["jump_loss", "intrinsic_loss", "jump_transition_loss", "jump_rate"]
        zero_names += ["jump_valid", "relevance_loss", "affordance_loss"]
    return zero_names


def make_iteration(a: Agent, replay: Any, collect: Callable, update: Callable):
    """``iteration(state) -> (state, metrics)``: ``collect``, then ``updates_per_iteration``
    scanned ``update`` steps once past ``learning_starts`` and the buffer can be sampled."""
    off = a.off
    zero_names = _learn_metric_names(a.ls is not None)

    def iteration(state: DreamerState) -> tuple[DreamerState, dict]:
        k_learn = jax.random.fold_in(state.key, 1)
        state, metrics = collect(state)

        def learn(s):
            keys = jax.random.split(k_learn, off.updates_per_iteration)
            s, m = jax.lax.scan(update, s, keys)
            return s, jax.tree.map(lambda x: x[-1], m)

        zeros = {k: jnp.float32(0) for k in zero_names}
        can = (state.iteration > off.learning_starts) & replay.can_sample(state.buffer)
        state, learn_metrics = jax.lax.cond(can, learn, lambda s: (s, zeros), state)
        return state, {**metrics, **learn_metrics, "learning": can}

    return iteration


def _relevance_of_state(env_state) -> Float[Array, ""]:
    from jaxlab.envs.open_world import relevance

    return relevance(env_state)

"""Evaluation of a Dreamer agent: episodes acted from the posterior latent."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from jaxlab.rl.world_models.agent import DreamerState, preprocess
from jaxlab.rl.world_models.rssm import WorldModel, zeros_latent

if TYPE_CHECKING:
    from jaxlab.rl.world_models.dreamer import DreamerParts


def make_evaluate(parts: DreamerParts, episodes: int, steps: int):
    """``evaluate(state, key) -> {"return", "success"}``: ``episodes`` episodes of at most
    ``steps`` env steps with the actor sampling from the posterior latent. Envs whose ``info``
    has ``target_distance`` (the open world) also give ``min_distance``, the episodes' mean
    closest approach to the target (progress short of success)."""
    env, env_params, wm, actor = parts.env, parts.env_params, parts.world_model, parts.actor
    n_act = env.action_space(env_params).n
    has_jump = parts.net.action_dim > n_act
    _, s0 = jax.eval_shape(env.reset, jax.random.key(0), env_params)
    info0 = jax.eval_shape(env.step, jax.random.key(0), s0, jnp.int32(0), env_params)[5]
    has_distance = "target_distance" in info0

    def one(key, state: DreamerState):
        k_reset, k_steps = jax.random.split(key)
        obs, s = env.reset(k_reset, env_params)
        latent = zeros_latent(parts.net, ())

        def body(carry, k):
            obs, s, latent, a_prev, first, done, ret, succ, near = carry
            k1, k2, k3, k4 = jax.random.split(k, 4)
            av = jax.nn.one_hot(a_prev, n_act) * (1.0 - first)
            if has_jump:
                av = jnp.concatenate([av, jnp.zeros((1,))], -1)
            prior = wm.apply(state.wm, k1, latent, av, method=WorldModel.img_step)
            embed = wm.apply(state.wm, preprocess(obs), method=WorldModel.encode)
            latent = wm.apply(state.wm, k2, prior, embed, method=WorldModel.obs_step)
            a = jax.random.categorical(k3, actor.apply(state.actor, latent.feat()), -1)
            obs2, s2, r, te, tr, info = env.step(k4, s, a, env_params)
            live = 1.0 - done
            succ = succ | ((done == 0.0) & info.get("success", te))
            if has_distance:
                near = jnp.where(done == 0.0, jnp.minimum(near, info["target_distance"]), near)
            ret = ret + live * r
            done = jnp.maximum(done, (te | tr).astype(jnp.float32))
            return (obs2, s2, latent, a, jnp.float32(0), done, ret, succ, near), None

        init = (obs, s, latent, jnp.int32(0), jnp.float32(1), jnp.float32(0), 0.0, False, jnp.inf)
        (_, _, _, _, _, _, ret, succ, near), _ = jax.lax.scan(
            body, init, jax.random.split(k_steps, steps)
        )
        return ret, succ, near

    def evaluate(state: DreamerState, key: PRNGKeyArray) -> dict[str, Array]:
        keys = jax.random.split(key, episodes)
        ret, succ, near = jax.vmap(one, in_axes=(0, None))(keys, state)
        out = {"return": ret.mean(), "success": succ.astype(jnp.float32).mean()}
        if has_distance:
            out["min_distance"] = near.mean()
        return out

    return evaluate

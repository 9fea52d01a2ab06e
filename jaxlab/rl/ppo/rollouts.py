"""Rollouts of the policy in all of a run's envs: a ``lax.scan`` of ``num_steps`` steps.

Truncated episodes are treated as ended (as the original Kinetix code does) unless
``bootstrap_truncation``, which adds ``gamma V(s_final)`` to the reward of a truncated step.
With ``shard_invariant`` every random draw of an env (actions, env steps) uses the key of the
env's *global* index, so a device's envs draw what they would on one device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.envs.wrappers import EpisodeStatisticsState
from jaxlab.rl.ppo.gae import Transition
from jaxlab.rl.ppo.spec import PPO, batch_size, env_keys, policy
from jaxlab.rl.ued import success_rate


def sample(agent: PPO, key, pi, n: int):
    """Actions for ``n`` envs from the batched distribution ``pi`` (per-env keys when
    ``shard_invariant``)."""
    if not agent.cfg.shard_invariant:
        return pi.sample(seed=key)
    return jax.vmap(lambda d, k: d.sample(seed=k))(pi, env_keys(agent, key, n))


def reset_to(agent: PPO, levels):
    """``(obs, env_state)`` [B]: wrapped env states starting episodes from ``levels`` [B]."""
    inner = agent.stats_env.unwrapped
    obs = jax.vmap(lambda s: inner.get_obs(s, agent.env_params))(levels)
    b = (batch_size(levels),)
    zf, zi = jnp.zeros(b, jnp.float32), jnp.zeros(b, jnp.int32)
    state = EpisodeStatisticsState(levels, zf, zi, zf, zi, jnp.zeros(b, bool), zi)
    return obs, state


def step_envs(agent: PPO, key, env_state, action, levels):
    """One step of every env; episodes restart from ``levels`` when a curriculum forces them."""
    keys = env_keys(agent, key, batch_size(env_state))
    env, params = agent.stats_env, agent.env_params
    if isinstance(levels, tuple) and len(levels) == 0:
        return jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, env_state, action, params)
    step = lambda k, s, a, lv: env.step(k, s, a, params, reset_state=lv)
    return jax.vmap(step)(keys, env_state, action, levels)


def rollout(agent: PPO, key, params, obs_stats, env_state, obs, levels, num_steps: int):
    """``num_steps`` policy steps in every env; returns ``(env_state, obs, traj [T, B])``."""
    cfg = agent.cfg

    def step(carry, k):
        env_state, obs = carry
        k_act, k_env = jax.random.split(k)
        pi, value = policy(agent, params, obs_stats, obs)
        action = sample(agent, k_act, pi, batch_size(obs))
        log_prob = pi.log_prob(action)
        obs2, env_state2, reward, term, trunc, info = step_envs(
            agent, k_env, env_state, action, levels
        )
        if cfg.bootstrap_truncation:
            _, final_v = policy(agent, params, obs_stats, info["final_observation"])
            reward = reward + cfg.gamma * final_v * trunc
        done = term | trunc
        tr = Transition(
            obs=obs,
            action=action,
            log_prob=log_prob,
            value=value,
            reward=reward,
            done=done,
            solved=info["returned_episode_solved"] & done,
            ep_return=info["returned_episode_returns"],
            ep_length=info["returned_episode_lengths"].astype(jnp.float32),
        )
        return (env_state2, obs2), tr

    (env_state, obs), traj = jax.lax.scan(step, (env_state, obs), jax.random.split(key, num_steps))
    return env_state, obs, traj


def success_rates(
    agent: PPO, key, params, obs_stats, levels: Any, num_steps: int
) -> Float[Array, " m"]:
    """Success rate of the stochastic policy on each of ``levels`` [M] over ``num_steps`` steps
    (episodes restart from the same level); SFL's scorer."""
    obs, env_state = reset_to(agent, levels)
    _, _, traj = rollout(agent, key, params, obs_stats, env_state, obs, levels, num_steps)
    return success_rate(traj.done, traj.solved)

"""A PPO run as pure functions of :class:`~jaxlab.rl.ppo.spec.PPO` and the state:

* ``init(agent, key) -> PPOState``: parameters, optimiser state, ``num_envs`` reset envs,
  curriculum state and a raw ``uint32[2]`` PRNG key (so checkpoints resume bit-identically);
* ``update(agent, state) -> (state, metrics)``: one PPO update = a rollout of ``num_steps``
  steps in all envs, GAE, then the epochs of minibatch steps; the shared loop's ``train_step``;
* ``train(agent, key, n)``: ``init`` then ``lax.scan`` of ``update``, one pure function, so
  ``jax.vmap`` over keys trains many seeds at once; ``make_train(cfg, env, ...)`` is the
  purejaxrl-shaped entry point.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from jaxlab.core.optim import OptimConfig
from jaxlab.envs.base import Environment
from jaxlab.rl import normalization as norm
from jaxlab.rl.ppo.config import OPTIM, PPOConfig, hparams_from, make_optimizer
from jaxlab.rl.ppo.epochs import learn
from jaxlab.rl.ppo.gae import compute_gae
from jaxlab.rl.ppo.rollouts import reset_to, rollout, success_rates
from jaxlab.rl.ppo.spec import (
    PPO,
    PPOState,
    device_key,
    hparams,
    local_key,
    mean_where,
    pmean,
    policy,
)
from jaxlab.rl.ued import Curriculum, RolloutStats

#: the loss metrics of an update, zero where a curriculum skips learning
LOSS_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "loss")


def init(agent: PPO, key: PRNGKeyArray) -> PPOState:
    """Fresh parameters, optimiser, envs and curriculum (pure)."""
    cfg = agent.cfg
    k_net, k_env, k_cur, k_lv, key = jax.random.split(key, 5)
    obs_batch = jax.tree.map(lambda x: x[None], agent.obs_example)
    params = agent.network.init(k_net, obs_batch)
    opt_state = make_optimizer(cfg, agent.optim, agent.num_updates).init(params)
    curriculum, levels = (), ()
    if agent.curriculum is not None and agent.curriculum.forces_levels:
        curriculum = agent.curriculum.init(k_cur)
        levels = jax.vmap(agent.curriculum.sample_level)(jax.random.split(k_lv, cfg.num_envs))
        obs, env_state = reset_to(agent, levels)
    else:
        keys = jax.random.split(k_env, cfg.num_envs)
        obs, env_state = jax.vmap(agent.stats_env.reset, in_axes=(0, None))(keys, agent.env_params)
    return PPOState(
        params=params,
        opt_state=opt_state,
        obs_stats=norm.init_stats(agent.obs_example),
        env_state=env_state,
        obs=obs,
        levels=levels,
        curriculum=curriculum,
        key=key,
        update=jnp.zeros((), jnp.int32),
        hparams=hparams_from(cfg, agent.optim),
    )


def rollout_metrics(agent: PPO, traj) -> dict[str, Array]:
    """Episode statistics of a rollout ``[T, B]`` (over all devices)."""
    ax = agent.axis_name
    return {
        "episode_return": mean_where(traj.ep_return, traj.done, ax),
        "episode_length": mean_where(traj.ep_length, traj.done, ax),
        "solve_rate": mean_where(traj.solved, traj.done, ax),
        "episodes": jnp.sum(traj.done).astype(jnp.float32),
        "value": jnp.mean(traj.value),
        "reward": jnp.mean(traj.reward),
    }


def update(agent: PPO, state: PPOState) -> tuple[PPOState, dict[str, Array]]:
    """One PPO update (module docstring); the shared loop's ``train_step``."""
    cfg, cur = agent.cfg, agent.curriculum
    forces = cur is not None and cur.forces_levels
    key, k_cur, k_roll, k_train = jax.random.split(state.key, 4)
    # The curriculum's state (e.g. the SFL buffer) is per device: its draws always differ.
    k_cur = device_key(agent, k_cur)
    k_roll, k_train = local_key(agent, k_roll), local_key(agent, k_train)
    params, opt_state, obs_stats = state.params, state.opt_state, state.obs_stats
    env_state, obs, levels, cstate = state.env_state, state.obs, state.levels, state.curriculum
    metrics: dict[str, Array] = {}
    aux: Any = {}
    if forces:

        def score_fn(k, lv):
            return success_rates(agent, k, params, obs_stats, lv, cur.cfg.sfl.rollout_steps)

        k_next, k_obs_cur = jax.random.split(k_cur)
        levels, aux, cstate, m = cur.next_levels(k_next, cstate, state.update, score_fn)
        metrics.update(m)
        obs, env_state = reset_to(agent, levels)

    env_state, obs, traj = rollout(
        agent, k_roll, params, obs_stats, env_state, obs, levels, cfg.num_steps
    )
    _, last_value = policy(agent, params, obs_stats, obs)
    advantages, targets = compute_gae(
        traj.reward, traj.value, traj.done, last_value, cfg.gamma, cfg.gae_lambda
    )
    train = jnp.asarray(True)
    if forces:
        stats = RolloutStats(traj.reward, traj.done, traj.solved, traj.value, advantages)
        cstate, train, m = cur.observe(k_obs_cur, cstate, aux, levels, stats)
        metrics.update(m)

    hp = hparams(agent, state)

    def do_train(_):
        return learn(agent, k_train, params, opt_state, obs_stats, traj, advantages, targets, hp)

    def skip(_):
        zero = jnp.zeros((), jnp.float32)
        return params, opt_state, dict.fromkeys(LOSS_METRICS + ("grad_norm",), zero)

    if cur is not None and cur.kind in ("plr", "accel"):
        params, opt_state, losses = jax.lax.cond(train, do_train, skip, None)
    else:
        params, opt_state, losses = do_train(None)
    if cfg.normalize_obs:
        obs_stats = norm.update_stats(obs_stats, traj.obs, agent.axis_name)

    metrics = pmean(agent, {**metrics, **losses, **rollout_metrics(agent, traj)})
    if agent.axis_name is not None:
        metrics["episodes"] = metrics["episodes"] * jax.lax.psum(1, agent.axis_name)
    new_state = state.replace(
        params=params,
        opt_state=opt_state,
        obs_stats=obs_stats,
        env_state=env_state,
        obs=obs,
        levels=levels,
        curriculum=cstate,
        key=key,
        update=state.update + 1,
    )
    return new_state, metrics


def train(agent: PPO, key: PRNGKeyArray, num_updates: int | None = None):
    """``(final_state, metrics [num_updates])``: ``init`` then ``num_updates`` updates (default
    the agent's ``num_updates``) in one ``lax.scan``, a pure function of the key."""
    n = agent.num_updates if num_updates is None else num_updates
    state = init(agent, key)
    return jax.lax.scan(lambda s, _: update(agent, s), state, None, length=n)


def make_train(
    cfg: PPOConfig,
    env: Environment,
    env_params: Any,
    network: nn.Module,
    num_updates: int,
    *,
    optim: OptimConfig = OPTIM,
    curriculum: Curriculum | None = None,
) -> Callable[[PRNGKeyArray], Any]:
    """purejaxrl-style entry point: ``make_train(...)(key) -> (final_state, metrics)``;
    ``jax.vmap`` it over keys to train several seeds at once."""
    agent = PPO(
        cfg, env, env_params, network, optim=optim, num_updates=num_updates, curriculum=curriculum
    )
    return functools.partial(train, agent)

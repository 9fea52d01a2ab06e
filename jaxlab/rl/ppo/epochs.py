"""The learning half of a PPO update: ``update_epochs`` epochs of ``num_minibatches`` optimiser
steps on one rollout ``[T, B]`` (nested ``lax.scan``).

Advantages are standardised over the whole minibatch (over all devices), so gradient chunks
(``grad_chunks``) see the minibatch's statistics. With ``shard_invariant`` each minibatch holds
``T / num_minibatches`` time steps of *every* env (drawn per env with the env's global key), so
a device's share of a minibatch is its own envs' share and an update on ``D`` data shards is the
computation of one device, up to the order of float sums; the price is minibatches stratified by
env instead of drawn uniformly from the whole rollout.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.rl.ppo.config import hparams_from, make_optimizer
from jaxlab.rl.ppo.loss import ppo_loss
from jaxlab.rl.ppo.spec import PPO, env_keys, pmean, policy


def minibatches(agent: PPO, key, data: dict[str, Any], steps: int, envs: int) -> dict[str, Any]:
    """One epoch's minibatches ``[num_minibatches, T B / num_minibatches, ...]`` of ``data``
    ``[T, B, ...]``: a uniform shuffle, or stratified per env with ``shard_invariant`` (each
    env's steps in its own random order; minibatch ``j`` is steps ``[j T/M, (j+1) T/M)`` of that
    order in every env)."""
    cfg, n = agent.cfg, steps * envs
    if not cfg.shard_invariant:
        perm = jax.random.permutation(key, n)
        flat = lambda x: x.reshape((n,) + x.shape[2:])
        return jax.tree.map(
            lambda x: flat(x)[perm].reshape((cfg.num_minibatches, -1) + x.shape[2:]), data
        )
    perms = jax.vmap(lambda k: jax.random.permutation(k, steps))(env_keys(agent, key, envs))
    take = jax.vmap(lambda xe, pe: xe[pe], in_axes=(1, 0), out_axes=1)
    return jax.tree.map(
        lambda x: take(x, perms).reshape((cfg.num_minibatches, -1) + x.shape[2:]), data
    )


def learn(agent: PPO, key, params, opt_state, obs_stats, traj, advantages, targets, hp=None):
    """``(params, opt_state, mean losses)`` after the epochs on one rollout; the optimiser and
    the loss read the traced ``hp`` (default: the config's values)."""
    cfg = agent.cfg
    hp = hparams_from(cfg, agent.optim) if hp is None else hp
    optimizer = make_optimizer(cfg, agent.optim, agent.num_updates, lr=hp["optim.lr"])
    steps, envs = traj.reward.shape
    data = {
        "obs": traj.obs,
        "action": traj.action,
        "log_prob": traj.log_prob,
        "value": traj.value,
        "advantage": advantages,
        "target": targets,
    }
    # standardised below over the whole minibatch, so the loss leaves advantages as they are
    loss_cfg = dataclasses.replace(cfg, normalize_advantages=False)

    def loss_fn(p, batch):
        pi, value = policy(agent, p, obs_stats, batch["obs"])
        return ppo_loss(pi, value, batch, loss_cfg, hp)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_grad(p, batch):
        if cfg.normalize_advantages:
            adv = batch["advantage"]
            mean = pmean(agent, jnp.mean(adv))
            std = jnp.sqrt(pmean(agent, jnp.mean(jnp.square(adv - mean))))
            batch = dict(batch, advantage=(adv - mean) / (std + 1e-8))
        if cfg.grad_chunks == 1:
            return grad_fn(p, batch)
        chunks = jax.tree.map(lambda x: x.reshape((cfg.grad_chunks, -1) + x.shape[1:]), batch)

        def accumulate(total, chunk):
            return jax.tree.map(jnp.add, total, grad_fn(p, chunk)), None

        first = jax.tree.map(lambda x: x[0], chunks)
        zero = jax.tree.map(
            lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(grad_fn, p, first)
        )
        total, _ = jax.lax.scan(accumulate, zero, chunks)
        return jax.tree.map(lambda x: x / cfg.grad_chunks, total)

    def minibatch(carry, batch):
        p, o = carry
        (loss, aux), grads = minibatch_grad(p, batch)
        grads = pmean(agent, grads)
        updates, o = optimizer.update(grads, o, p)
        p = optax.apply_updates(p, updates)
        return (p, o), dict(aux, loss=loss, grad_norm=optax.global_norm(grads))

    def epoch(carry, k):
        return jax.lax.scan(minibatch, carry, minibatches(agent, k, data, steps, envs))

    (params, opt_state), aux = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(key, cfg.update_epochs)
    )
    return params, opt_state, jax.tree.map(jnp.mean, aux)

"""Proximal Policy Optimisation (Schulman et al. 2017) as pure functions, in the purejaxrl shape.

``PPO(cfg, env, env_params, network)`` holds only static things; its methods are pure:

* ``init(key) -> PPOState``: parameters, Adam state, ``num_envs`` reset envs, curriculum state and
  a raw ``uint32[2]`` PRNG key (so checkpoints resume bit-identically);
* ``update(state) -> (state, metrics)``: one PPO update = a rollout of ``num_steps`` steps in all
  envs (``lax.scan``), GAE, then ``update_epochs`` epochs of ``num_minibatches`` minibatch Adam
  steps (nested ``lax.scan``). This is the ``train_step`` of the shared loop;
* ``make_train(num_updates)(key)``: ``init`` then ``lax.scan`` of ``update``, one pure function,
  so ``jax.vmap(ppo.make_train(n))(keys)`` trains many seeds at once.

Losses, per minibatch (``r_t = pi(a_t|s_t) / pi_old(a_t|s_t)``, ``A_t`` normalised per minibatch
when ``normalize_advantages``):

    L_pi = -E[min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)]                     (PPO eq. 7)
    L_V  = 0.5 E[max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2)]     (value clipping)
    L    = L_pi + c_V L_V - c_H E[H(pi(.|s_t))]

GAE (Schulman et al. 2016, eq. 11-16) with ``d_t`` the end of an episode at step ``t``:

    delta_t = r_t + gamma V(s_{t+1}) (1 - d_t) - V(s_t),
    A_t = delta_t + gamma lambda (1 - d_t) A_{t+1},   G_t = A_t + V(s_t).

Truncated episodes are treated as ended (like the original Kinetix code) unless
``bootstrap_truncation``, which adds ``gamma V(s_final)`` to the reward of a truncated step.
The optimiser is a :class:`jaxlab.core.optim.OptimConfig` (recipes hold it at ``optim``; default
:data:`OPTIM`: global-norm clipping at 0.5, then Adam with eps 1e-5); its schedule counts
optimiser steps, ``update_epochs x num_minibatches`` per update (:func:`optimizer_steps`), so
``schedule="linear"`` anneals the rate linearly to 0 over the run as the original does. With
``axis_name`` set (inside ``shard_map`` over the ``data`` mesh axis) each device steps its own
share of the envs and gradients, metrics and observation statistics are averaged over devices.

Traced hyper-parameters: the learning rate (``optim.lr``), clip range and the two loss
coefficients live in ``PPOState.hparams`` (float32 scalars keyed by their dotted config keys,
:data:`TRACED`) and are read inside the compiled update (the optimizer is built there from the
traced learning rate), so a sweep vmaps over them in one program. ``init`` fills them from the
configs.

Shard invariance (``shard_invariant``): every random draw of an env (actions, env steps) uses the
key of the env's *global* index, the advantages are standardised with statistics over all devices,
and each minibatch holds ``num_steps / num_minibatches`` time steps of *every* env (drawn per env),
so a device's share of a minibatch is its own envs' share. An update on ``D`` data shards is then
the same computation as on one device (up to the order of float sums), at the price of
minibatches stratified by env instead of drawn uniformly from the whole rollout. This holds for
curricula without per-device state (``uniform``); an SFL buffer split over devices draws its own
levels on each device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.envs.base import Environment
from jaxlab.envs.wrappers import EpisodeStatistics, EpisodeStatisticsState
from jaxlab.rl import normalization as norm
from jaxlab.rl.ued import Curriculum, RolloutStats, success_rate

#: the traced hyper-parameters of PPO (keys of ``PPOState.hparams``: recipes hold PPOConfig at
#: the config key ``ppo`` and its OptimConfig at ``optim``)
TRACED: tuple[str, ...] = ("optim.lr", "ppo.clip_eps", "ppo.ent_coef", "ppo.vf_coef")

#: PPO's optimiser (the original Kinetix ``ppo-base``): global-norm clipping at 0.5, then Adam
#: (eps 1e-5) at 3e-4; ``schedule="linear"`` is the original's ``anneal_lr``
OPTIM = OptimConfig(name="adam", lr=3e-4, eps=1e-5, clip_norm=0.5)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (defaults: the original Kinetix ``ppo-base`` values where sensible
    for a fast CPU run; see the presets for the paper's).

    Attributes:
        num_envs: parallel environments.
        num_steps: rollout length per update.
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch (``num_envs * num_steps`` must divide).
        grad_chunks: each minibatch gradient is accumulated over this many equal chunks in a
            ``lax.scan`` (advantages are normalised over the whole minibatch first, and the
            chunk means averaged), so it is the same gradient up to float round-off, in less
            memory. Speed on XLA's CPU backend (entity transformer, S, minibatch 512, one epoch
            of 32 Adam steps, idle 2-core machine, ``jaxlab.core.compile`` options): 1, 2 and 4
            chunks 2.72 / 2.70 / 2.79 s, so 1 is the default.
        gamma: discount.
        gae_lambda: GAE lambda.
        clip_eps: policy (and value) clip range.
        clip_value: clip the value loss around the old values.
        ent_coef: entropy bonus coefficient ``c_H``.
        vf_coef: value loss coefficient ``c_V``.
        normalize_advantages: standardise advantages per minibatch.
        normalize_obs: running observation normalisation (``normalization.py``).
        bootstrap_truncation: bootstrap the value of truncated episodes.
        shard_invariant: make the update the same on any number of data shards (module
            docstring); needs ``num_minibatches`` to divide ``num_steps``.
    """

    num_envs: int = 256
    num_steps: int = 64
    update_epochs: int = 8
    num_minibatches: int = 32
    grad_chunks: int = 1
    gamma: float = 0.995
    gae_lambda: float = 0.9
    clip_eps: float = 0.2
    clip_value: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    normalize_advantages: bool = True
    normalize_obs: bool = False
    bootstrap_truncation: bool = False
    shard_invariant: bool = False

    def __post_init__(self):
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "grad_chunks"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ConfigError(
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_envs x num_steps = {batch}",
            )
        if (batch // self.num_minibatches) % self.grad_chunks:
            raise ConfigError(
                "grad_chunks",
                self.grad_chunks,
                f"a divisor of the minibatch size {batch // self.num_minibatches}",
            )
        if self.shard_invariant and self.num_steps % self.num_minibatches:
            raise ConfigError(
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_steps={self.num_steps} with shard_invariant "
                "(each minibatch holds the same steps of every env)",
            )
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "in [0, 1]")
        if not self.clip_eps > 0:
            raise ConfigError("clip_eps", self.clip_eps, "a float > 0")
        for name in ("ent_coef", "vf_coef"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "a float >= 0")

    @property
    def batch_size(self) -> int:
        """Transitions per update."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches


def hparams_from(cfg: PPOConfig, optim: OptimConfig) -> dict[str, jax.Array]:
    """The traced hyper-parameters (:data:`TRACED`) valued from ``cfg`` and ``optim``."""
    own = {"ppo": cfg, "optim": optim}
    return {k: jnp.float32(getattr(own[k.split(".")[0]], k.split(".", 1)[1])) for k in TRACED}


@struct.dataclass
class PPOState:
    """Everything one PPO run carries between updates (a checkpointable pytree).

    Attributes:
        params: network parameters.
        opt_state: optax state.
        obs_stats: running observation statistics (unused unless ``normalize_obs``).
        env_state: [num_envs] ``EpisodeStatisticsState`` of the envs.
        obs: [num_envs] current observations.
        levels: [num_envs] start level of each env (curricula that force levels), else ``()``.
        curriculum: the curriculum's state.
        key: raw ``uint32[2]`` PRNG key.
        update: number of updates done.
        hparams: the traced hyper-parameters (:data:`TRACED` -> float32 scalar).
    """

    params: Any
    opt_state: Any
    obs_stats: norm.RunningStats
    env_state: EpisodeStatisticsState
    obs: Any
    levels: Any
    curriculum: Any
    key: jax.Array
    update: jax.Array
    hparams: dict[str, jax.Array] = struct.field(default_factory=dict)


@struct.dataclass
class Transition:
    """One rollout step for all envs (leading axis [num_envs]; stacked to [T, num_envs])."""

    obs: Any
    action: Any
    log_prob: Float[Array, " b"]
    value: Float[Array, " b"]
    reward: Float[Array, " b"]
    done: Bool[Array, " b"]
    solved: Bool[Array, " b"]
    ep_return: Float[Array, " b"]
    ep_length: Float[Array, " b"]


def compute_gae(
    rewards: Float[Array, "t b"],
    values: Float[Array, "t b"],
    dones: Bool[Array, "t b"],
    last_value: Float[Array, " b"],
    gamma: float,
    gae_lambda: float,
) -> tuple[Float[Array, "t b"], Float[Array, "t b"]]:
    """GAE advantages and returns ``(A, G = A + V)`` (module docstring), by a reverse scan."""

    def step(carry, x):
        gae, next_value = carry
        r, v, d = x
        live = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * next_value * live - v
        gae = delta + gamma * gae_lambda * live * gae
        return (gae, v), gae

    _, adv = jax.lax.scan(
        step, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True
    )
    return adv, adv + values


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


def optimizer_steps(cfg: PPOConfig, num_updates: int) -> int:
    """Optimiser steps in a run of ``num_updates`` updates (the schedule's length): one per
    minibatch, ``update_epochs x num_minibatches`` per update."""
    return max(1, num_updates * cfg.update_epochs * cfg.num_minibatches)


def make_optimizer(
    cfg: PPOConfig, optim: OptimConfig, num_updates: int, lr: float | jax.Array | None = None
) -> optax.GradientTransformation:
    """``optim``'s transformation over a run of ``num_updates`` updates
    (:func:`optimizer_steps`); ``lr`` (a traced value allowed) defaults to ``optim.lr``. The
    schedule is ``lr * unit(count)``, linear in ``lr``, so a traced rate keeps its annealing."""
    return optim_lib.make(optim, optimizer_steps(cfg, num_updates), lr=lr)


def _is_empty(tree) -> bool:
    return isinstance(tree, tuple) and len(tree) == 0


def _mean_where(x, w, axis_name: str | None = None):
    """Mean of ``x`` where ``w``, over all devices of ``axis_name``."""
    w = w.astype(jnp.float32)
    num, den = jnp.sum(x * w), jnp.sum(w)
    if axis_name is not None:
        num, den = jax.lax.psum((num, den), axis_name)
    return num / jnp.maximum(den, 1.0)


class PPO:
    """PPO on ``env`` with ``network`` (see the module docstring).

    Args:
        cfg: hyper-parameters.
        env: a functional env (``jaxlab.envs`` contract; auto-reset on).
        env_params: its traced parameters.
        network: a flax module ``obs -> (distribution, value)`` accepting batched observations.
        optim: the optimiser (default :data:`OPTIM`).
        num_updates: updates in the whole run (for the learning-rate schedule).
        curriculum: level curriculum (``ued.make_curriculum``); ``None`` = the env's own resets.
        axis_name: mesh axis to average over when run per device inside ``shard_map``.
    """

    def __init__(
        self,
        cfg: PPOConfig,
        env: Environment,
        env_params: Any,
        network: nn.Module,
        *,
        optim: OptimConfig = OPTIM,
        num_updates: int = 1,
        curriculum: Curriculum | None = None,
        axis_name: str | None = None,
    ):
        if not getattr(env, "auto_reset", True):
            raise ValueError("PPO needs an auto-resetting env (auto_reset=True)")
        self.cfg = cfg
        self.optim = optim
        self.env = EpisodeStatistics(env)
        self.env_params = env_params
        self.network = network
        self.num_updates = num_updates
        self.curriculum = curriculum
        self.axis_name = axis_name
        self.optimizer = make_optimizer(cfg, optim, num_updates)
        # one observation's shapes and dtypes, as zeros: only shapes matter for the network's
        # init and the statistics, and an abstract sample never runs the env's reset (for
        # procedurally generated levels that is a whole generator and filter run at build time)
        abstract = jax.eval_shape(env.observation_space(env_params).sample, jax.random.PRNGKey(0))
        self._obs_example = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), abstract)

    # ------------------------------------------------------------------ helpers
    def _pmean(self, x):
        return jax.lax.pmean(x, self.axis_name) if self.axis_name is not None else x

    def _device_key(self, key):
        if self.axis_name is None:
            return key
        return jax.random.fold_in(key, jax.lax.axis_index(self.axis_name))

    def _local_key(self, key):
        return key if self.cfg.shard_invariant else self._device_key(key)

    def _env_keys(self, key, n: int):
        """``n`` keys for this device's envs: with ``shard_invariant`` on a mesh axis, the
        slice of the keys of *all* envs (global index order) that belongs to this device."""
        if self.axis_name is None or not self.cfg.shard_invariant:
            return jax.random.split(key, n)
        shards = jax.lax.axis_size(self.axis_name)
        keys = jax.random.split(key, n * shards)
        return jax.lax.dynamic_slice_in_dim(keys, jax.lax.axis_index(self.axis_name) * n, n)

    def hparams(self, state: PPOState) -> dict[str, Any]:
        """The state's traced hyper-parameters (the config's value for a missing key)."""
        own = hparams_from(self.cfg, self.optim)
        return {k: state.hparams.get(k, v) for k, v in own.items()}

    def _sample(self, key, pi, n: int):
        """Actions for ``n`` envs from the batched distribution ``pi`` (per-env keys when
        ``shard_invariant``)."""
        if not self.cfg.shard_invariant:
            return pi.sample(seed=key)
        return jax.vmap(lambda d, k: d.sample(seed=k))(pi, self._env_keys(key, n))

    def normalise(self, obs_stats: norm.RunningStats, obs):
        return norm.normalise(obs_stats, obs) if self.cfg.normalize_obs else obs

    def policy(self, params, obs_stats, obs):
        """``(pi, V)`` for a batch of raw observations."""
        return self.network.apply(params, self.normalise(obs_stats, obs))

    def _reset_to(self, levels):
        """Wrapped env states [B] starting episodes from ``levels`` [B]."""
        inner = self.env.unwrapped
        obs = jax.vmap(lambda s: inner.get_obs(s, self.env_params))(levels)
        zf = jnp.zeros(self._batch(levels), jnp.float32)
        zi = jnp.zeros(self._batch(levels), jnp.int32)
        state = EpisodeStatisticsState(
            levels, zf, zi, zf, zi, jnp.zeros(self._batch(levels), bool), zi
        )
        return obs, state

    @staticmethod
    def _batch(tree) -> tuple[int]:
        return (jax.tree.leaves(tree)[0].shape[0],)

    def _step_envs(self, key, env_state, action, levels):
        keys = self._env_keys(key, self._batch(env_state)[0])
        if _is_empty(levels):
            return jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(
                keys, env_state, action, self.env_params
            )
        step = lambda k, s, a, lv: self.env.step(k, s, a, self.env_params, reset_state=lv)
        return jax.vmap(step)(keys, env_state, action, levels)

    # ------------------------------------------------------------------ init
    def init(self, key: PRNGKeyArray) -> PPOState:
        """Fresh parameters, optimiser, envs and curriculum (pure)."""
        cfg = self.cfg
        k_net, k_env, k_cur, k_lv, key = jax.random.split(key, 5)
        obs_batch = jax.tree.map(lambda x: x[None], self._obs_example)
        params = self.network.init(k_net, obs_batch)
        opt_state = self.optimizer.init(params)
        curriculum, levels = (), ()
        if self.curriculum is not None and self.curriculum.forces_levels:
            curriculum = self.curriculum.init(k_cur)
            levels = jax.vmap(self.curriculum.sample_level)(jax.random.split(k_lv, cfg.num_envs))
            obs, env_state = self._reset_to(levels)
        else:
            keys = jax.random.split(k_env, cfg.num_envs)
            obs, env_state = jax.vmap(self.env.reset, in_axes=(0, None))(keys, self.env_params)
        return PPOState(
            params=params,
            opt_state=opt_state,
            obs_stats=norm.init_stats(self._obs_example),
            env_state=env_state,
            obs=obs,
            levels=levels,
            curriculum=curriculum,
            key=key,
            update=jnp.zeros((), jnp.int32),
            hparams=hparams_from(cfg, self.optim),
        )

    # ------------------------------------------------------------------ rollouts
    def rollout(self, key, params, obs_stats, env_state, obs, levels, num_steps: int):
        """``num_steps`` policy steps in every env; returns ``(env_state, obs, traj [T, B])``."""
        cfg = self.cfg

        def step(carry, k):
            env_state, obs = carry
            k_act, k_env = jax.random.split(k)
            pi, value = self.policy(params, obs_stats, obs)
            action = self._sample(k_act, pi, self._batch(obs)[0])
            log_prob = pi.log_prob(action)
            obs2, env_state2, reward, term, trunc, info = self._step_envs(
                k_env, env_state, action, levels
            )
            if cfg.bootstrap_truncation:
                _, final_v = self.policy(params, obs_stats, info["final_observation"])
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

        (env_state, obs), traj = jax.lax.scan(
            step, (env_state, obs), jax.random.split(key, num_steps)
        )
        return env_state, obs, traj

    def success_rates(self, key, params, obs_stats, levels, num_steps: int) -> Float[Array, " m"]:
        """Success rate of the stochastic policy on each of ``levels`` [M] over ``num_steps``
        steps (episodes restart from the same level); SFL's scorer."""
        obs, env_state = self._reset_to(levels)
        _, _, traj = self.rollout(key, params, obs_stats, env_state, obs, levels, num_steps)
        return success_rate(traj.done, traj.solved)

    # ------------------------------------------------------------------ the update
    def _train(self, key, params, opt_state, obs_stats, traj, advantages, targets, hparams=None):
        """``update_epochs`` epochs of ``num_minibatches`` Adam steps on one rollout ``[T, B]``;
        the optimizer and loss read the traced ``hparams`` (default: the config's values)."""
        cfg = self.cfg
        hp = hparams_from(cfg, self.optim) if hparams is None else hparams
        optimizer = make_optimizer(cfg, self.optim, self.num_updates, lr=hp["optim.lr"])
        steps, envs = traj.reward.shape
        n = steps * envs
        data = {
            "obs": traj.obs,
            "action": traj.action,
            "log_prob": traj.log_prob,
            "value": traj.value,
            "advantage": advantages,
            "target": targets,
        }

        # Advantages are standardised over the whole minibatch here (over all devices), so that
        # gradient chunks see the minibatch's statistics; the loss then leaves them as they are.
        loss_cfg = dataclasses.replace(cfg, normalize_advantages=False)

        def loss_fn(p, batch):
            pi, value = self.policy(p, obs_stats, batch["obs"])
            return ppo_loss(pi, value, batch, loss_cfg, hp)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def minibatch_grad(p, batch):
            if cfg.normalize_advantages:
                adv = batch["advantage"]
                mean = self._pmean(jnp.mean(adv))
                std = jnp.sqrt(self._pmean(jnp.mean(jnp.square(adv - mean))))
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
            grads = self._pmean(grads)
            updates, o = optimizer.update(grads, o, p)
            p = optax.apply_updates(p, updates)
            aux = dict(aux, loss=loss, grad_norm=optax.global_norm(grads))
            return (p, o), aux

        def shuffled(k):
            """The epoch's minibatches ``[num_minibatches, n / num_minibatches, ...]``."""
            if not cfg.shard_invariant:
                perm = jax.random.permutation(k, n)
                flat = lambda x: x.reshape((n,) + x.shape[2:])
                return jax.tree.map(
                    lambda x: flat(x)[perm].reshape((cfg.num_minibatches, -1) + x.shape[2:]),
                    data,
                )
            # Stratified per env: each env's steps in its own random order (its global key),
            # minibatch j = steps [j T/M, (j+1) T/M) of that order in every env.
            perms = jax.vmap(lambda kk: jax.random.permutation(kk, steps))(self._env_keys(k, envs))
            take = jax.vmap(lambda xe, pe: xe[pe], in_axes=(1, 0), out_axes=1)
            return jax.tree.map(
                lambda x: take(x, perms).reshape((cfg.num_minibatches, -1) + x.shape[2:]), data
            )

        def epoch(carry, k):
            return jax.lax.scan(minibatch, carry, shuffled(k))

        (params, opt_state), aux = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(key, cfg.update_epochs)
        )
        return params, opt_state, jax.tree.map(jnp.mean, aux)

    def update(self, state: PPOState) -> tuple[PPOState, dict[str, Array]]:
        """One PPO update (module docstring); the shared loop's ``train_step``."""
        cfg = self.cfg
        key, k_cur, k_roll, k_train = jax.random.split(state.key, 4)
        # The curriculum's state (e.g. the SFL buffer) is per device: its draws always differ.
        k_cur = self._device_key(k_cur)
        k_roll, k_train = self._local_key(k_roll), self._local_key(k_train)
        params, opt_state, obs_stats = state.params, state.opt_state, state.obs_stats
        env_state, obs, levels, cstate = state.env_state, state.obs, state.levels, state.curriculum
        metrics: dict[str, Array] = {}
        cur = self.curriculum
        aux: Any = {}
        if cur is not None and cur.forces_levels:

            def score_fn(k, lv):
                return self.success_rates(k, params, obs_stats, lv, cur.cfg.sfl.rollout_steps)

            k_next, k_obs_cur = jax.random.split(k_cur)
            levels, aux, cstate, m = cur.next_levels(k_next, cstate, state.update, score_fn)
            metrics.update(m)
            obs, env_state = self._reset_to(levels)

        env_state, obs, traj = self.rollout(
            k_roll, params, obs_stats, env_state, obs, levels, cfg.num_steps
        )
        _, last_value = self.policy(params, obs_stats, obs)
        advantages, targets = compute_gae(
            traj.reward, traj.value, traj.done, last_value, cfg.gamma, cfg.gae_lambda
        )

        train = jnp.asarray(True)
        if cur is not None and cur.forces_levels:
            stats = RolloutStats(traj.reward, traj.done, traj.solved, traj.value, advantages)
            cstate, train, m = cur.observe(k_obs_cur, cstate, aux, levels, stats)
            metrics.update(m)

        hp = self.hparams(state)

        def do_train(_):
            return self._train(k_train, params, opt_state, obs_stats, traj, advantages, targets, hp)

        def skip(_):
            zero = jnp.zeros((), jnp.float32)
            names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "loss")
            return params, opt_state, dict.fromkeys(names + ("grad_norm",), zero)

        if cur is not None and cur.kind in ("plr", "accel"):
            params, opt_state, losses = jax.lax.cond(train, do_train, skip, None)
        else:
            params, opt_state, losses = do_train(None)

        if cfg.normalize_obs:
            obs_stats = norm.update_stats(obs_stats, traj.obs, self.axis_name)

        metrics.update(losses)
        metrics.update(
            {
                "episode_return": _mean_where(traj.ep_return, traj.done, self.axis_name),
                "episode_length": _mean_where(traj.ep_length, traj.done, self.axis_name),
                "solve_rate": _mean_where(traj.solved, traj.done, self.axis_name),
                "episodes": jnp.sum(traj.done).astype(jnp.float32),
                "value": jnp.mean(traj.value),
                "reward": jnp.mean(traj.reward),
            }
        )
        metrics = self._pmean(metrics)
        if self.axis_name is not None:
            metrics["episodes"] = metrics["episodes"] * jax.lax.psum(1, self.axis_name)
        new_state = PPOState(
            params=params,
            opt_state=opt_state,
            obs_stats=obs_stats,
            env_state=env_state,
            obs=obs,
            levels=levels,
            curriculum=cstate,
            key=key,
            update=state.update + 1,
            hparams=state.hparams,
        )
        return new_state, metrics

    # ------------------------------------------------------------------ the whole run
    def make_train(self, num_updates: int | None = None) -> Callable[[PRNGKeyArray], Any]:
        """``train(key) -> (final_state, metrics [num_updates])``, one pure function."""
        n = self.num_updates if num_updates is None else num_updates

        def train(key):
            state = self.init(key)
            return jax.lax.scan(lambda s, _: self.update(s), state, None, length=n)

        return train


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
    ``jax.vmap`` it over keys to train several seeds in one call."""
    ppo = PPO(
        cfg, env, env_params, network, optim=optim, num_updates=num_updates, curriculum=curriculum
    )
    return ppo.make_train()

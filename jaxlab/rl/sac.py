"""Soft actor-critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") as one pure program.

``make_train(cfg, off_policy, optim, iterations)(key)`` runs ``iterations`` iterations of
``off_policy.num_envs`` vectorised envs (``jaxlab.rl.off_policy``) through a single ``lax.scan``;
each iteration (``make_parts(...).iteration``) is

1. act: ``a ~ pi(.|s)`` (uniform random actions for the first ``learning_starts`` iterations),
   step every env (auto-reset), add ``(s, a, r, s', d)`` to the on-device replay buffer
   (``jaxlab.rl.replay``; ``s'`` is ``info["final_observation"]``, ``d = 1 - terminated``, so a
   time-limit truncation bootstraps);
2. learn (once the buffer holds ``learning_starts * num_envs`` items): ``updates_per_iteration``
   gradient steps, each on a fresh uniform batch:

   * critics (eq. 5, twin Q with clipped double-Q): ``y = r + gamma d (min_i Qbar_i(s', a') -
     alpha log pi(a'|s'))`` with ``a' ~ pi(.|s')``; loss ``sum_i mean (Q_i(s, a) - y)^2``;
   * actor (eq. 7/9): ``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, ``a ~ pi(.|s)``
     reparameterised through the tanh-squashed Gaussian (``rl.squashed_gaussian``);
   * temperature (eq. 18): ``-mean(log alpha * (log pi(a|s) + target_entropy))``,
     ``target_entropy = target_entropy_per_dim * dim(A)`` (default ``-dim(A)``);
   * targets (Polyak): ``theta_bar <- (1 - tau) theta_bar + tau theta``.

Everything is a pure function of the key, so seeds vmap (``jax.vmap(make_train(...))(keys)``).
``SACState`` is a pytree of arrays (networks, optimiser states, replay buffer, env states, key,
and the traced hyper-parameters ``hparams``: the learning rates and the target entropy), so the
shared checkpoint layer saves it whole, a resumed run is bit-identical and a sweep vmaps over the
rates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig, make_box_env
from jaxlab.rl.replay import ReplayConfig, make_replay
from jaxlab.rl.squashed_gaussian import SquashedGaussianHead, sample_and_log_prob


@dataclasses.dataclass(frozen=True)
class SACOptim:
    """SAC's optimisers, one per role (Adam at 3e-4 each, as in the paper).

    Attributes:
        actor: the policy's.
        critic: the twin critics'.
        alpha: the temperature's (``log alpha``).
    """

    actor: OptimConfig = OptimConfig(name="adam", lr=3e-4)
    critic: OptimConfig = OptimConfig(name="adam", lr=3e-4)
    alpha: OptimConfig = OptimConfig(name="adam", lr=3e-4)


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC's own hyper-parameters (hashable); the env, replay and update schedule are a
    ``jaxlab.rl.off_policy.OffPolicyConfig`` and the optimisers a :class:`SACOptim`.

    Attributes:
        hidden: MLP widths of actor and critics.
        gamma: discount, in [0, 1].
        tau: Polyak rate, in (0, 1].
        init_alpha: initial temperature (> 0).
        target_entropy_per_dim: the temperature's target entropy per action dimension (target
            ``= target_entropy_per_dim * dim(A)``; -1 is the paper's ``-dim(A)``); traced.
    """

    hidden: tuple[int, ...] = (256, 256)
    gamma: float = 0.99
    tau: float = 5e-3
    init_alpha: float = 1.0
    target_entropy_per_dim: float = -1.0

    def __post_init__(self):
        if not self.hidden or any(
            isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in self.hidden
        ):
            raise ConfigError("hidden", self.hidden, "a non-empty list of ints >= 1")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError("gamma", self.gamma, "a float in [0, 1]")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError("tau", self.tau, "a float in (0, 1]")
        if not self.init_alpha > 0:
            raise ConfigError("init_alpha", self.init_alpha, "a float > 0")


#: the traced hyper-parameters of a SAC run, as the ``sac`` recipe's dotted keys (the optimisers
#: at ``optim``, :class:`SACConfig` at ``sac``)
TRACED: tuple[str, ...] = (
    "optim.actor.lr",
    "optim.critic.lr",
    "optim.alpha.lr",
    "sac.target_entropy_per_dim",
)


def hparams(cfg: SACConfig, optim: SACOptim) -> dict[str, Array]:
    """The values of :data:`TRACED` for ``state.hparams`` (float32 scalars)."""
    return {
        "optim.actor.lr": jnp.float32(optim.actor.lr),
        "optim.critic.lr": jnp.float32(optim.critic.lr),
        "optim.alpha.lr": jnp.float32(optim.alpha.lr),
        "sac.target_entropy_per_dim": jnp.float32(cfg.target_entropy_per_dim),
    }


class MLP(nn.Module):
    """ReLU MLP torso."""

    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        for i, w in enumerate(self.hidden):
            x = nn.relu(nn.Dense(w, name=f"dense_{i}")(x))
        return x


class Actor(nn.Module):
    """``obs -> tanh-squashed Gaussian`` over the action box ``[-1, 1]^d``."""

    action_dim: int
    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, obs):
        return SquashedGaussianHead(self.action_dim)(MLP(self.hidden)(obs))


class TwinCritic(nn.Module):
    """Two independent ``Q(s, a)`` MLPs: ``[..., 2]``."""

    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs, action], axis=-1)
        qs = [nn.Dense(1, name=f"q{i}_out")(MLP(self.hidden, name=f"q{i}")(x)) for i in range(2)]
        return jnp.concatenate(qs, axis=-1)


@struct.dataclass
class SACState:
    """The whole training state (a pytree of arrays)."""

    actor: Any
    critic: Any
    target_critic: Any
    log_alpha: Float[Array, "*s"]
    actor_opt: Any
    critic_opt: Any
    alpha_opt: Any
    buffer: Any
    env_state: Any
    obs: Float[Array, "*s n o"]
    episode_return: Float[Array, "*s n"]
    last_return: Float[Array, "*s n"]
    key: PRNGKeyArray
    iteration: Any
    hparams: dict


@dataclasses.dataclass(frozen=True)
class SACLearner:
    """SAC's gradient steps on any state pytree with the fields ``actor``, ``critic``,
    ``target_critic``, ``log_alpha``, ``actor_opt``, ``critic_opt``, ``alpha_opt`` and
    ``hparams`` (a ``flax.struct`` dataclass, updated with ``.replace``): ``SACState`` and the
    skill-discovery states of ``jaxlab.rl.skills`` share these steps.

    ``critic_step`` is eq. 5 with clipped double-Q and the Polyak target update; ``actor_step``
    is eq. 7 against any ``q_fn(critic_params, obs, action) -> Q [b]`` (default ``min_i Q_i``;
    CSF passes ``min_i psi_i^T z``) followed by the temperature step (eq. 18). The learning
    rates (``optim.<role>.lr``) and the target entropy per action dimension (``entropy_key``)
    are read from ``state.hparams``, so they may be traced.
    """

    actor: nn.Module
    critic: nn.Module
    optim: Any  # SACOptim, or any roles dataclass with actor, critic and alpha OptimConfigs
    gamma: float
    tau: float
    act_dim: int
    entropy_key: str = "sac.target_entropy_per_dim"
    total_updates: int = 1

    def init(self, k_actor: PRNGKeyArray, k_critic: PRNGKeyArray, obs_dim: int, init_alpha: float):
        """The learner's fields of a fresh state: ``actor``, ``critic``, ``target_critic`` (=
        ``critic``), ``log_alpha = log(init_alpha)`` and the three optimiser states."""
        dummy_o, dummy_a = jnp.zeros((1, obs_dim)), jnp.zeros((1, self.act_dim))
        actor_p = self.actor.init(k_actor, dummy_o)
        critic_p = self.critic.init(k_critic, dummy_o, dummy_a)
        log_alpha = jnp.log(jnp.float32(init_alpha))
        opt = {r: optim_lib.make(getattr(self.optim, r), 1) for r in ("actor", "critic", "alpha")}
        return {
            "actor": actor_p,
            "critic": critic_p,
            "target_critic": critic_p,
            "log_alpha": log_alpha,
            "actor_opt": opt["actor"].init(actor_p),
            "critic_opt": opt["critic"].init(critic_p),
            "alpha_opt": opt["alpha"].init(log_alpha),
        }

    def tx(self, role: str, state: Any) -> optax.GradientTransformation:
        """The optimiser of ``role`` (``actor``, ``critic`` or ``alpha``) at the state's rates."""
        cfg = getattr(self.optim, role)
        return optim_lib.from_hparams(cfg, self.total_updates, state.hparams, f"optim.{role}")

    def critic_step(self, state: Any, batch: dict, key: PRNGKeyArray) -> tuple[Any, dict]:
        """``batch``: ``obs [b o]``, ``action [b a]``, ``reward [b]``, ``next_obs [b o]``,
        ``discount [b]``; ``y = r + gamma d (min_i Qbar_i(s', a') - alpha log pi(a'|s'))``."""
        alpha = jnp.exp(state.log_alpha)
        next_a, next_logp = sample_and_log_prob(
            self.actor.apply(state.actor, batch["next_obs"]), key
        )
        q_next = self.critic.apply(state.target_critic, batch["next_obs"], next_a).min(-1)
        target = batch["reward"] + self.gamma * batch["discount"] * (q_next - alpha * next_logp)
        target = jax.lax.stop_gradient(target)

        def critic_loss(p):
            q = self.critic.apply(p, batch["obs"], batch["action"])
            return jnp.mean(jnp.sum((q - target[:, None]) ** 2, -1)), q.mean()

        (c_loss, q_mean), c_grad = jax.value_and_grad(critic_loss, has_aux=True)(state.critic)
        return self.apply_critic_grad(state, c_grad), {"critic_loss": c_loss, "q": q_mean}

    def apply_critic_grad(self, state: Any, grad: Any) -> Any:
        """Adam step on the critics, then the Polyak update of their targets."""
        upd, critic_opt = self.tx("critic", state).update(grad, state.critic_opt, state.critic)
        critic_p = optax.apply_updates(state.critic, upd)
        target_p = optax.incremental_update(critic_p, state.target_critic, self.tau)
        return state.replace(critic=critic_p, target_critic=target_p, critic_opt=critic_opt)

    def actor_step(
        self,
        state: Any,
        obs: Float[Array, "b o"],
        key: PRNGKeyArray,
        q_fn: Callable[[Any, Array, Array], Array] | None = None,
    ) -> tuple[Any, dict]:
        """Actor loss ``mean(alpha log pi(a|s) - Q(s, a))`` then the temperature loss
        ``-mean(log alpha (log pi + target_entropy))``."""
        if q_fn is None:

            def q_fn(p, o, a):
                return self.critic.apply(p, o, a).min(-1)

        alpha = jnp.exp(state.log_alpha)

        def actor_loss(p):
            a, logp = sample_and_log_prob(self.actor.apply(p, obs), key)
            return jnp.mean(alpha * logp - q_fn(state.critic, obs, a)), logp

        (a_loss, logp), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(state.actor)
        a_upd, actor_opt = self.tx("actor", state).update(a_grad, state.actor_opt, state.actor)
        actor_p = optax.apply_updates(state.actor, a_upd)
        logp = jax.lax.stop_gradient(logp)

        target_entropy = state.hparams[self.entropy_key] * self.act_dim

        def alpha_loss(log_alpha):
            return -jnp.mean(log_alpha * (logp + target_entropy))

        al_grad = jax.grad(alpha_loss)(state.log_alpha)
        alpha_tx = self.tx("alpha", state)
        al_upd, alpha_opt = alpha_tx.update(al_grad, state.alpha_opt, state.log_alpha)
        log_alpha = optax.apply_updates(state.log_alpha, al_upd)
        state = state.replace(
            actor=actor_p, log_alpha=log_alpha, actor_opt=actor_opt, alpha_opt=alpha_opt
        )
        metrics = {"actor_loss": a_loss, "alpha": jnp.exp(log_alpha), "entropy": -logp.mean()}
        return state, metrics


@dataclasses.dataclass(frozen=True)
class SACParts:
    """The compiled-program pieces: ``init(key) -> SACState``, ``iteration(state) -> (state,
    metrics)``, one gradient step ``update(state, key) -> (state, metrics)`` (needs a buffer
    that ``can_sample``), the env and networks."""

    init: Callable[[PRNGKeyArray], SACState]
    iteration: Callable[[SACState], tuple[SACState, dict]]
    update: Callable[[SACState, PRNGKeyArray], tuple[SACState, dict]]
    env: Any
    env_params: Any
    actor: Actor
    critic: TwinCritic
    replay: Any


def _make_init(
    cfg: SACConfig,
    optim: SACOptim,
    learner: SACLearner,
    replay: Any,
    env: Any,
    env_params: Any,
    n: int,
    obs_dim: int,
    act_dim: int,
) -> Callable[[PRNGKeyArray], SACState]:
    """``init(key) -> SACState``: networks and optimiser states, an empty buffer, ``n`` reset
    envs."""

    def init(key: PRNGKeyArray) -> SACState:
        k_a, k_c, k_env, k_run = jax.random.split(key, 4)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_env, n), env_params
        )
        item = {
            "obs": jnp.zeros((obs_dim,)),
            "action": jnp.zeros((act_dim,)),
            "reward": jnp.zeros(()),
            "next_obs": jnp.zeros((obs_dim,)),
            "discount": jnp.zeros(()),
        }
        return SACState(
            **learner.init(k_a, k_c, obs_dim, cfg.init_alpha),
            buffer=replay.init(item),
            env_state=env_state,
            obs=obs.reshape(n, obs_dim).astype(jnp.float32),
            episode_return=jnp.zeros((n,)),
            last_return=jnp.zeros((n,)),
            key=k_run,
            iteration=jnp.int32(0),
            hparams=hparams(cfg, optim),
        )

    return init


def make_parts(
    cfg: SACConfig,
    off_policy: OffPolicyConfig,
    optim: SACOptim,
    *,
    env_options: Mapping[str, Any] | None = None,
    iterations: int = 1,
    spread: Callable[[Any], Any] | None = None,
) -> SACParts:
    """Build SAC's ``init`` and one ``iteration`` (act + add + learn) on ``off_policy.env`` (made
    with ``env_options``); ``iterations`` (the run's length) is the horizon of decaying learning
    rate schedules; ``spread`` (data parallel) constrains every sampled batch's leading axis."""
    off = off_policy
    env, env_params, obs_dim, act_dim = make_box_env(off.env, env_options or {})
    replay = make_replay(
        ReplayConfig(off.buffer_size, off.batch_size, max(off.batch_size, off.num_envs))
    )
    actor, critic = Actor(act_dim, tuple(cfg.hidden)), TwinCritic(tuple(cfg.hidden))
    learner = SACLearner(
        actor,
        critic,
        optim,
        float(cfg.gamma),
        float(cfg.tau),
        act_dim,
        total_updates=max(1, iterations - off.learning_starts) * off.updates_per_iteration,
    )
    n = off.num_envs
    init = _make_init(cfg, optim, learner, replay, env, env_params, n, obs_dim, act_dim)

    def update(state: SACState, key: PRNGKeyArray) -> tuple[SACState, dict]:
        """One gradient step of critics, actor, temperature and targets."""
        k_sample, k_critic, k_actor = jax.random.split(key, 3)
        b = replay.sample(state.buffer, k_sample).experience
        if spread is not None:  # data parallel: the sampled batch split over the data axes
            b = spread(b)
        state, c_metrics = learner.critic_step(state, b, k_critic)
        state, a_metrics = learner.actor_step(state, b["obs"], k_actor)
        return state, {**c_metrics, **a_metrics}

    zero_metrics = {
        k: jnp.float32(0) for k in ("critic_loss", "actor_loss", "alpha", "entropy", "q")
    }

    def iteration(state: SACState) -> tuple[SACState, dict]:
        key, k_act, k_rand, k_step, k_learn = jax.random.split(state.key, 5)
        policy_a, _ = sample_and_log_prob(actor.apply(state.actor, state.obs), k_act)
        random_a = jax.random.uniform(k_rand, (n, act_dim), minval=-1.0, maxval=1.0)
        warm = state.iteration < off.learning_starts
        action = jnp.where(warm, random_a, policy_a)
        obs, env_state, reward, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, n), state.env_state, action, env_params
        )
        transition = {
            "obs": state.obs,
            "action": action,
            "reward": reward.astype(jnp.float32),
            "next_obs": info["final_observation"].reshape(n, obs_dim).astype(jnp.float32),
            "discount": 1.0 - term.astype(jnp.float32),
        }
        buffer = replay.add(state.buffer, transition)
        done = term | trunc
        ep_ret = state.episode_return + reward
        state = state.replace(
            buffer=buffer,
            env_state=env_state,
            obs=obs.reshape(n, obs_dim).astype(jnp.float32),
            episode_return=jnp.where(done, 0.0, ep_ret),
            last_return=jnp.where(done, ep_ret, state.last_return),
            key=key,
            iteration=state.iteration + 1,
        )

        def learn(s):
            keys = jax.random.split(k_learn, off.updates_per_iteration)
            s, m = jax.lax.scan(update, s, keys)
            return s, jax.tree.map(lambda x: x[-1], m)

        can = jnp.logical_and(~warm, replay.can_sample(buffer))
        state, metrics = jax.lax.cond(can, learn, lambda s: (s, zero_metrics), state)
        metrics = {**metrics, "episode_return": state.last_return.mean(), "learning": can}
        return state, metrics

    return SACParts(init, iteration, update, env, env_params, actor, critic, replay)


def make_train(
    cfg: SACConfig,
    off_policy: OffPolicyConfig,
    optim: SACOptim,
    iterations: int,
    env_options: Mapping[str, Any] | None = None,
) -> Callable[[PRNGKeyArray], tuple[SACState, dict]]:
    """``train(key) -> (final_state, metrics [iterations])``: the whole run, pure and vmappable
    over keys."""
    parts = make_parts(cfg, off_policy, optim, env_options=env_options, iterations=iterations)

    def train(key: PRNGKeyArray) -> tuple[SACState, dict]:
        def body(state, _):
            return parts.iteration(state)

        return jax.lax.scan(body, parts.init(key), None, length=iterations)

    return train


def make_evaluate(parts: SACParts, episodes: int, steps: int):
    """``evaluate(state, key) -> {"return", "success"}``: ``episodes`` rollouts of ``steps`` env
    steps (one episode each) with the deterministic policy ``a = tanh(mu(s))``; ``return`` is the
    mean episode return and ``success`` the fraction whose last step has ``info["success"]``."""
    env, env_params, actor = parts.env, parts.env_params, parts.actor

    def one(key, actor_params):
        k_reset, k_steps = jax.random.split(key)
        obs, s = env.reset(k_reset, env_params)

        def body(carry, k):
            obs, s = carry
            a = jnp.tanh(actor.apply(actor_params, obs.reshape(1, -1)).distribution.mean()[0])
            obs, s, r, _, _, info = env.step(k, s, a, env_params)
            return (obs, s), (r, info.get("success", jnp.asarray(False)))

        _, (r, success) = jax.lax.scan(body, (obs, s), jax.random.split(k_steps, steps))
        return r.sum(), success[-1]

    def evaluate(state: SACState, key: PRNGKeyArray) -> dict[str, Array]:
        ret, success = jax.vmap(one, in_axes=(0, None))(
            jax.random.split(key, episodes), state.actor
        )
        return {"return": ret.mean(), "success": success.astype(jnp.float32).mean()}

    return evaluate

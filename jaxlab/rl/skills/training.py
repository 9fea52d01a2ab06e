"""The acting and replay loop shared by METRA and CSF: skill-conditioned SAC-style agents.

One iteration (``SkillParts.iteration``) of ``num_envs`` vectorised envs:

1. act: ``a ~ pi(.|[s, z])`` with each env's current skill ``z`` (uniform random actions for the
   first ``learning_starts`` iterations); step every env (auto-reset) and add ``(s, z, a, s')``
   to the on-device replay buffer (``jaxlab.rl.replay``; ``s'`` is
   ``info["final_observation"]``). No reward is stored: both methods relabel every sampled batch
   with the current ``phi``.
2. a finished episode draws a fresh skill for its env: ``z ~ N(0, I_d)`` normalised to the unit
   sphere (``sample_skills``), so ``z`` is constant along a trajectory;
3. learn (once the buffer can be sampled): ``updates_per_iteration`` gradient steps of the
   method's ``update(state, batch, key)`` (``metra.make_update``, ``csf.make_update``) on fresh
   uniform batches.

Episodes have no terminal states (fixed horizon, "dones off" as in the paper), so every
transition bootstraps. ``SkillState`` is a pytree of arrays (networks, optimiser states, the
METRA dual variable, the replay buffer, env states, skills, key): the shared checkpoint layer
saves it whole and a resumed run is bit-identical; ``make_train(cfg)(key)`` is pure and
vmappable over seeds.
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
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.envs.spaces import Box
from jaxlab.rl.replay import ReplayConfig, make_replay
from jaxlab.rl.sac import MLP, Actor, SACLearner
from jaxlab.rl.squashed_gaussian import sample_and_log_prob

METHODS = ("metra", "csf")


@dataclasses.dataclass(frozen=True)
class SkillConfig:
    """Static configuration of a skill-discovery run (hashable).

    Attributes:
        method: ``"metra"`` or ``"csf"``.
        env, env_options: registered env (``Box`` actions in ``[-1, 1]``) and its options.
        skill_dim: ``d``, the dimension of ``z`` and ``phi(s)`` (paper: 2 for Ant).
        num_envs, total_env_steps: parallel envs and env steps over all of them.
        buffer_size, batch_size, learning_starts, updates_per_iteration: replay and schedule.
        hidden: MLP widths of actor, critics and ``phi`` (paper: 1024-unit MLPs).
        lr: Adam rate of every network, the temperature and the dual variable (paper: 1e-4).
        gamma, tau, init_alpha, target_entropy: SAC's (``None`` -> ``-dim(A)``).
        dual_lam_init, dual_slack: METRA's ``lambda_0 = 30`` and ``epsilon = 1e-3``.
        num_negatives, infonce_coef: CSF's 256 negatives from the prior and coefficient 5.
    """

    method: str = "metra"
    env: str = "point-mass-2d"
    env_options: tuple[tuple[str, Any], ...] = ()
    skill_dim: int = 2
    num_envs: int = 4
    total_env_steps: int = 4000
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 25
    updates_per_iteration: int = 1
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-4
    gamma: float = 0.99
    tau: float = 5e-3
    init_alpha: float = 0.1
    target_entropy: float | None = None
    dual_lam_init: float = 30.0
    dual_slack: float = 1e-3
    num_negatives: int = 256
    infonce_coef: float = 5.0

    @property
    def num_iterations(self) -> int:
        return self.total_env_steps // self.num_envs


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def check_config(cfg: SkillConfig) -> None:
    """Raise ``ConfigError`` naming the first bad field."""
    if cfg.method not in METHODS:
        raise ConfigError("method", cfg.method, f"one of {METHODS}")
    for f in (
        "skill_dim",
        "num_envs",
        "total_env_steps",
        "batch_size",
        "updates_per_iteration",
        "num_negatives",
    ):
        v = getattr(cfg, f)
        if not _is_int(v) or v < 1:
            raise ConfigError(f, v, "an int >= 1")
    if cfg.total_env_steps < cfg.num_envs:
        raise ConfigError("total_env_steps", cfg.total_env_steps, f">= num_envs ({cfg.num_envs})")
    if not _is_int(cfg.buffer_size) or cfg.buffer_size < max(cfg.batch_size, cfg.num_envs):
        raise ConfigError(
            "buffer_size", cfg.buffer_size, f">= batch_size ({cfg.batch_size}) and >= num_envs"
        )
    if not 0.0 <= cfg.gamma < 1.0:
        raise ConfigError("gamma", cfg.gamma, "a float in [0, 1) (no terminal states)")
    if not 0.0 < cfg.tau <= 1.0:
        raise ConfigError("tau", cfg.tau, "a float in (0, 1]")
    for f in ("init_alpha", "dual_lam_init", "lr"):
        if not getattr(cfg, f) > 0:
            raise ConfigError(f, getattr(cfg, f), "a float > 0")
    if not cfg.dual_slack >= 0:
        raise ConfigError("dual_slack", cfg.dual_slack, "a float >= 0")


def sample_skills(key: PRNGKeyArray, n: int, dim: int) -> Float[Array, "n d"]:
    """``n`` skills from the prior: ``z = u / ||u||``, ``u ~ N(0, I_d)`` (uniform on the sphere)."""
    if not _is_int(dim) or dim < 1:
        raise ConfigError("skill_dim", dim, "an int >= 1")
    u = jax.random.normal(key, (n, dim))
    return u / jnp.linalg.norm(u, axis=-1, keepdims=True)


class Phi(nn.Module):
    """The representation ``phi: s -> R^d`` (an MLP)."""

    dim: int
    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, obs: Float[Array, "*b o"]) -> Float[Array, "*b d"]:
        return nn.Dense(self.dim, name="out")(MLP(self.hidden)(obs))


@struct.dataclass
class SkillState:
    """The whole training state of METRA or CSF (a pytree of arrays). ``critic`` is SAC's twin
    Q (METRA) or the twin successor features (CSF); ``log_dual_lam``/``dual_opt`` are METRA's
    dual variable (unused by CSF). Seeds vmapped: a leading ``s`` axis on every leaf."""

    actor: Any
    critic: Any
    target_critic: Any
    log_alpha: Float[Array, "*s"]
    actor_opt: Any
    critic_opt: Any
    alpha_opt: Any
    phi: Any
    phi_opt: Any
    log_dual_lam: Float[Array, "*s"]
    dual_opt: Any
    buffer: Any
    env_state: Any
    obs: Float[Array, "*s n o"]
    skill: Float[Array, "*s n d"]
    key: PRNGKeyArray
    iteration: Any


@dataclasses.dataclass(frozen=True)
class Nets:
    """The networks and optimisers a method's ``update`` needs."""

    actor: Actor
    critic: nn.Module
    phi: Phi
    learner: SACLearner
    phi_tx: Any
    dual_tx: Any
    obs_dim: int
    act_dim: int


@dataclasses.dataclass(frozen=True)
class SkillParts:
    """``init(key) -> SkillState``; ``iteration(state) -> (state, metrics)``; ``update(state,
    key)`` (one gradient step on a sampled batch); the env and the networks."""

    init: Callable[[PRNGKeyArray], SkillState]
    iteration: Callable[[SkillState], tuple[SkillState, dict]]
    update: Callable[[SkillState, PRNGKeyArray], tuple[SkillState, dict]]
    env: Any
    env_params: Any
    nets: Nets
    cfg: SkillConfig


def policy_input(obs: Float[Array, "*b o"], skill: Float[Array, "*b d"]) -> Float[Array, "*b od"]:
    """The skill-conditioned policy's input ``[s, z]``."""
    return jnp.concatenate([obs, skill], axis=-1)


def make_env(cfg: SkillConfig) -> tuple[Any, Any, int, int]:
    """``(env, params, obs_dim, act_dim)``; refuses envs without ``[-1, 1]`` Box actions."""
    env, env_params = envs.make(cfg.env, **dict(cfg.env_options))
    space = env.action_space(env_params)
    if not isinstance(space, Box) or len(space.shape) != 1:
        raise ConfigError("env", cfg.env, "an env with a 1-D Box action space")
    if not (np.all(space.low == -1.0) and np.all(space.high == 1.0)):
        raise ConfigError("env", cfg.env, "an env whose actions lie in [-1, 1] (tanh-squashed)")
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    return env, env_params, obs_dim, int(space.shape[0])


def make_skill_parts(
    cfg: SkillConfig,
    critic: nn.Module,
    make_update: Callable[[SkillConfig, Nets], Callable[[SkillState, dict, PRNGKeyArray], Any]],
    spread: Callable[[Any], Any] | None = None,
) -> SkillParts:
    """The shared loop around a method's ``make_update(cfg, nets) -> update(state, batch, key)``.

    ``critic`` is initialised as ``critic.init(key, [s, z], a)``; ``spread`` (data parallel)
    constrains every sampled batch's leading axis to the mesh's data axes.
    """
    check_config(cfg)
    env, env_params, obs_dim, act_dim = make_env(cfg)
    d, n = cfg.skill_dim, cfg.num_envs
    target_entropy = -float(act_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
    replay = make_replay(
        ReplayConfig(cfg.buffer_size, cfg.batch_size, max(cfg.batch_size, cfg.num_envs))
    )
    tx = optax.adam(cfg.lr)
    actor = Actor(act_dim, tuple(cfg.hidden))
    learner = SACLearner(
        actor, critic, tx, tx, tx, float(cfg.gamma), float(cfg.tau), target_entropy
    )
    nets = Nets(actor, critic, Phi(d, tuple(cfg.hidden)), learner, tx, tx, obs_dim, act_dim)
    method_update = make_update(cfg, nets)

    def init(key: PRNGKeyArray) -> SkillState:
        k_a, k_c, k_p, k_env, k_z, k_run = jax.random.split(key, 6)
        dummy_o, dummy_a = jnp.zeros((1, obs_dim + d)), jnp.zeros((1, act_dim))
        actor_p = actor.init(k_a, dummy_o)
        critic_p = critic.init(k_c, dummy_o, dummy_a)
        phi_p = nets.phi.init(k_p, jnp.zeros((1, obs_dim)))
        log_alpha = jnp.log(jnp.float32(cfg.init_alpha))
        log_lam = jnp.log(jnp.float32(cfg.dual_lam_init))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_env, n), env_params
        )
        item = {
            "obs": jnp.zeros((obs_dim,)),
            "skill": jnp.zeros((d,)),
            "action": jnp.zeros((act_dim,)),
            "next_obs": jnp.zeros((obs_dim,)),
        }
        return SkillState(
            actor=actor_p,
            critic=critic_p,
            target_critic=critic_p,
            log_alpha=log_alpha,
            actor_opt=tx.init(actor_p),
            critic_opt=tx.init(critic_p),
            alpha_opt=tx.init(log_alpha),
            phi=phi_p,
            phi_opt=tx.init(phi_p),
            log_dual_lam=log_lam,
            dual_opt=tx.init(log_lam),
            buffer=replay.init(item),
            env_state=env_state,
            obs=obs.reshape(n, obs_dim).astype(jnp.float32),
            skill=sample_skills(k_z, n, d),
            key=k_run,
            iteration=jnp.int32(0),
        )

    def update(state: SkillState, key: PRNGKeyArray) -> tuple[SkillState, dict]:
        k_sample, k_update = jax.random.split(key)
        batch = replay.sample(state.buffer, k_sample).experience
        if spread is not None:
            batch = spread(batch)
        return method_update(state, batch, k_update)

    def iteration(state: SkillState) -> tuple[SkillState, dict]:
        key, k_act, k_rand, k_step, k_z, k_learn = jax.random.split(state.key, 6)
        pi = actor.apply(state.actor, policy_input(state.obs, state.skill))
        policy_a, _ = sample_and_log_prob(pi, k_act)
        random_a = jax.random.uniform(k_rand, (n, act_dim), minval=-1.0, maxval=1.0)
        warm = state.iteration < cfg.learning_starts
        action = jnp.where(warm, random_a, policy_a)
        obs, env_state, _, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, n), state.env_state, action, env_params
        )
        transition = {
            "obs": state.obs,
            "skill": state.skill,
            "action": action,
            "next_obs": info["final_observation"].reshape(n, obs_dim).astype(jnp.float32),
        }
        buffer = replay.add(state.buffer, transition)
        done = (term | trunc)[:, None]
        skill = jnp.where(done, sample_skills(k_z, n, d), state.skill)
        state = state.replace(
            buffer=buffer,
            env_state=env_state,
            obs=obs.reshape(n, obs_dim).astype(jnp.float32),
            skill=skill,
            key=key,
            iteration=state.iteration + 1,
        )

        def learn(s):
            s, m = jax.lax.scan(update, s, jax.random.split(k_learn, cfg.updates_per_iteration))
            return s, jax.tree.map(lambda x: x[-1], m)

        def skip(s):
            return s, jax.tree.map(jnp.zeros_like, zero_metrics)

        can = jnp.logical_and(~warm, replay.can_sample(buffer))
        state, metrics = jax.lax.cond(can, learn, skip, state)
        return state, {**metrics, "learning": can}

    abstract = jax.eval_shape(lambda k: update(init(k), k)[1], jax.random.key(0))
    zero_metrics = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), abstract)
    return SkillParts(init, iteration, update, env, env_params, nets, cfg)


def make_train(parts: SkillParts) -> Callable[[PRNGKeyArray], tuple[SkillState, dict]]:
    """``train(key) -> (final_state, metrics [num_iterations])``: the whole run as one scan,
    pure and vmappable over keys."""

    def train(key: PRNGKeyArray) -> tuple[SkillState, dict]:
        def body(state, _):
            return parts.iteration(state)

        return jax.lax.scan(body, parts.init(key), None, length=parts.cfg.num_iterations)

    return train

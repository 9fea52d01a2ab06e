"""The acting and replay loop shared by METRA and CSF: skill-conditioned SAC-style agents.

One iteration (``SkillParts.iteration``) of ``off_policy.num_envs`` vectorised envs
(``jaxlab.rl.off_policy``):

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
METRA dual variable, the replay buffer, env states, skills, key and ``hparams``, the traced
learning rates and method scalars): the shared checkpoint layer saves it whole and a resumed run
is bit-identical; ``make_train(parts, iterations)(key)`` is pure and vmappable over seeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig, make_box_env
from jaxlab.rl.replay import ReplayConfig, make_replay
from jaxlab.rl.sac import MLP, Actor, SACLearner
from jaxlab.rl.squashed_gaussian import sample_and_log_prob


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class SkillOptim:
    """The optimisers of a skill-discovery run, one per role (Adam at 1e-4 each, the paper's).

    Attributes:
        actor, critic, alpha: SAC's policy, twin critics (CSF: successor features) and
            temperature.
        phi: the representation ``phi``.
        dual: METRA's dual variable ``log lambda`` (unused by CSF).
    """

    actor: OptimConfig = OptimConfig(name="adam", lr=1e-4)
    critic: OptimConfig = OptimConfig(name="adam", lr=1e-4)
    alpha: OptimConfig = OptimConfig(name="adam", lr=1e-4)
    phi: OptimConfig = OptimConfig(name="adam", lr=1e-4)
    dual: OptimConfig = OptimConfig(name="adam", lr=1e-4)


@dataclasses.dataclass(frozen=True)
class SkillConfig:
    """The method's own hyper-parameters (hashable); the env, replay and update schedule are a
    ``jaxlab.rl.off_policy.OffPolicyConfig`` and the optimisers a :class:`SkillOptim`.

    Attributes:
        skill_dim: ``d``, the dimension of ``z`` and ``phi(s)`` (paper: 2 for Ant).
        hidden: MLP widths of actor, critics and ``phi`` (paper: 1024-unit MLPs).
        gamma: discount, in [0, 1) (no terminal states).
        tau: Polyak rate, in (0, 1].
        init_alpha: SAC's initial temperature (> 0).
        target_entropy_per_dim: SAC's target entropy per action dimension (-1: ``-dim(A)``).
        dual_lam_init, dual_slack: METRA's ``lambda_0 = 30`` (> 0) and ``epsilon = 1e-3``
            (>= 0); ``dual_slack`` is traced.
        num_negatives, infonce_coef: CSF's 256 negatives from the prior and coefficient 5
            (>= 0); ``infonce_coef`` is traced.
    """

    skill_dim: int = 2
    hidden: tuple[int, ...] = (256, 256)
    gamma: float = 0.99
    tau: float = 5e-3
    init_alpha: float = 0.1
    target_entropy_per_dim: float = -1.0
    dual_lam_init: float = 30.0
    dual_slack: float = 1e-3
    num_negatives: int = 256
    infonce_coef: float = 5.0

    def __post_init__(self):
        for f in ("skill_dim", "num_negatives"):
            v = getattr(self, f)
            if not _is_int(v) or v < 1:
                raise ConfigError(f, v, "an int >= 1")
        if not self.hidden or any(not _is_int(w) or w < 1 for w in self.hidden):
            raise ConfigError("hidden", self.hidden, "a non-empty list of ints >= 1")
        if not 0.0 <= self.gamma < 1.0:
            raise ConfigError("gamma", self.gamma, "a float in [0, 1) (no terminal states)")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError("tau", self.tau, "a float in (0, 1]")
        for f in ("init_alpha", "dual_lam_init"):
            if not getattr(self, f) > 0:
                raise ConfigError(f, getattr(self, f), "a float > 0")
        for f in ("dual_slack", "infonce_coef"):
            if not getattr(self, f) >= 0:
                raise ConfigError(f, getattr(self, f), "a float >= 0")


#: the traced hyper-parameters of every skill run, as the recipes' dotted keys (the optimisers at
#: ``optim``, :class:`SkillConfig` at ``skills``); each method adds its own (``metra.TRACED``,
#: ``csf.TRACED``)
TRACED: tuple[str, ...] = (
    "optim.actor.lr",
    "optim.critic.lr",
    "optim.alpha.lr",
    "optim.phi.lr",
    "skills.target_entropy_per_dim",
)


def hparams(cfg: SkillConfig, optim: SkillOptim, keys: tuple[str, ...]) -> dict[str, Array]:
    """The values of the traced ``keys`` (``optim.<role>.lr`` or ``skills.<field>``) for
    ``state.hparams`` (float32 scalars)."""
    out = {}
    for key in keys:
        where, *rest = key.split(".")
        node = optim if where == "optim" else cfg
        for part in rest:
            node = getattr(node, part)
        out[key] = jnp.float32(node)
    return out


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
    hparams: dict


@dataclasses.dataclass(frozen=True)
class Nets:
    """The networks and optimisers a method's ``update`` needs: ``learner.tx(role, state)`` is
    the optimiser of ``role`` at the state's traced rate (``phi`` and ``dual`` included)."""

    actor: Actor
    critic: nn.Module
    phi: Phi
    learner: SACLearner
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
    off_policy: OffPolicyConfig


def policy_input(obs: Float[Array, "*b o"], skill: Float[Array, "*b d"]) -> Float[Array, "*b od"]:
    """The skill-conditioned policy's input ``[s, z]``."""
    return jnp.concatenate([obs, skill], axis=-1)


def _make_nets(
    cfg: SkillConfig,
    off: OffPolicyConfig,
    optim: SkillOptim,
    critic: nn.Module,
    obs_dim: int,
    act_dim: int,
    iterations: int,
) -> Nets:
    """The actor, ``critic``, ``phi`` and the SAC learner whose optimisers run at traced rates
    over ``iterations`` (the horizon of decaying schedules)."""
    actor = Actor(act_dim, tuple(cfg.hidden))
    learner = SACLearner(
        actor,
        critic,
        optim,
        float(cfg.gamma),
        float(cfg.tau),
        act_dim,
        entropy_key="skills.target_entropy_per_dim",
        total_updates=max(1, iterations - off.learning_starts) * off.updates_per_iteration,
    )
    return Nets(actor, critic, Phi(cfg.skill_dim, tuple(cfg.hidden)), learner, obs_dim, act_dim)


def _make_init(
    cfg: SkillConfig,
    optim: SkillOptim,
    traced: tuple[str, ...],
    nets: Nets,
    replay: Any,
    env: Any,
    env_params: Any,
    n: int,
) -> Callable[[PRNGKeyArray], SkillState]:
    """``init(key) -> SkillState``: networks, optimiser states and the dual variable, an empty
    buffer, ``n`` reset envs with a fresh skill each."""
    d, obs_dim, act_dim, learner = cfg.skill_dim, nets.obs_dim, nets.act_dim, nets.learner
    txs = {r: optim_lib.make(getattr(optim, r), 1) for r in ("phi", "dual")}  # states' structure

    def init(key: PRNGKeyArray) -> SkillState:
        k_a, k_c, k_p, k_env, k_z, k_run = jax.random.split(key, 6)
        phi_p = nets.phi.init(k_p, jnp.zeros((1, obs_dim)))
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
            **learner.init(k_a, k_c, obs_dim + d, cfg.init_alpha),
            phi=phi_p,
            phi_opt=txs["phi"].init(phi_p),
            log_dual_lam=log_lam,
            dual_opt=txs["dual"].init(log_lam),
            buffer=replay.init(item),
            env_state=env_state,
            obs=obs.reshape(n, obs_dim).astype(jnp.float32),
            skill=sample_skills(k_z, n, d),
            key=k_run,
            iteration=jnp.int32(0),
            hparams=hparams(cfg, optim, traced),
        )

    return init


def make_skill_parts(
    cfg: SkillConfig,
    off_policy: OffPolicyConfig,
    optim: SkillOptim,
    critic: nn.Module,
    make_update: Callable[[SkillConfig, Nets], Callable[[SkillState, dict, PRNGKeyArray], Any]],
    traced: tuple[str, ...],
    *,
    env_options: Mapping[str, Any] | None = None,
    iterations: int = 1,
    spread: Callable[[Any], Any] | None = None,
) -> SkillParts:
    """The shared loop around a method's ``make_update(cfg, nets) -> update(state, batch, key)``
    on ``off_policy.env`` (made with ``env_options``); ``traced`` are the keys the method reads
    from ``state.hparams`` (``metra.TRACED``, ``csf.TRACED``).

    ``critic`` is initialised as ``critic.init(key, [s, z], a)``; ``iterations`` (the run's
    length) is the horizon of decaying learning-rate schedules; ``spread`` (data parallel)
    constrains every sampled batch's leading axis to the mesh's data axes.
    """
    off = off_policy
    env, env_params, obs_dim, act_dim = make_box_env(off.env, env_options or {})
    d, n = cfg.skill_dim, off.num_envs
    replay = make_replay(
        ReplayConfig(off.buffer_size, off.batch_size, max(off.batch_size, off.num_envs))
    )
    nets = _make_nets(cfg, off, optim, critic, obs_dim, act_dim, iterations)
    method_update = make_update(cfg, nets)
    init = _make_init(cfg, optim, traced, nets, replay, env, env_params, n)

    def update(state: SkillState, key: PRNGKeyArray) -> tuple[SkillState, dict]:
        k_sample, k_update = jax.random.split(key)
        batch = replay.sample(state.buffer, k_sample).experience
        if spread is not None:
            batch = spread(batch)
        return method_update(state, batch, k_update)

    def iteration(state: SkillState) -> tuple[SkillState, dict]:
        key, k_act, k_rand, k_step, k_z, k_learn = jax.random.split(state.key, 6)
        pi = nets.actor.apply(state.actor, policy_input(state.obs, state.skill))
        policy_a, _ = sample_and_log_prob(pi, k_act)
        random_a = jax.random.uniform(k_rand, (n, act_dim), minval=-1.0, maxval=1.0)
        warm = state.iteration < off.learning_starts
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
            keys = jax.random.split(k_learn, off.updates_per_iteration)
            s, m = jax.lax.scan(update, s, keys)
            return s, jax.tree.map(lambda x: x[-1], m)

        def skip(s):
            return s, jax.tree.map(jnp.zeros_like, zero_metrics)

        can = jnp.logical_and(~warm, replay.can_sample(buffer))
        state, metrics = jax.lax.cond(can, learn, skip, state)
        return state, {**metrics, "learning": can}

    abstract = jax.eval_shape(lambda k: update(init(k), k)[1], jax.random.key(0))
    zero_metrics = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), abstract)
    return SkillParts(init, iteration, update, env, env_params, nets, cfg, off)


def make_train(
    parts: SkillParts, iterations: int
) -> Callable[[PRNGKeyArray], tuple[SkillState, dict]]:
    """``train(key) -> (final_state, metrics [iterations])``: the whole run as one scan, pure and
    vmappable over keys."""

    def train(key: PRNGKeyArray) -> tuple[SkillState, dict]:
        def body(state, _):
            return parts.iteration(state)

        return jax.lax.scan(body, parts.init(key), None, length=iterations)

    return train

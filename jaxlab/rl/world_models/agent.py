"""Dreamer's configs, its train state and the static agent that its functions share.

:class:`DreamerConfig` (its own hyper-parameters), :class:`DreamerOptim` (one optimiser per role),
the traced keys and their values (:func:`hparams`), the sequence buffer's config, the whole train
state :class:`DreamerState`, and :class:`Agent`, built by :func:`make_agent` from the configs and
the env (networks, action encoding, optimisers at traced rates). The algorithm is described in
``jaxlab.rl.world_models.dreamer``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.envs.open_world import OBS_SIZES
from jaxlab.envs.spaces import Box, Discrete
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.replay import SequenceReplayConfig
from jaxlab.rl.world_models import ls_imagine
from jaxlab.rl.world_models.rssm import Actor, Critic, Latent, NetConfig, WorldModel


@dataclasses.dataclass(frozen=True)
class DreamerOptim:
    """Dreamer's optimisers, one per role (Adam; DreamerV3's rates and clipping norms).

    Attributes:
        model: the world model's (3e-4, gradient norm clipped at 1000).
        actor, critic: the imagination actor-critic's (1e-4 each, clipped at 100).
        affordance: LS-Imagine's relevance model and affordance predictor (1e-3, no clipping;
            unused by plain Dreamer).
    """

    model: OptimConfig = OptimConfig(name="adam", lr=3e-4, clip_norm=1000.0)
    actor: OptimConfig = OptimConfig(name="adam", lr=1e-4, clip_norm=100.0)
    critic: OptimConfig = OptimConfig(name="adam", lr=1e-4, clip_norm=100.0)
    affordance: OptimConfig = OptimConfig(name="adam", lr=1e-3)


@dataclasses.dataclass(frozen=True)
class DreamerConfig:
    """Dreamer's own hyper-parameters; the env, replay and update schedule are a
    ``jaxlab.rl.off_policy.OffPolicyConfig``, the optimisers a :class:`DreamerOptim` and
    LS-Imagine's settings an ``ls_imagine.LSConfig``.

    Attributes:
        sequence_length: length of the replayed sequences (>= 1, <= the per-env capacity).
        deter, groups, classes, hidden, embed, depth, num_bins: network sizes (``rssm``).
        horizon, gamma, lam: imagination length, discount and lambda (in [0, 1]).
        entropy: the actor's entropy weight (>= 0); traced.
        free_bits: KL free nats (>= 0).
        dyn_scale, rep_scale: KL balancing weights (>= 0); traced.
        slow_rate: slow-critic EMA rate, in (0, 1].
        retnorm_decay: return-scale EMA decay, in [0, 1).
    """

    sequence_length: int = 16
    deter: int = 64
    groups: int = 8
    classes: int = 8
    hidden: int = 64
    embed: int = 64
    depth: int = 8
    num_bins: int = 255
    horizon: int = 15
    gamma: float = 0.997
    lam: float = 0.95
    entropy: float = 3e-4
    free_bits: float = 1.0
    dyn_scale: float = 0.5
    rep_scale: float = 0.1
    slow_rate: float = 0.02
    retnorm_decay: float = 0.99

    def __post_init__(self):
        for name in ("sequence_length", "deter", "groups", "classes", "hidden", "embed"):
            _check_int(name, getattr(self, name))
        _check_int("depth", self.depth)
        _check_int("horizon", self.horizon)
        if self.num_bins < 3:
            raise ConfigError("num_bins", self.num_bins, "an int >= 3")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "a float in [0, 1]")
        for name in ("entropy", "free_bits", "dyn_scale", "rep_scale"):
            if not getattr(self, name) >= 0.0:
                raise ConfigError(name, getattr(self, name), "a float >= 0")
        if not 0.0 < self.slow_rate <= 1.0:
            raise ConfigError("slow_rate", self.slow_rate, "a float in (0, 1]")
        if not 0.0 <= self.retnorm_decay < 1.0:
            raise ConfigError("retnorm_decay", self.retnorm_decay, "a float in [0, 1)")


def _check_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(name, v, "an int >= 1")


#: the traced hyper-parameters of a Dreamer run, as the recipes' dotted keys (the optimisers at
#: ``optim``, :class:`DreamerConfig` at ``dreamer``); LS-Imagine adds ``optim.affordance.lr``
TRACED: tuple[str, ...] = (
    "optim.model.lr",
    "optim.actor.lr",
    "optim.critic.lr",
    "dreamer.entropy",
    "dreamer.dyn_scale",
    "dreamer.rep_scale",
)
LS_TRACED: tuple[str, ...] = (*TRACED, "optim.affordance.lr")
#: the optimiser roles of :class:`DreamerOptim`, in the order of ``hparams``
ROLES = ("model", "actor", "critic", "affordance")


def hparams(cfg: DreamerConfig, optim: DreamerOptim, ls: bool) -> dict[str, Array]:
    """The values of :data:`TRACED` (:data:`LS_TRACED` with ``ls``) for ``state.hparams``
    (float32 scalars)."""
    out = {f"optim.{r}.lr": jnp.float32(getattr(optim, r).lr) for r in ROLES}
    for name in ("entropy", "dyn_scale", "rep_scale"):
        out[f"dreamer.{name}"] = jnp.float32(getattr(cfg, name))
    return {k: out[k] for k in (LS_TRACED if ls else TRACED)}


def replay_config(cfg: DreamerConfig, off: OffPolicyConfig) -> SequenceReplayConfig:
    """The sequence buffer: ``off.buffer_size // off.num_envs`` items per env."""
    capacity = off.buffer_size // off.num_envs
    return SequenceReplayConfig(off.num_envs, capacity, off.batch_size, cfg.sequence_length)


@struct.dataclass
class DreamerState:
    """The whole train state: networks, optimizer states, return scale, buffer, envs, key."""

    wm: Any
    actor: Any
    critic: Any
    slow_critic: Any
    wm_opt: Any
    actor_opt: Any
    critic_opt: Any
    retnorm: Float[Array, "*s 2"]
    buffer: Any
    env_state: Any
    obs: Any
    need_first: Any
    action: Any
    latent: Latent
    episode_return: Any
    last_return: Any
    successes: Any
    episodes: Any
    key: PRNGKeyArray
    iteration: Any
    hparams: dict  # the traced learning rates, entropy weight and KL scales
    aff: Any = None  # LS-Imagine: relevance/predictor params, optimizer states, statistics


def preprocess(obs) -> Float[Array, "*b s s 3"]:
    """uint8 pixels -> float in ``[-0.5, 0.5]``."""
    return obs.astype(jnp.float32) / 255.0 - 0.5


@dataclasses.dataclass(frozen=True)
class Agent:
    """The static pieces of one Dreamer (or LS-Imagine) agent that its functions share.

    Attributes:
        cfg, off, optim, ls: the configs (``ls`` None for plain Dreamer).
        net, wm, actor, critic: the networks (``rssm``).
        n_act, size: the env's number of actions and observation side.
        total_updates: the horizon of decaying learning-rate schedules.
    """

    cfg: DreamerConfig
    off: OffPolicyConfig
    optim: DreamerOptim
    ls: ls_imagine.LSConfig | None
    net: NetConfig
    wm: WorldModel
    actor: Actor
    critic: Critic
    n_act: int
    size: int
    total_updates: int

    def tx(self, role: str, hp: Mapping[str, Any]) -> optax.GradientTransformation:
        """The optimiser of ``role`` at the traced rate in ``hp`` (a state's ``hparams``)."""
        cfg = getattr(self.optim, role)
        return optim_lib.from_hparams(cfg, self.total_updates, hp, f"optim.{role}")

    def action_vec(self, a, jump=None):
        """One-hot actions ``[..., n_act]``; with LS-Imagine a last jump bit (``jump``)."""
        v = jax.nn.one_hot(a, self.n_act)
        if self.ls is not None:
            j = jnp.zeros(a.shape, jnp.float32) if jump is None else jump.astype(jnp.float32)
            v = jnp.concatenate([v * (1 - j)[..., None], j[..., None]], -1)
        return v


def make_agent(
    cfg: DreamerConfig,
    off: OffPolicyConfig,
    optim: DreamerOptim,
    ls: ls_imagine.LSConfig | None,
    env: Any,
    env_params: Any,
    iterations: int,
) -> Agent:
    """The :class:`Agent` for ``env``: refuses envs without discrete actions and square
    ``[S, S, 3]`` pixel observations, and LS-Imagine boxes larger than the view."""
    space = env.action_space(env_params)
    obs_space = env.observation_space(env_params)
    if not isinstance(space, Discrete):
        raise ConfigError("env", off.env, "an env with a Discrete action space")
    if not isinstance(obs_space, Box) or len(obs_space.shape) != 3 or obs_space.shape[-1] != 3:
        raise ConfigError("env", off.env, "an env with [S, S, 3] pixel observations")
    size = int(obs_space.shape[0])
    if size not in OBS_SIZES or obs_space.shape[1] != size:
        raise ConfigError("obs_size", obs_space.shape[:2], f"a square side in {OBS_SIZES}")
    if ls is not None and ls.box > size:
        raise ConfigError("ls.box", ls.box, f"a box side <= the observation side {size}")
    n_act = space.n
    net = NetConfig(
        obs_size=size,
        action_dim=n_act + (1 if ls is not None else 0),
        deter=cfg.deter,
        groups=cfg.groups,
        classes=cfg.classes,
        hidden=cfg.hidden,
        embed=cfg.embed,
        depth=cfg.depth,
        num_bins=cfg.num_bins,
        aux_heads=ls is not None,
    )
    total_updates = max(1, iterations - off.learning_starts) * off.updates_per_iteration
    actor, critic = Actor(cfg.hidden, n_act), Critic(cfg.hidden, cfg.num_bins)
    return Agent(
        cfg, off, optim, ls, net, WorldModel(net), actor, critic, n_act, size, total_updates
    )

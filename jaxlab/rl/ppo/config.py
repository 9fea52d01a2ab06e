"""PPO's configuration, its traced hyper-parameters and its optimiser over a run.

The optimiser is a :class:`jaxlab.core.optim.OptimConfig` (recipes hold it at ``optim``; default
:data:`OPTIM`: global-norm clipping at 0.5, then Adam with eps 1e-5); its schedule counts
optimiser steps, ``update_epochs x num_minibatches`` per update (:func:`optimizer_steps`), so
``schedule="linear"`` anneals the rate linearly to 0 over the run as the original Kinetix code
does. The learning rate, clip range and the two loss coefficients are traced (:data:`TRACED`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig

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
            memory; 1 (one pass) is the default, more chunks only save memory.
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

"""The one optimiser config of every recipe: ``optim`` (or ``optim.<role>`` where a method has
several optimisers), and the optax transformation it builds.

A recipe nests :class:`OptimConfig` as its ``optim`` field (or a small frozen dataclass of several,
named for their role: ``optim.actor``, ``optim.critic``, ``optim.model``). The learning rate and
the weight decay are *traced*: the recipe lists :func:`traced_keys` in ``Recipe.traced``, its
``init`` stores :func:`hparams` in ``state.hparams``, and its train step builds the transformation
with :func:`from_hparams`, so ``jaxlab sweep RECIPE optim.lr=a,b --seeds S`` trains every value in
one vmapped program. The optimiser state's structure never depends on a traced value, so the state
made by ``init`` fits the transformation rebuilt inside the step.

The transformation is ``clip_by_global_norm`` (when ``clip_norm > 0``), then the update rule
(``adamw``: decoupled weight decay; ``adam`` and ``sgd``: weight decay as an L2 term added to the
gradient), with the learning rate scaled by the schedule: a linear warm-up from 0 over
``warmup_steps``, then ``constant``, ``cosine`` or ``linear`` decay to ``min_lr_ratio * lr`` at the
run's last step.

References: Loshchilov & Hutter 2019 (AdamW, decoupled weight decay); Kingma & Ba 2015 (Adam).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.config import ConfigError

#: the fields of :class:`OptimConfig` that are traced (``state.hparams``), relative to its key
TRACED_FIELDS: tuple[str, ...] = ("lr", "weight_decay")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """One optimiser.

    Attributes:
      name: the update rule: ``adamw`` (decoupled weight decay), ``adam`` or ``sgd`` (weight
        decay added to the gradient as an L2 term).
      lr: peak learning rate (> 0); traced.
      schedule: after the warm-up, ``constant``, ``cosine`` or ``linear`` decay to
        ``min_lr_ratio * lr`` at the run's last step.
      warmup_steps: linear warm-up from 0 (>= 0; 0 = none).
      min_lr_ratio: the decayed schedules' final rate as a fraction of ``lr``, in [0, 1].
      weight_decay: >= 0; traced.
      b1, b2: Adam's moment decays, in [0, 1).
      eps: Adam's denominator offset (> 0).
      momentum: SGD's momentum, in [0, 1) (0 = plain SGD).
      nesterov: Nesterov momentum for SGD.
      clip_norm: global-norm gradient clipping threshold (> 0), or 0 for none.
    """

    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = 1e-3
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    momentum: float = 0.0
    nesterov: bool = False
    clip_norm: float = 0.0

    def __post_init__(self):
        if self.name not in ("adamw", "adam", "sgd"):
            raise ConfigError("name", self.name, "one of: adamw, adam, sgd")
        if self.schedule not in ("constant", "cosine", "linear"):
            raise ConfigError("schedule", self.schedule, "one of: constant, cosine, linear")
        if not self.lr > 0:
            raise ConfigError("lr", self.lr, "a learning rate > 0")
        if self.warmup_steps < 0:
            raise ConfigError("warmup_steps", self.warmup_steps, "an integer >= 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("min_lr_ratio", self.min_lr_ratio, "a fraction in [0, 1]")
        if not self.weight_decay >= 0:
            raise ConfigError("weight_decay", self.weight_decay, "a float >= 0")
        for key in ("b1", "b2", "momentum"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(key, getattr(self, key), "a decay in [0, 1)")
        if not self.eps > 0:
            raise ConfigError("eps", self.eps, "a float > 0")
        if not self.clip_norm >= 0:
            raise ConfigError("clip_norm", self.clip_norm, "a norm > 0, or 0 for no clipping")


def learning_rate(
    cfg: OptimConfig, total_steps: int, lr: float | jax.Array | None = None
) -> float | jax.Array | optax.Schedule:
    """The learning rate: ``lr`` itself (a scalar, possibly traced) for a constant schedule without
    warm-up, else an optax schedule of the step count. Linear in ``lr``, so ``lr`` may be traced.

    A scalar keeps the optimiser state free of a schedule counter; a schedule adds one.
    """
    lr = cfg.lr if lr is None else lr
    if cfg.schedule == "constant" and cfg.warmup_steps == 0:
        return lr
    decay_steps = max(total_steps, cfg.warmup_steps + 1)
    if cfg.schedule == "cosine":
        unit = optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=1.0,
            warmup_steps=cfg.warmup_steps,
            decay_steps=decay_steps,
            end_value=cfg.min_lr_ratio,
        )
    else:
        after = (
            optax.constant_schedule(1.0)
            if cfg.schedule == "constant"
            else optax.linear_schedule(1.0, cfg.min_lr_ratio, decay_steps - cfg.warmup_steps)
        )
        unit = optax.join_schedules(
            [optax.linear_schedule(0.0, 1.0, cfg.warmup_steps), after], [cfg.warmup_steps]
        )
    return lambda count: lr * unit(count)


def make(
    cfg: OptimConfig,
    total_steps: int,
    *,
    lr: float | jax.Array | None = None,
    weight_decay: float | jax.Array | None = None,
) -> optax.GradientTransformation:
    """The optax transformation of ``cfg`` for a run of ``total_steps`` steps; ``lr`` and
    ``weight_decay`` (traced values allowed) default to ``cfg``'s."""
    rate = learning_rate(cfg, total_steps, lr)
    decay = cfg.weight_decay if weight_decay is None else weight_decay
    if cfg.name == "adamw":
        rule = optax.adamw(rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=decay)
    elif cfg.name == "adam":
        rule = optax.adam(rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
    else:
        rule = optax.sgd(rate, momentum=cfg.momentum or None, nesterov=cfg.nesterov)
    if cfg.name != "adamw" and (weight_decay is not None or cfg.weight_decay > 0):
        rule = optax.chain(optax.add_decayed_weights(decay), rule)
    if cfg.clip_norm > 0:
        rule = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), rule)
    return rule


def traced_keys(prefix: str = "optim") -> tuple[str, ...]:
    """The dotted config keys of the traced fields of the optimiser at ``prefix``."""
    return tuple(f"{prefix}.{f}" for f in TRACED_FIELDS)


def hparams(cfg: OptimConfig, prefix: str = "optim") -> dict[str, Any]:
    """``{"<prefix>.lr": ..., "<prefix>.weight_decay": ...}`` as float32 scalars, for
    ``state.hparams``."""
    return {f"{prefix}.{f}": jnp.float32(getattr(cfg, f)) for f in TRACED_FIELDS}


def from_hparams(
    cfg: OptimConfig,
    total_steps: int,
    values: Mapping[str, Any],
    prefix: str = "optim",
) -> optax.GradientTransformation:
    """:func:`make` with the traced fields read from ``values`` (a state's ``hparams``); a key
    missing from ``values`` keeps the config's value.

    For ``adam`` and ``sgd`` the decay term is present when the config's decay is non-zero or the
    decay is traced, so ``init`` builds its optimiser state with this same function and the same
    keys: the state's structure then never depends on a traced value."""
    lr = values.get(f"{prefix}.lr")
    decay = values.get(f"{prefix}.weight_decay")
    return make(cfg, total_steps, lr=lr, weight_decay=decay)

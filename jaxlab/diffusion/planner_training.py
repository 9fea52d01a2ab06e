"""Training the Diffusion Planner on expert logs: the train state, the optimiser with its
schedule, the per-scene loss weights, and the init and train step of a run.

Each step applies the ego state perturbation of the original (:mod:`jaxlab.envs.driving.perturbation`: half the
samples re-planned from a perturbed current state, so the planner learns to recover from its own
closed-loop drift), the x_0 loss with neighbour validity masks, the optimiser of ``cfg.optim``
(AdamW with a warm-up by default; ``decay_fraction`` adds a linear decay tail to a constant rate)
and an EMA of the weights used for sampling. The rate, the weight decay and the EMA decay are
traced (:data:`TRACED`, read from ``state.hparams`` inside the step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from jaxlab.core import optim
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion.ema import ema_update
from jaxlab.diffusion.planner_config import PlannerRunConfig
from jaxlab.diffusion.planner_data import dummy_scene, scene_of
from jaxlab.envs.driving.perturbation import perturb_ego_state

#: the traced hyper-parameters of a planner run (dotted config keys)
TRACED: tuple[str, ...] = (*optim.traced_keys("optim"), "ema_decay")


@flax.struct.dataclass
class PlannerState:
    params: Any
    ema_params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def lr_unit(cfg: PlannerRunConfig) -> float | optax.Schedule:
    """The learning-rate multiplier per step: ``cfg.optim``'s warm-up and schedule, or with
    ``decay_fraction`` a warm-up, a constant rate and a linear decay to 0 over the last
    ``decay_fraction`` of ``loop.total_steps``."""
    o, total = cfg.optim, cfg.loop.total_steps
    if not cfg.decay_fraction:
        return optim.learning_rate(o, total, lr=1.0)
    warmup = max(o.warmup_steps, 1)
    up = optax.linear_schedule(0.0, 1.0, warmup)
    decay = max(int(round(cfg.decay_fraction * total)), 1)
    start = max(total - decay, warmup)
    down = optax.linear_schedule(1.0, 0.0, max(total - start, 1))
    return optax.join_schedules([up, down], [start])


def make_optimizer(
    cfg: PlannerRunConfig, values: Mapping[str, Any] | None = None
) -> optax.GradientTransformation:
    """The optimiser of ``cfg.optim`` with its traced rate and weight decay from ``values`` (a
    state's ``hparams``; missing keys keep the config's); with ``decay_fraction``, AdamW on the
    decay-tail schedule of :func:`lr_unit` (the same state structure, so a resumed run may add
    the tail)."""
    values = {} if values is None else values
    o = cfg.optim
    if not cfg.decay_fraction:
        return optim.from_hparams(o, cfg.loop.total_steps, values)
    lr = values.get("optim.lr", o.lr)
    unit = lr_unit(cfg)
    rule = optax.adamw(
        lambda c: lr * unit(c),
        b1=o.b1,
        b2=o.b2,
        eps=o.eps,
        weight_decay=values.get("optim.weight_decay", o.weight_decay),
    )
    return optax.chain(optax.clip_by_global_norm(o.clip_norm), rule) if o.clip_norm > 0 else rule


def scene_weights(cfg: PlannerRunConfig, scene: dict) -> jax.Array | None:
    """The training scenes' loss weights (``static_scene_weight`` where a static obstacle is
    present, 1 elsewhere), or None when all weigh alike."""
    if cfg.static_scene_weight == 1.0:
        return None
    parked = jnp.any(scene["static_valid"], -1)
    return jnp.where(parked, cfg.static_scene_weight, 1.0).astype(jnp.float32)


def hparams(cfg: PlannerRunConfig) -> dict[str, jax.Array]:
    """The traced values of ``cfg`` (keys :data:`TRACED`) as float32 scalars."""
    return {**optim.hparams(cfg.optim, "optim"), "ema_decay": jnp.float32(cfg.ema_decay)}


def make_init(cfg: PlannerRunConfig) -> Callable[[jax.Array], PlannerState]:
    """``key -> PlannerState`` (parameters, EMA = parameters, optimiser state, ``hparams``)."""

    def init(key):
        kp, kk = jax.random.split(key)
        params = pl.init_planner(kp, cfg.model, dummy_scene(cfg.model))
        return PlannerState(
            params=params,
            ema_params=params,
            opt_state=make_optimizer(cfg).init(params),
            key=kk,
            step=jnp.zeros((), jnp.int32),
            hparams=hparams(cfg),
        )

    return init


def make_train_step(
    cfg: PlannerRunConfig,
) -> Callable[[PlannerState, dict], tuple[PlannerState, dict[str, jax.Array]]]:
    """``(state, batch) -> (state, metrics)``: the perturbation, the x_0 loss, one optimiser step
    at the traced rate and weight decay, the EMA update capped at the traced ``ema_decay``."""
    m = cfg.model

    def train_step(state: PlannerState, b: dict):
        key, kl, ka = jax.random.split(state.key, 3)
        opt = make_optimizer(cfg, state.hparams)
        scene, future = perturb_ego_state(ka, scene_of(b), b["future"], cfg.augment, dt=m.dt)
        (loss, aux), grads = jax.value_and_grad(pl.planner_loss, has_aux=True)(
            state.params, kl, scene, future, m, scene_weight=scene_weights(cfg, scene)
        )
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = ema_update(params, state.ema_params, state.step, state.hparams["ema_decay"])
        new = state.replace(
            params=params, ema_params=ema, opt_state=opt_state, key=key, step=state.step + 1
        )
        return new, {**aux, "grad_norm": optax.global_norm(grads)}

    return train_step

"""Training the video denoiser: noise-prediction loss with condition dropout, CyberHost's local
enhancement and mask losses, Adam and EMA (the state of :mod:`jaxlab.diffusion.training`).

``L = E ||eps_hat - eps||^2 + w_local sum_r mean_{m_r}(eps_hat - eps)^2 + w_mask BCE(mask logits,
masks)``, the region attention writing back under its own predicted masks (as at inference; the
ground-truth masks only supervise), with the audio dropped for a fraction ``p_audio_drop`` of the
rows and the reference for ``p_ref_drop`` (so one network gives every term of the guidance).
``p_audio_drop = 1`` trains the audio-dropped baseline of the same size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.sharding import constrain_leading
from jaxlab.diffusion.ema import ema_update
from jaxlab.diffusion.init import init_params
from jaxlab.diffusion.losses import sample_noisy
from jaxlab.diffusion.schedules import Schedule
from jaxlab.diffusion.training import DiffusionState
from jaxlab.diffusion.video.cyberhost import local_enhancement_loss
from jaxlab.diffusion.video.denoiser import VideoDenoiser, token_masks
from jaxlab.diffusion.video.tasks import AvatarTask, Example, make_batch


@dataclasses.dataclass(frozen=True)
class LossWeights:
    """Condition dropout and loss weights (the loss weights may be traced scalars)."""

    p_audio_drop: float = 0.1
    p_ref_drop: float = 0.05
    local: float | Float[Array, ""] = 0.0
    mask: float | Float[Array, ""] = 0.0


def video_loss(
    key: PRNGKeyArray,
    net: VideoDenoiser,
    params: Any,
    batch: Example,
    schedule: Schedule,
    weights: LossWeights,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """The training loss of one batch and its parts (see the module docstring)."""
    kn, ka, kr = jax.random.split(key, 3)
    x0 = batch.x0
    b = x0.shape[0]
    t, eps, xt = sample_noisy(kn, x0, schedule)
    cond = batch.cond.replace(
        audio_keep=~jax.random.bernoulli(ka, weights.p_audio_drop, (b,)),
        ref_keep=~jax.random.bernoulli(kr, weights.p_ref_drop, (b,)),
    )
    # CyberHost writes back under *predicted* region masks in training too: ground-truth masks of
    # the target clip would tell the denoiser where the hand is (a leak of the answer that the
    # model has no longer at inference); they supervise the mask head and the local loss only.
    net_cond = cond.replace(region_masks=None) if net.cfg.regions else cond
    pred, inter = net.apply(params, xt, schedule.model_time(t), net_cond, mutable=["intermediates"])
    sq = (pred - eps) ** 2
    mse = jnp.mean(sq)
    parts = {"mse": mse}
    loss = mse
    if net.cfg.regions and cond.region_masks is not None:
        local = local_enhancement_loss(sq, cond.region_masks)
        target = token_masks(cond.region_masks, net.cfg.patch)
        logits = inter["intermediates"]["mask_logits"]
        bce = sum(jnp.mean(optax.sigmoid_binary_cross_entropy(lg, target)) for lg in logits)
        parts.update(local=local, mask_bce=bce / len(logits))
        loss = loss + weights.local * local + weights.mask * parts["mask_bce"]
    return loss, parts


def make_init(
    net: VideoDenoiser,
    task: AvatarTask,
    optimizer: optax.GradientTransformation,
    hparams: dict[str, jax.Array],
) -> Callable[[PRNGKeyArray], DiffusionState]:
    """``key -> DiffusionState`` (parameters, EMA = parameters, optimizer state, ``hparams``: the
    traced values, at least ``optim.lr`` and ``ema_decay``)."""

    def init(key: PRNGKeyArray) -> DiffusionState:
        kp, kb, kk = jax.random.split(key, 3)
        ex = make_batch(kb, 1, net.cfg, task)
        params = init_params(net, kp, ex.x0, jnp.ones((1,)), ex.cond)
        return DiffusionState(
            params=params,
            ema_params=params,
            opt_state=optimizer.init(params),
            key=kk,
            step=jnp.zeros((), jnp.int32),
            hparams={k: jnp.float32(v) for k, v in hparams.items()},
        )

    return init


def make_train_step(
    net: VideoDenoiser,
    task: AvatarTask,
    schedule: Schedule,
    weights: LossWeights,
    make_optimizer: Callable[[dict[str, jax.Array]], optax.GradientTransformation],
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[[DiffusionState, Any], tuple[DiffusionState, dict[str, Any]]]:
    """``(state, None) -> (state, metrics)``: a batch drawn in the step (split over ``mesh``'s
    data axes), one step of ``make_optimizer(state.hparams)``, the EMA update capped at the traced
    ``state.hparams["ema_decay"]``; the loss weights ``local_weight`` and ``mask_weight`` are read
    from ``state.hparams`` where present (else ``weights``)."""

    def train_step(state: DiffusionState, batch: Any = None):
        del batch
        key, kd, kl = jax.random.split(state.key, 3)
        ex = make_batch(kd, batch_size, net.cfg, task)
        if mesh is not None:
            ex = jax.tree.map(lambda v: constrain_leading(v, mesh), ex)
        hp = state.hparams
        opt = make_optimizer(hp)
        w = dataclasses.replace(
            weights,
            local=hp.get("local_weight", weights.local),
            mask=hp.get("mask_weight", weights.mask),
        )

        def loss(p):
            return video_loss(kl, net, p, ex, schedule, w)

        (val, parts), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = ema_update(params, state.ema_params, state.step, hp["ema_decay"])
        new = state.replace(
            params=params, ema_params=ema, opt_state=opt_state, key=key, step=state.step + 1
        )
        return new, {"loss": val, "grad_norm": optax.global_norm(grads), **parts}

    return train_step

"""Training a diffusion model (the ``diffusion`` recipe, and the reference that ``preference``
pretrains at initialisation): data sampled inside the step, DSM or EDM loss, Adam, EMA.

The loss is noise prediction on a VP/VE schedule (``parametrization=eps``, the DDPM loss in
continuous time) or the EDM-preconditioned denoiser loss (``parametrization=edm``, Karras et al.
2022); the optimiser of ``cfg.optim`` (by default Adam with a linear warm-up and global-norm
clipping); an exponential moving average of the weights with decay ``min(ema_decay, (1 + k) / (10 +
k))`` at step k, used for sampling.

The learning rate and the EMA decay are *traced* hyper-parameters (``DiffusionState.hparams``,
keys :data:`TRACED`): the optimizer is built from them inside the step, so a sweep over
``optim.lr`` is one vmapped program. Batches are drawn
inside the step from the state's PRNG key (from the mixture, or from the digits kept on the device)
and constrained to be split over the mesh's data axes; ``jax.random`` values do not depend on the
sharding, so the step gives the same batch, loss and update on one device and on a slice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import optim
from jaxlab.core.sharding import constrain_leading
from jaxlab.diffusion.config import DiffusionConfig
from jaxlab.diffusion.datasets import digits_images
from jaxlab.diffusion.ema import ema_update
from jaxlab.diffusion.init import init_params
from jaxlab.diffusion.losses import edm_loss, eps_loss
from jaxlab.diffusion.model import DiffusionModel, ring_of
from jaxlab.diffusion.precond import edm_denoise

#: the traced hyper-parameters of a diffusion training run (dotted config keys)
TRACED: tuple[str, ...] = ("optim.lr", "ema_decay")

Sampler = Callable[[PRNGKeyArray, int], Float[Array, "n ..."]]


@flax.struct.dataclass
class DiffusionState:
    """Parameters, their EMA (used for sampling), optimiser state, PRNG key, step and the traced
    hyper-parameters ``{"optim.lr": ..., "ema_decay": ...}``."""

    params: Any
    ema_params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def hparams(cfg: DiffusionConfig) -> dict[str, jax.Array]:
    """The traced values of ``cfg`` (keys :data:`TRACED`) as float32 scalars."""
    return {"optim.lr": jnp.float32(cfg.optim.lr), "ema_decay": jnp.float32(cfg.ema_decay)}


def make_data(cfg: DiffusionConfig) -> tuple[Sampler, np.ndarray]:
    """``(sample_data, holdout)``: ``sample_data(key, n)`` draws a training batch (jit-able; the
    digits live on the device); ``holdout`` is evaluation data (numpy)."""
    if cfg.data.name == "ring":
        ring = ring_of(cfg.data)
        return ring.sample, np.asarray(ring.sample(jax.random.PRNGKey(10_000), 2000))
    images = digits_images()
    train_imgs = jnp.asarray(images[: -cfg.data.digits_holdout])

    def sample_data(key: PRNGKeyArray, n: int) -> Float[Array, "n 8 8 1"]:
        return train_imgs[jax.random.randint(key, (n,), 0, train_imgs.shape[0])]

    return sample_data, images[-cfg.data.digits_holdout :]


def loss_fn(
    model: DiffusionModel, params: Any, key: PRNGKeyArray, x0: Float[Array, "batch ..."]
) -> Float[Array, ""]:
    """The DSM loss E ||eps_theta(x_t, t) - eps||^2 (eps) or the EDM denoiser loss (edm)."""
    cfg = model.cfg
    if cfg.parametrization == "edm":

        def den(x, s):
            return edm_denoise(lambda xi, c: model.net.apply(params, xi, c), x, s, cfg.sigma_data)

        return edm_loss(key, den, x0, sigma_data=cfg.sigma_data)

    def eps_model(x, t):
        return model.net.apply(params, x, model.schedule.model_time(t))

    return eps_loss(key, eps_model, x0, model.schedule)


def make_init(model: DiffusionModel) -> Callable[[PRNGKeyArray], DiffusionState]:
    """``key -> DiffusionState`` (network parameters, EMA = parameters, Adam state)."""
    cfg = model.cfg
    opt = optim.make(cfg.optim, cfg.loop.total_steps)

    def init(key: PRNGKeyArray) -> DiffusionState:
        kp, kk = jax.random.split(key)
        x = jnp.zeros((1,) + model.data_shape)
        params = init_params(model.net, kp, x, jnp.ones((1,)))
        return DiffusionState(
            params=params,
            ema_params=params,
            opt_state=opt.init(params),
            key=kk,
            step=jnp.zeros((), jnp.int32),
            hparams=hparams(cfg),
        )

    return init


def make_train_step(
    model: DiffusionModel, sample_data: Sampler, mesh: jax.sharding.Mesh | None = None
) -> Callable[[DiffusionState, Any], tuple[DiffusionState, dict[str, jax.Array]]]:
    """``(state, None) -> (state, metrics)``: draw a batch (split over ``mesh``'s data axes), one
    optimiser step at the traced ``optim.lr``, the EMA update with the traced ``ema_decay``."""
    cfg = model.cfg

    def train_step(state: DiffusionState, batch: Any = None):
        del batch
        key, kd, kl = jax.random.split(state.key, 3)
        x0 = sample_data(kd, cfg.batch_size)
        if mesh is not None:
            x0 = constrain_leading(x0, mesh)
        opt = optim.from_hparams(cfg.optim, cfg.loop.total_steps, state.hparams)
        loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, kl, x0))(state.params)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = ema_update(params, state.ema_params, state.step, state.hparams["ema_decay"])
        new = state.replace(
            params=params, ema_params=ema, opt_state=opt_state, key=key, step=state.step + 1
        )
        return new, {"loss": loss, "grad_norm": optax.global_norm(grads)}

    return train_step

"""A diffusion model built from its config: network, schedule, parametrisation, ``eps_fn``.

:func:`make_model` is what the ``diffusion`` recipe trains and what
:func:`jaxlab.diffusion.pretrained.load_model` rebuilds from a run's config for the ``ld3`` and
``preference`` recipes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion import schedules as sched_lib
from jaxlab.diffusion.config import DataConfig, DiffusionConfig
from jaxlab.diffusion.dit import DiT
from jaxlab.diffusion.gmm import GaussianMixture, ring_mixture
from jaxlab.diffusion.mlp_denoiser import MLPDenoiser
from jaxlab.diffusion.model_wrapper import EpsFn, model_wrapper
from jaxlab.diffusion.precond import edm_denoise
from jaxlab.diffusion.samplers import SamplerSpec, sample
from jaxlab.diffusion.unet import UNet


@dataclasses.dataclass(frozen=True)
class DiffusionModel:
    """A trained model's pieces: network, schedule, parametrisation and the eps_fn factory."""

    cfg: DiffusionConfig
    net: nn.Module
    schedule: Any
    data_shape: tuple[int, ...]

    def eps_fn(self, params: Any) -> EpsFn:
        """The noise-prediction function of the samplers for these parameters (EDM denoisers
        D(x; sigma) = c_skip x + c_out F(c_in x; c_noise) are wrapped as data predictors)."""
        if self.cfg.parametrization == "edm":

            def denoiser(x, sigma):
                return edm_denoise(
                    lambda xi, c: self.net.apply(params, xi, c), x, sigma, self.cfg.sigma_data
                )

            return model_wrapper(denoiser, self.schedule, model_type="data")
        return model_wrapper(lambda x, t: self.net.apply(params, x, t), self.schedule)

    def generate(
        self, key: PRNGKeyArray, params: Any, n: int, spec: SamplerSpec, nfe: int, steps: str
    ) -> Float[Array, "n ..."]:
        """n samples from noise with the given sampler, NFE and step baseline (jit-able)."""
        z = jax.random.normal(key, (n,) + self.data_shape)
        ts = sched_lib.get_time_steps(self.schedule, spec.steps_for_nfe(nfe), steps)
        return sample(
            spec, self.eps_fn(params), self.schedule.prior_std * z, ts, schedule=self.schedule
        )


def make_net(cfg: DiffusionConfig) -> nn.Module:
    """The network of ``cfg.net``; its conditioning is ``model_time(t)`` for eps models (scaled
    by 1000 on VP schedules, t in [~0, 1]) and ``c_noise = ln(sigma) / 4`` for EDM."""
    n = cfg.net
    scale = 1000.0 if (cfg.parametrization == "eps" and cfg.schedule.startswith("vp")) else 1.0
    if n.kind == "mlp":
        return MLPDenoiser(width=n.width, depth=n.depth, emb_dim=n.emb_dim, time_scale=scale)
    if n.kind == "unet":
        return UNet(
            channels=n.channels,
            blocks_per_level=n.blocks_per_level,
            attention=n.attention,
            heads=n.heads,
            emb_dim=n.emb_dim,
            time_scale=scale,
        )
    return DiT(patch=n.patch, width=n.width, depth=n.depth, heads=n.heads, time_scale=scale)


def data_shape(cfg: DataConfig) -> tuple[int, ...]:
    """``(2,)`` for the ring, ``(8, 8, 1)`` for digits."""
    return (2,) if cfg.name == "ring" else (8, 8, 1)


def make_model(cfg: DiffusionConfig) -> DiffusionModel:
    """The model described by ``cfg`` (parameters come from training or a checkpoint)."""
    return DiffusionModel(
        cfg=cfg,
        net=make_net(cfg),
        schedule=sched_lib.make_schedule(cfg.schedule),
        data_shape=data_shape(cfg.data),
    )


def ring_of(cfg: DataConfig) -> GaussianMixture:
    """The ring mixture of ``cfg`` (the 2-D training distribution)."""
    return ring_mixture(cfg.ring_components, cfg.ring_radius, cfg.ring_std)

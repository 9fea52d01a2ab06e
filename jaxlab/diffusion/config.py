"""The config of a trained diffusion model: data, network, parametrisation, schedule, training.

:class:`DiffusionConfig` is the ``diffusion`` recipe's config and also the nested ``reference``
model of the ``preference`` recipe; a run's saved ``config.yaml`` rebuilds its model with
:func:`jaxlab.diffusion.model.make_model`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import MeshConfig
from jaxlab.diffusion.samplers import SAMPLER_NAMES, SamplerSpec


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``ring``: k Gaussians of std ``ring_std`` on a circle of ``ring_radius``; ``digits``: the
    1797 8x8 scikit-learn digits in [-1, 1] (the last ``digits_holdout`` kept for evaluation)."""

    name: Literal["ring", "digits"] = "ring"
    ring_components: int = 8
    ring_radius: float = 1.0
    ring_std: float = 0.1
    digits_holdout: int = 297

    def __post_init__(self):
        if self.ring_components < 1:
            raise ConfigError("ring_components", self.ring_components, "an integer >= 1")
        if not self.ring_std > 0:
            raise ConfigError("ring_std", self.ring_std, "a positive float")
        if not self.ring_radius > 0:
            raise ConfigError("ring_radius", self.ring_radius, "a positive float")
        if not 0 < self.digits_holdout < 1797:
            raise ConfigError("digits_holdout", self.digits_holdout, "in 1..1796")


@dataclasses.dataclass(frozen=True)
class NetConfig:
    """``mlp`` (width, depth) for 2-D data; ``unet`` (channels, blocks_per_level, attention, heads)
    or ``dit`` (patch, width, depth, heads) for images."""

    kind: Literal["mlp", "unet", "dit"] = "mlp"
    width: int = 128
    depth: int = 3
    emb_dim: int = 64
    channels: tuple[int, ...] = (32, 64)
    blocks_per_level: int = 1
    attention: bool = True
    heads: int = 4
    patch: int = 2

    def __post_init__(self):
        for name in ("width", "depth", "emb_dim", "heads", "patch", "blocks_per_level"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if not self.channels or any(c < 1 for c in self.channels):
            raise ConfigError("channels", self.channels, "a non-empty tuple of positive ints")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """The sampler used by ``evaluate`` and ``finalize``."""

    sampler: str = "dpm_solver++"
    order: int = 2
    variant: str = "bh1"
    nfe: int = 20
    steps: Literal["time_uniform", "time_quadratic", "logsnr", "edm"] = "logsnr"
    num_samples: int = 1000

    def __post_init__(self):
        if self.sampler not in SAMPLER_NAMES:
            raise ConfigError("sampler", self.sampler, f"one of {SAMPLER_NAMES}")
        if self.order < 1:
            raise ConfigError("order", self.order, "an integer >= 1")
        try:
            self.spec.steps_for_nfe(self.nfe)
        except ValueError as e:
            raise ConfigError("nfe", self.nfe, str(e)) from None
        if self.num_samples < 1:
            raise ConfigError("num_samples", self.num_samples, "an integer >= 1")

    @property
    def spec(self) -> SamplerSpec:
        try:
            return SamplerSpec(self.sampler, self.order, self.variant)
        except ValueError as e:
            raise ConfigError("sampler", (self.sampler, self.order, self.variant), str(e)) from None


@dataclasses.dataclass(frozen=True)
class DiffusionConfig:
    """A diffusion model and its training: ``optim`` (Adam, a linear warm-up, global-norm clipping;
    ``optim.lr`` traced) and ``ema_decay`` (the cap of the weights' EMA decay, traced: both are read
    from the train state's ``hparams`` inside the step); ``mesh``: the batch is split over its data
    axes."""

    seed: int = 0
    data: DataConfig = DataConfig()
    net: NetConfig = NetConfig()
    parametrization: Literal["eps", "edm"] = "eps"
    schedule: Literal["vp_linear", "vp_cosine", "ve", "edm"] = "vp_linear"
    sigma_data: float = 0.5
    batch_size: int = 256
    optim: OptimConfig = OptimConfig(name="adam", lr=1e-3, warmup_steps=100, clip_norm=1.0)
    ema_decay: float = 0.999
    sampling: SamplingConfig = SamplingConfig()
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(
        total_steps=4000, steps_per_call=100, log_every=200, eval_every=2000, checkpoint_every=2000
    )

    def __post_init__(self):
        if self.parametrization == "edm" and self.schedule != "edm":
            raise ConfigError(
                "schedule",
                self.schedule,
                "'edm' when parametrization is 'edm' (EDM preconditioning)",
            )
        if self.data.name == "ring" and self.net.kind != "mlp":
            raise ConfigError("net.kind", self.net.kind, "'mlp' for the 2-D ring data")
        if self.data.name == "digits" and self.net.kind == "mlp":
            raise ConfigError("net.kind", self.net.kind, "'unet' or 'dit' for digits images")
        if self.batch_size < 1:
            raise ConfigError("batch_size", self.batch_size, "an integer >= 1")
        if not self.sigma_data > 0:
            raise ConfigError("sigma_data", self.sigma_data, "a positive float")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError("ema_decay", self.ema_decay, "a float in [0, 1)")

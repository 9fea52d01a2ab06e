"""``diffusion``: train a diffusion model (MLP on a 2-D mixture, U-Net or DiT on 8x8 digits).

Noise-prediction training on a VP/VE schedule (``parametrization=eps``, the DDPM loss in
continuous time) or EDM-preconditioned denoiser training (``parametrization=edm``, Karras et al.
2022), Adam with warmup and gradient clipping, and an exponential moving average of the weights
(decay min(ema_decay, (1 + k) / (10 + k)) at step k) that is used for sampling. Data are sampled inside the step from the mixture or from the digits
array kept on the device, so the recipe carries its PRNG key in the state (``batch=None``).
Evaluation samples with any sampler of ``jaxlab.diffusion.samplers`` and reports the sliced
Wasserstein distance to held-out data; ``finalize`` writes ``samples.png`` (an image grid or a
scatter plot) into the run directory.

:func:`load_model` restores the EMA model of a finished run for the ``ld3`` and ``preference``
recipes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import config as config_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig, abstract_state
from jaxlab.core.recipe import Recipe, Task, register
from jaxlab.diffusion import schedules as sched_lib
from jaxlab.diffusion.datasets import digits_images
from jaxlab.diffusion.dit import DiT
from jaxlab.diffusion.gmm import GaussianMixture, ring_mixture
from jaxlab.diffusion.images import save_image_grid, save_scatter
from jaxlab.diffusion.init import init_params
from jaxlab.diffusion.losses import edm_loss, eps_loss
from jaxlab.diffusion.mlp_denoiser import MLPDenoiser
from jaxlab.diffusion.model_wrapper import EpsFn, model_wrapper
from jaxlab.diffusion.precond import edm_denoise
from jaxlab.diffusion.samplers import SAMPLER_NAMES, SamplerSpec, sample
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein
from jaxlab.diffusion.unet import UNet


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
            raise ConfigError("data.ring_components", self.ring_components, "an integer >= 1")
        if not self.ring_std > 0:
            raise ConfigError("data.ring_std", self.ring_std, "a positive float")
        if not 0 < self.digits_holdout < 1797:
            raise ConfigError("data.digits_holdout", self.digits_holdout, "in 1..1796")


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
                raise ConfigError(f"net.{name}", getattr(self, name), "an integer >= 1")
        if not self.channels or any(c < 1 for c in self.channels):
            raise ConfigError("net.channels", self.channels, "a non-empty tuple of positive ints")


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
            raise ConfigError("sampling.sampler", self.sampler, f"one of {SAMPLER_NAMES}")
        try:
            self.spec.steps_for_nfe(self.nfe)
        except ValueError as e:
            raise ConfigError("sampling.nfe", self.nfe, str(e)) from None
        if self.num_samples < 1:
            raise ConfigError("sampling.num_samples", self.num_samples, "an integer >= 1")

    @property
    def spec(self) -> SamplerSpec:
        try:
            return SamplerSpec(self.sampler, self.order, self.variant)
        except ValueError as e:
            raise ConfigError(
                "sampling", (self.sampler, self.order, self.variant), str(e)
            ) from None


@dataclasses.dataclass(frozen=True)
class DiffusionConfig:
    seed: int = 0
    data: DataConfig = DataConfig()
    net: NetConfig = NetConfig()
    parametrization: Literal["eps", "edm"] = "eps"
    schedule: Literal["vp_linear", "vp_cosine", "ve", "edm"] = "vp_linear"
    sigma_data: float = 0.5
    batch_size: int = 256
    lr: float = 1e-3
    warmup_steps: int = 100
    clip_norm: float = 1.0
    ema_decay: float = 0.999
    sampling: SamplingConfig = SamplingConfig()
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
        if not self.lr > 0:
            raise ConfigError("lr", self.lr, "a positive float")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError("ema_decay", self.ema_decay, "a float in [0, 1)")


@flax.struct.dataclass
class DiffusionState:
    """Parameters, their EMA (used for sampling), optimiser state, PRNG key and step."""

    params: Any
    ema_params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array


@dataclasses.dataclass(frozen=True)
class DiffusionModel:
    """A trained model's pieces: network, schedule, parametrisation and the eps_fn factory."""

    cfg: DiffusionConfig
    net: nn.Module
    schedule: Any
    data_shape: tuple[int, ...]

    def eps_fn(self, params: Any) -> EpsFn:
        """The noise-prediction function of the samplers for these parameters."""
        if self.cfg.parametrization == "edm":

            def denoiser(x, sigma):
                return edm_denoise(
                    lambda xi, c: self.net.apply(params, xi, c), x, sigma, self.cfg.sigma_data
                )

            return model_wrapper(denoiser, self.schedule, model_type="data")
        return model_wrapper(lambda x, t: self.net.apply(params, x, t), self.schedule)

    def generate(
        self, key: jax.Array, params: Any, n: int, spec: SamplerSpec, nfe: int, steps: str
    ):
        """n samples from noise with the given sampler, NFE and step baseline (jit-able)."""
        z = jax.random.normal(key, (n,) + self.data_shape)
        ts = sched_lib.get_time_steps(self.schedule, spec.steps_for_nfe(nfe), steps)
        return sample(
            spec, self.eps_fn(params), self.schedule.prior_std * z, ts, schedule=self.schedule
        )


def _schedule(cfg: DiffusionConfig):
    return sched_lib.make_schedule(cfg.schedule)


def _net(cfg: DiffusionConfig) -> nn.Module:
    n = cfg.net
    # the conditioning is model_time(t) for eps models (t in [~0, 1] for VP: scale it up) and
    # c_noise = ln(sigma)/4 for EDM
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


def make_model(cfg: DiffusionConfig) -> DiffusionModel:
    shape = (2,) if cfg.data.name == "ring" else (8, 8, 1)
    return DiffusionModel(cfg=cfg, net=_net(cfg), schedule=_schedule(cfg), data_shape=shape)


def ring_of(cfg: DataConfig) -> GaussianMixture:
    return ring_mixture(cfg.ring_components, cfg.ring_radius, cfg.ring_std)


@dataclasses.dataclass(frozen=True)
class DiffusionParts:
    model: DiffusionModel
    init: Callable
    train_step: Callable
    sample_data: Callable  # (key, n) -> training data batch
    holdout: Any  # evaluation data (numpy)


def build_parts(cfg: DiffusionConfig) -> DiffusionParts:
    model = make_model(cfg)
    opt = optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adam(optax.linear_schedule(0.0, cfg.lr, max(cfg.warmup_steps, 1))),
    )
    if cfg.data.name == "ring":
        ring = ring_of(cfg.data)
        sample_data = ring.sample
        holdout = np.asarray(ring.sample(jax.random.PRNGKey(10_000), 2000))
    else:
        images = digits_images()
        train_imgs = jnp.asarray(images[: -cfg.data.digits_holdout])
        holdout = images[-cfg.data.digits_holdout :]

        def sample_data(key, n):
            return train_imgs[jax.random.randint(key, (n,), 0, train_imgs.shape[0])]

    def loss_fn(params, key, x0):
        if cfg.parametrization == "edm":
            den = lambda x, s: edm_denoise(  # noqa: E731
                lambda xi, c: model.net.apply(params, xi, c), x, s, cfg.sigma_data
            )
            return edm_loss(key, den, x0, sigma_data=cfg.sigma_data)
        eps_model = lambda x, t: model.net.apply(params, x, model.schedule.model_time(t))  # noqa: E731
        return eps_loss(key, eps_model, x0, model.schedule)

    def init(key):
        kp, kk = jax.random.split(key)
        x = jnp.zeros((1,) + model.data_shape)
        params = init_params(model.net, kp, x, jnp.ones((1,)))
        return DiffusionState(
            params=params,
            ema_params=params,
            opt_state=opt.init(params),
            key=kk,
            step=jnp.zeros((), jnp.int32),
        )

    def train_step(state: DiffusionState, batch: Any = None):
        del batch
        key, kd, kl = jax.random.split(state.key, 3)
        x0 = sample_data(kd, cfg.batch_size)
        loss, grads = jax.value_and_grad(loss_fn)(state.params, kl, x0)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        # EMA with the usual warm-up, decay_k = min(decay, (1 + k) / (10 + k))
        k = state.step.astype(jnp.float32)
        decay = jnp.minimum(cfg.ema_decay, (1.0 + k) / (10.0 + k))
        ema = optax.incremental_update(params, state.ema_params, 1.0 - decay)
        new = DiffusionState(params, ema, opt_state, key, state.step + 1)
        return new, {"loss": loss, "grad_norm": optax.global_norm(grads)}

    return DiffusionParts(model, init, train_step, sample_data, holdout)


def build(cfg: DiffusionConfig) -> Task:
    parts = build_parts(cfg)
    model, s = parts.model, cfg.sampling

    @jax.jit
    def generate(params):
        return model.generate(
            jax.random.PRNGKey(cfg.seed + 1), params, s.num_samples, s.spec, s.nfe, s.steps
        )

    def evaluate(state: DiffusionState) -> dict[str, float]:
        xs = generate(state.ema_params)
        flat = xs.reshape(xs.shape[0], -1)
        ref = jnp.asarray(parts.holdout).reshape(parts.holdout.shape[0], -1)
        sw = sliced_wasserstein(jax.random.PRNGKey(1), flat, ref, num_projections=256)
        out = {"sw_to_data": float(sw), "sample_std": float(jnp.std(flat))}
        if cfg.data.name == "ring":
            out["sample_log_lik"] = float(jnp.mean(ring_of(cfg.data).log_prob(flat)))
        return out

    def finalize(state: DiffusionState, run_dir: Path) -> None:
        xs = np.asarray(generate(state.ema_params))
        if cfg.data.name == "ring":
            save_scatter(run_dir / "samples.png", xs[:2000], reference=parts.holdout[:2000])
        else:
            save_image_grid(run_dir / "samples.png", xs[:100], ncols=10, upscale=4)
            save_image_grid(run_dir / "data.png", parts.holdout[:100], ncols=10, upscale=4)

    return Task(init=parts.init, train_step=parts.train_step, evaluate=evaluate, finalize=finalize)


RECIPE = register(
    Recipe(
        name="diffusion",
        config_cls=DiffusionConfig,
        build=build,
        description="diffusion model (MLP on a 2-D ring, U-Net/DiT on 8x8 digits), EMA, any sampler",
        presets_dir=Path(__file__).parent / "presets" / "diffusion",
    )
)


def load_model(run_dir: str | Path) -> tuple[DiffusionModel, Any]:
    """(model, EMA parameters) of the latest checkpoint of a ``diffusion`` run directory."""
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise ConfigError("checkpoint", str(run_dir), "a diffusion run directory with config.yaml")
    cfg = config_lib.resolve(DiffusionConfig, preset=config_lib.load_yaml(cfg_path))
    task = Task(init=build_parts(cfg).init, train_step=lambda s, b: (s, {}))
    ckpt = Checkpointer(run_dir / "checkpoints", cfg, async_save=False)
    try:
        state, _ = ckpt.restore(abstract_state(task, jax.random.PRNGKey(cfg.seed)))
    finally:
        ckpt.close()
    return make_model(cfg), state.ema_params

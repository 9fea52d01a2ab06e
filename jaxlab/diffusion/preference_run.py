"""A preference fine-tuning run of a diffusion model (DSPO, Diffusion-DPO, SFT): its config, the
reference, the labelled pairs, the train state and step, and the evaluation.

The reference model is the EMA model of a ``diffusion`` run (``pretrained=RUN_DIR``), or, when
``pretrained`` is empty, a model trained at initialisation with the nested ``reference`` config
for ``reference.loop.total_steps`` steps. Pairs are drawn from the reference model (two
independent samples each) and labelled by Bradley-Terry with a linear reward: P(a preferred to b)
= sigmoid(reward_scale (r(a) - r(b))), r(x) = a.x (:func:`reward_vector`). Each step draws a batch
of pairs and applies :func:`jaxlab.diffusion.preference.preference_loss` (shared t and eps within
a pair; the frozen reference gives the margin z). Traced (``state.hparams``): ``optim.lr`` and
``beta``; the reward scale labels the pairs at ``init`` and is static, as are ``method``,
``variant`` and ``stop_grad_weight``, which select the loss.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import optim
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import (
    MeshConfig,
    constrain_leading,
    leading_axis_sharding,
    state_shardings,
)
from jaxlab.diffusion import preference as pref_lib
from jaxlab.diffusion import training as diffusion_training
from jaxlab.diffusion.config import DiffusionConfig, NetConfig
from jaxlab.diffusion.datasets import digits_images, digits_labels
from jaxlab.diffusion.images import save_image_grid, save_scatter
from jaxlab.diffusion.model import DiffusionModel, make_model, ring_of
from jaxlab.diffusion.pretrained import load_model
from jaxlab.diffusion.samplers import SamplerSpec
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein

#: the sampler of the pairs and of evaluation
SPEC = SamplerSpec("dpm_solver++", 2)

#: the traced hyper-parameters (dotted config keys)
TRACED: tuple[str, ...] = ("optim.lr", "beta")
#: the state fields holding pairs (split over the data axes)
PAIRS: tuple[str, ...] = ("pairs_w", "pairs_l", "holdout_w", "holdout_l")

#: The reference trained at initialisation when ``pretrained`` is empty: the ring preset of the
#: ``diffusion`` recipe; its ``loop.total_steps`` is the number of pretraining steps.
DEFAULT_REFERENCE = DiffusionConfig(
    net=NetConfig(kind="mlp", width=128, depth=3),
    loop=LoopConfig(total_steps=3000, steps_per_call=100, progress=False),
)


@dataclasses.dataclass(frozen=True)
class PreferenceConfig:
    """A preference fine-tuning run: the reference (``pretrained`` run directory, or ``reference``
    trained at initialisation), the loss (``method``, traced ``beta``, ``stop_grad_weight``,
    ``variant``), the reward labelling the pairs, the pairs' sizes, ``optim`` (Adam with a
    warm-up and clipping; traced ``optim.lr``) and the evaluation's sizes."""

    seed: int = 0
    pretrained: str = ""
    reference: DiffusionConfig = DEFAULT_REFERENCE
    method: Literal["dspo", "dpo", "sft"] = "dspo"
    beta: float = 1.0
    stop_grad_weight: bool = False
    variant: Literal["sd15", "sdxl"] = "sd15"
    reward_direction: tuple[float, ...] = (2.0, 0.0)
    reward_digit: int = 0
    reward_scale: float = 1.0
    num_pairs: int = 2048
    num_holdout_pairs: int = 512
    pair_nfe: int = 20
    batch_size: int = 256
    optim: OptimConfig = OptimConfig(name="adam", lr=1e-4, warmup_steps=50, clip_norm=1.0)
    eval_samples: int = 2000
    eval_nfe: int = 20
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(
        total_steps=1000, steps_per_call=50, log_every=100, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        if not self.pretrained and self.reference.parametrization != "eps":
            raise ConfigError(
                "reference.parametrization", self.reference.parametrization, "'eps' (DSPO needs it)"
            )
        if self.beta < 0:
            raise ConfigError("beta", self.beta, "a float >= 0")
        if not self.reward_scale >= 0:
            raise ConfigError("reward_scale", self.reward_scale, "a float >= 0")
        if not 0 <= self.reward_digit <= 9:
            raise ConfigError("reward_digit", self.reward_digit, "a digit 0..9")
        for name in ("num_pairs", "num_holdout_pairs", "batch_size", "eval_samples", "pair_nfe"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.eval_nfe < 1:
            raise ConfigError("eval_nfe", self.eval_nfe, "an integer >= 1")


@flax.struct.dataclass
class PreferenceState:
    """The fine-tuned and the frozen reference parameters, the optimiser state, the stored pairs
    (training and held-out), the PRNG key, the step and the traced hyper-parameters."""

    params: Any
    ref_params: Any
    opt_state: Any
    pairs_w: jax.Array
    pairs_l: jax.Array
    holdout_w: jax.Array
    holdout_l: jax.Array
    key: jax.Array
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def reward_vector(model: DiffusionModel, cfg: PreferenceConfig) -> jax.Array:
    """The linear reward's direction a (r(x) = a.x): ``reward_direction`` on 2-D data, the unit
    vector along (mean image of ``reward_digit`` - mean image) on digits."""
    if model.data_shape == (2,):
        a = jnp.asarray(cfg.reward_direction, jnp.float32)
        if a.shape != (2,):
            raise ConfigError("reward_direction", cfg.reward_direction, "two numbers for 2-D data")
        return a
    images, labels = digits_images(), digits_labels()
    d = images[labels == cfg.reward_digit].mean(0) - images.mean(0)
    return jnp.asarray(d / np.linalg.norm(d))


def reference(cfg: PreferenceConfig, mesh: jax.sharding.Mesh):
    """``(model, reference_fn)``: the reference model and ``key -> its parameters`` (the EMA
    parameters of the ``pretrained`` run, or of ``cfg.reference`` trained for
    ``reference.loop.total_steps`` steps at initialisation on ``mesh``)."""
    if cfg.pretrained:
        model, params = load_model(cfg.pretrained)
        if model.cfg.parametrization != "eps":
            raise ConfigError(
                "pretrained", cfg.pretrained, "a diffusion run with parametrization=eps"
            )
        return model, lambda key: params
    model = make_model(cfg.reference)
    ref_init = diffusion_training.make_init(model)
    ref_step = diffusion_training.make_train_step(
        model, diffusion_training.make_data(cfg.reference)[0], mesh
    )

    def pretrain(key):
        state = ref_init(key)
        state, _ = jax.lax.scan(
            lambda s, _: ref_step(s), state, None, length=cfg.reference.loop.total_steps
        )
        return state.ema_params

    return model, pretrain


def _rewards(a: jax.Array, x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[0], -1) @ a.reshape(-1)


def make_init(
    cfg: PreferenceConfig, model: DiffusionModel, reference_fn, a: jax.Array
) -> Callable[[jax.Array], PreferenceState]:
    """``key -> PreferenceState``: the reference, ``num_pairs + num_holdout_pairs`` pairs drawn
    from it and labelled by Bradley-Terry with the reward r(x) = a.x, Adam's state."""
    opt = optim.make(cfg.optim, cfg.loop.total_steps)

    def init(key):
        kp, ka, kb, kl, kh, kk = jax.random.split(key, 6)
        ref = reference_fn(kp)
        n, m = cfg.num_pairs, cfg.num_holdout_pairs
        xs = model.generate(ka, ref, 2 * (n + m), SPEC, cfg.pair_nfe, "logsnr")
        reward = functools.partial(_rewards, a)
        w, lo = pref_lib.label_pairs(kl, xs[: n + m], xs[n + m :], reward, scale=cfg.reward_scale)
        del kb, kh
        return PreferenceState(
            params=ref,
            ref_params=ref,
            opt_state=opt.init(ref),
            pairs_w=w[:n],
            pairs_l=lo[:n],
            holdout_w=w[n:],
            holdout_l=lo[n:],
            key=kk,
            step=jnp.zeros((), jnp.int32),
            hparams={"optim.lr": jnp.float32(cfg.optim.lr), "beta": jnp.float32(cfg.beta)},
        )

    return init


def pair_sharding(mesh: jax.sharding.Mesh) -> Callable[[PreferenceState], PreferenceState]:
    """The state's shardings: the pairs split over the mesh's data axes, the rest replicated."""

    def state_sharding(abstract: PreferenceState) -> PreferenceState:
        out = state_shardings(abstract, mesh)
        pairs = {f: leading_axis_sharding(getattr(abstract, f).shape, mesh) for f in PAIRS}
        return out.replace(**pairs)

    return state_sharding


def make_train_step(cfg: PreferenceConfig, model: DiffusionModel, mesh: jax.sharding.Mesh):
    """``(state, None) -> (state, metrics)``: a batch of stored pairs (split over the mesh's data
    axes), :func:`jaxlab.diffusion.preference.preference_loss` at the traced ``beta``, one
    optimiser step at the traced ``optim.lr``."""

    def train_step(state: PreferenceState, batch=None):
        del batch
        key, kb, kl = jax.random.split(state.key, 3)
        idx = jax.random.randint(kb, (cfg.batch_size,), 0, cfg.num_pairs)
        x_w, x_l = constrain_leading((state.pairs_w[idx], state.pairs_l[idx]), mesh)

        def loss_fn(params):
            return pref_lib.preference_loss(
                kl,
                model.eps_fn(params),
                model.eps_fn(state.ref_params),
                x_w,
                x_l,
                model.schedule,
                method=cfg.method,
                beta=state.hparams["beta"],
                stop_grad_weight=cfg.stop_grad_weight,
                variant=cfg.variant,
            )

        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        opt = optim.from_hparams(cfg.optim, cfg.loop.total_steps, state.hparams)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new = state.replace(params=params, opt_state=opt_state, key=key, step=state.step + 1)
        return new, {"loss": loss, **metrics}

    return train_step


def tilted_target(cfg: PreferenceConfig, model: DiffusionModel, a: jax.Array):
    """Samples of the tilted target p_data(x) e^{reward_scale r(x)} / Z on 2-D data (a Gaussian
    mixture again), or None on images."""
    if model.data_shape != (2,):
        return None
    ring = ring_of(model.cfg.data)
    return ring.tilt(cfg.reward_scale * a, 1.0).sample(jax.random.PRNGKey(99), cfg.eval_samples)


def make_measure(cfg: PreferenceConfig, model: DiffusionModel, a: jax.Array, target):
    """The jitted ``state -> (measures, samples)``: mean reward of the fine-tuned and of the
    reference model's samples, the implicit accuracy on held-out pairs and, with a ``target``,
    the sliced Wasserstein distance of both to it."""

    @jax.jit
    def measure(state: PreferenceState):
        k = jax.random.PRNGKey(cfg.seed + 5)
        xs = model.generate(k, state.params, cfg.eval_samples, SPEC, cfg.eval_nfe, "logsnr")
        xr = model.generate(k, state.ref_params, cfg.eval_samples, SPEC, cfg.eval_nfe, "logsnr")
        out = {
            "reward": jnp.mean(_rewards(a, xs)),
            "reward_reference": jnp.mean(_rewards(a, xr)),
            "implicit_acc": pref_lib.implicit_accuracy(
                jax.random.PRNGKey(3),
                model.eps_fn(state.params),
                model.eps_fn(state.ref_params),
                state.holdout_w,
                state.holdout_l,
                model.schedule,
            ),
        }
        if target is not None:
            kp = jax.random.PRNGKey(4)
            out["sw_to_tilted"] = sliced_wasserstein(kp, xs, target)
            out["sw_to_tilted_reference"] = sliced_wasserstein(kp, xr, target)
        return out, xs

    return measure


def write_samples(measure, target, state: PreferenceState, run_dir: Path) -> None:
    """``samples.png``: a scatter plot over the tilted target (2-D) or an image grid."""
    xs = np.asarray(measure(state)[1])
    if target is not None:
        save_scatter(run_dir / "samples.png", xs, reference=np.asarray(target))
    else:
        save_image_grid(run_dir / "samples.png", xs[:100], ncols=10)

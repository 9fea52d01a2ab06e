"""``preference``: fine-tune a pretrained diffusion model on preference pairs (DSPO, Diffusion-DPO, SFT).

The reference model is the EMA model of a ``diffusion`` run (``pretrained=RUN_DIR``), or, when
``pretrained`` is empty, a model trained at initialisation with the nested ``reference`` config of
the ``diffusion`` recipe for ``reference.loop.total_steps`` steps. Pairs are drawn from the
reference model (two independent samples each) and labelled by Bradley-Terry with a linear reward:
P(a preferred to b) = sigmoid(reward_scale (r(a) - r(b))), r(x) = a.x with ``reward_direction`` on
2-D data, and a = unit vector along (mean image of ``reward_digit`` - mean image) on digits.

Each step draws a batch of pairs and applies :func:`jaxlab.diffusion.preference.preference_loss`
(shared t and eps within a pair; the frozen reference gives the margin z). ``evaluate`` reports the
mean reward of samples of the fine-tuned and of the reference model, the implicit accuracy (margin
> 0) on held-out pairs, and on 2-D data the sliced Wasserstein distance of both to the analytically
tilted target p_data(x) e^{reward_scale r(x)} / Z (a Gaussian mixture again).

Data parallel: the stored pairs are split over the mesh's data axes and each step's batch of pairs
is constrained to be split the same way (parameters replicated). Traced hyper-parameters
(``state.hparams``): ``optim.lr`` (the optimizer is built from it inside the step) and ``beta``
(the DPO/DSPO preference weight); the reward scale labels the pairs at ``init`` and is static, as are
``method``, ``variant`` and ``stop_grad_weight``, which select the loss.
"""

from __future__ import annotations

import dataclasses
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
from jaxlab.core.recipe import Parts, Recipe, register
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

#: the traced hyper-parameters (config keys)
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
        if not 0 <= self.reward_digit <= 9:
            raise ConfigError("reward_digit", self.reward_digit, "a digit 0..9")
        for name in ("num_pairs", "num_holdout_pairs", "batch_size", "eval_samples", "pair_nfe"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.eval_nfe < 1:
            raise ConfigError("eval_nfe", self.eval_nfe, "an integer >= 1")


@flax.struct.dataclass
class PreferenceState:
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


def _reward_vector(model: DiffusionModel, cfg: PreferenceConfig) -> jax.Array:
    if model.data_shape == (2,):
        a = jnp.asarray(cfg.reward_direction, jnp.float32)
        if a.shape != (2,):
            raise ConfigError("reward_direction", cfg.reward_direction, "two numbers for 2-D data")
        return a
    images, labels = digits_images(), digits_labels()
    d = images[labels == cfg.reward_digit].mean(0) - images.mean(0)
    return jnp.asarray(d / np.linalg.norm(d))


def build(cfg: PreferenceConfig, mesh: jax.sharding.Mesh) -> Parts:
    if cfg.pretrained:
        model, pretrained_params = load_model(cfg.pretrained)
        if model.cfg.parametrization != "eps":
            raise ConfigError(
                "pretrained", cfg.pretrained, "a diffusion run with parametrization=eps"
            )
        ref_init = ref_step = None
    else:
        model, pretrained_params = make_model(cfg.reference), None
        ref_init = diffusion_training.make_init(model)
        ref_step = diffusion_training.make_train_step(
            model, diffusion_training.make_data(cfg.reference)[0], mesh
        )
    a = _reward_vector(model, cfg)
    spec = SamplerSpec("dpm_solver++", 2)
    opt = optim.make(cfg.optim, cfg.loop.total_steps)

    def reward(x):
        return x.reshape(x.shape[0], -1) @ a.reshape(-1)

    def pretrain(key):
        state = ref_init(key)
        state, _ = jax.lax.scan(
            lambda s, _: ref_step(s), state, None, length=cfg.reference.loop.total_steps
        )
        return state.ema_params

    def init(key):
        kp, ka, kb, kl, kh, kk = jax.random.split(key, 6)
        ref = pretrained_params if pretrained_params is not None else pretrain(kp)
        n, m = cfg.num_pairs, cfg.num_holdout_pairs
        xs = model.generate(ka, ref, 2 * (n + m), spec, cfg.pair_nfe, "logsnr")
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

    def state_sharding(abstract: PreferenceState) -> PreferenceState:
        out = state_shardings(abstract, mesh)
        pairs = {f: leading_axis_sharding(getattr(abstract, f).shape, mesh) for f in PAIRS}
        return out.replace(**pairs)

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

    ring = ring_of(model.cfg.data) if model.data_shape == (2,) else None
    target = None
    if ring is not None:
        target = ring.tilt(cfg.reward_scale * a, 1.0).sample(
            jax.random.PRNGKey(99), cfg.eval_samples
        )

    @jax.jit
    def measure(state: PreferenceState):
        k = jax.random.PRNGKey(cfg.seed + 5)
        xs = model.generate(k, state.params, cfg.eval_samples, spec, cfg.eval_nfe, "logsnr")
        xr = model.generate(k, state.ref_params, cfg.eval_samples, spec, cfg.eval_nfe, "logsnr")
        out = {
            "reward": jnp.mean(reward(xs)),
            "reward_reference": jnp.mean(reward(xr)),
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

    def evaluate(state) -> dict[str, float]:
        return {k: float(v) for k, v in measure(state)[0].items()}

    def finalize(state, run_dir: Path) -> None:
        xs = np.asarray(measure(state)[1])
        if target is not None:
            save_scatter(run_dir / "samples.png", xs, reference=np.asarray(target))
        else:
            save_image_grid(run_dir / "samples.png", xs[:100], ncols=10)

    return Parts(
        init=init,
        train_step=train_step,
        state_sharding=state_sharding,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.batch_size, "pair"),
    )


RECIPE = register(
    Recipe(
        name="preference",
        config_cls=PreferenceConfig,
        build=build,
        description="preference fine-tuning of a diffusion model: DSPO, Diffusion-DPO or SFT",
        traced=TRACED,
    )
)

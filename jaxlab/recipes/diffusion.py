"""``diffusion``: train a diffusion model (MLP on a 2-D mixture, U-Net or DiT on 8x8 digits).

Training is :mod:`jaxlab.diffusion.training` (DSM or EDM loss, ``optim``: Adam with warm-up and
clipping, EMA of the weights used for sampling; traced ``optim.lr`` and ``ema_decay``; batches drawn
inside the step and split over the mesh's data axes, parameters replicated). Evaluation samples with any sampler of
``jaxlab.diffusion.samplers`` and reports the sliced Wasserstein distance to held-out data;
``finalize`` writes ``samples.png`` (an image grid or a scatter plot) into the run directory.

The trained model of a run is reopened by :func:`jaxlab.diffusion.pretrained.load_model` (for
``ld3`` and ``preference``).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion import training
from jaxlab.diffusion.config import DiffusionConfig
from jaxlab.diffusion.images import save_image_grid, save_scatter
from jaxlab.diffusion.model import make_model, ring_of
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein
from jaxlab.diffusion.training import DiffusionState

__all__ = ["DiffusionConfig", "RECIPE", "build"]


def build(cfg: DiffusionConfig, mesh: jax.sharding.Mesh) -> Parts:
    model = make_model(cfg)
    sample_data, holdout = training.make_data(cfg)
    s = cfg.sampling

    @jax.jit
    def generate(params):
        return model.generate(
            jax.random.PRNGKey(cfg.seed + 1), params, s.num_samples, s.spec, s.nfe, s.steps
        )

    def evaluate(state: DiffusionState) -> dict[str, float]:
        xs = generate(state.ema_params)
        flat = xs.reshape(xs.shape[0], -1)
        ref = jnp.asarray(holdout).reshape(holdout.shape[0], -1)
        sw = sliced_wasserstein(jax.random.PRNGKey(1), flat, ref, num_projections=256)
        out = {"sw_to_data": float(sw), "sample_std": float(jnp.std(flat))}
        if cfg.data.name == "ring":
            out["sample_log_lik"] = float(jnp.mean(ring_of(cfg.data).log_prob(flat)))
        return out

    def finalize(state: DiffusionState, run_dir: Path) -> None:
        xs = np.asarray(generate(state.ema_params))
        if cfg.data.name == "ring":
            save_scatter(run_dir / "samples.png", xs[:2000], reference=holdout[:2000])
        else:
            save_image_grid(run_dir / "samples.png", xs[:100], ncols=10, upscale=4)
            save_image_grid(run_dir / "data.png", holdout[:100], ncols=10, upscale=4)

    return Parts(
        init=training.make_init(model),
        train_step=training.make_train_step(model, sample_data, mesh),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.batch_size, "ex"),
    )


RECIPE = register(
    Recipe(
        name="diffusion",
        config_cls=DiffusionConfig,
        build=build,
        description="diffusion model (MLP on a 2-D ring, U-Net/DiT on 8x8 digits), EMA, any sampler",
        traced=training.TRACED,
    )
)

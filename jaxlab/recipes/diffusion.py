"""``diffusion``: train a diffusion model (MLP on a 2-D mixture, U-Net or DiT on 8x8 digits).

Training is :mod:`jaxlab.diffusion.training` (DSM or EDM loss, ``optim``: Adam with warm-up and
clipping, EMA of the weights used for sampling; traced ``optim.lr`` and ``ema_decay``; batches
drawn inside the step and split over the mesh's data axes, parameters replicated). Evaluation
(:mod:`jaxlab.diffusion.evaluation`) samples with any sampler of ``jaxlab.diffusion.samplers``
and reports the sliced Wasserstein distance to held-out data; ``finalize`` writes ``samples.png``
(an image grid or a scatter plot) into the run directory.

The trained model of a run is reopened by :func:`jaxlab.diffusion.pretrained.load_model` (for
``ld3`` and ``preference``).
"""

from __future__ import annotations

import jax

from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion import evaluation, training
from jaxlab.diffusion.config import DiffusionConfig
from jaxlab.diffusion.model import make_model

__all__ = ["DiffusionConfig", "RECIPE", "build"]


def build(cfg: DiffusionConfig, mesh: jax.sharding.Mesh) -> Parts:
    model = make_model(cfg)
    sample_data, holdout = training.make_data(cfg)
    generate = evaluation.make_generate(cfg, model)
    return Parts(
        init=training.make_init(model),
        train_step=training.make_train_step(model, sample_data, mesh),
        evaluate=lambda state: evaluation.evaluate(cfg, generate, holdout, state.ema_params),
        finalize=lambda state, run_dir: evaluation.write_samples(
            cfg, generate, holdout, state.ema_params, run_dir
        ),
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

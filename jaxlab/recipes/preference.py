"""``preference``: fine-tune a pretrained diffusion model on preference pairs (DSPO, Diffusion-DPO, SFT).

The run is :mod:`jaxlab.diffusion.preference_run`: the reference (``pretrained=RUN_DIR``, a
``diffusion`` run, or the nested ``reference`` config trained at initialisation), pairs drawn from
it and labelled by Bradley-Terry with a linear reward, :func:`jaxlab.diffusion.preference.
preference_loss` on batches of pairs, ``optim`` (Adam with a warm-up and clipping). ``evaluate``
reports the mean reward of samples of the fine-tuned and of the reference model, the implicit
accuracy (margin > 0) on held-out pairs, and on 2-D data the sliced Wasserstein distance of both to
the analytically tilted target p_data(x) e^{reward_scale r(x)} / Z (a Gaussian mixture again).

Data parallel: the stored pairs are split over the mesh's data axes and each step's batch of pairs
is constrained to be split the same way (parameters replicated). Traced hyper-parameters
(``state.hparams``): ``optim.lr`` and ``beta`` (the DPO/DSPO preference weight).
"""

from __future__ import annotations

import jax

from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion import preference_run as run
from jaxlab.diffusion.preference_run import PreferenceConfig

__all__ = ["PreferenceConfig", "RECIPE", "build"]


def build(cfg: PreferenceConfig, mesh: jax.sharding.Mesh) -> Parts:
    model, reference_fn = run.reference(cfg, mesh)
    a = run.reward_vector(model, cfg)
    target = run.tilted_target(cfg, model, a)
    measure = run.make_measure(cfg, model, a, target)
    return Parts(
        init=run.make_init(cfg, model, reference_fn, a),
        train_step=run.make_train_step(cfg, model, mesh),
        state_sharding=run.pair_sharding(mesh),
        evaluate=lambda state: {k: float(v) for k, v in measure(state)[0].items()},
        finalize=lambda state, run_dir: run.write_samples(measure, target, state, run_dir),
        units_per_step=(cfg.batch_size, "pair"),
    )


RECIPE = register(
    Recipe(
        name="preference",
        config_cls=PreferenceConfig,
        build=build,
        description="preference fine-tuning of a diffusion model: DSPO, Diffusion-DPO or SFT",
        traced=run.TRACED,
    )
)

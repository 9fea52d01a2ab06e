"""``ld3``: learn the time steps of a few-NFE solver by distilling a many-NFE teacher (LD3).

``jaxlab train ld3 ld3.sampler.name=dpm_solver++ ld3.nfe=4`` learns 4-NFE DPM-Solver++ steps for
the analytic 2-D ring mixture (EDM schedule, exact denoiser: no training needed); ``model=checkpoint
checkpoint=RUN_DIR`` learns them for a model trained by the ``diffusion`` recipe. The teacher's
(noise, output) pairs are generated once when the task is built; each loop step is one LD3
iteration (:func:`jaxlab.diffusion.ld3.ld3_step`), a no-op once LD3's own stopping rule fires.

The per-sample pieces of the LD3 state (training and validation latents, their original noise and
the teacher's outputs) are split over the mesh's data axes; the learned step parameters are
replicated. ``optim`` (:class:`jaxlab.diffusion.ld3.LD3Optim`) holds LD3's three rules by role:
``optim.time`` (RMSprop on the time steps), ``optim.eval_time`` (SGD on the decoupled evaluation
times) and ``optim.shift`` (the latent shift step), with their plateau decays and floors. Traced
hyper-parameters (``state.hparams``): the starting rates ``optim.time.lr``, ``optim.eval_time.lr``
and ``optim.shift.lr``, set into the LD3 state at the first step (LD3 decays them itself); the
other ``LD3Hyper`` values enter the validation at ``init`` and stay static.

``evaluate`` compares the learned steps with the time-uniform, time-quadratic, logSNR-uniform and
EDM baselines on held-out noise (mean squared L2 to the teacher's outputs and sliced Wasserstein
distance to the teacher's samples). ``finalize`` writes ``steps.json`` (the learned integration and
evaluation steps, which every sampler accepts: see :func:`jaxlab.diffusion.ld3.load_time_steps`)
and ``comparison.json``.
"""

from __future__ import annotations

import jax

from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion import ld3_run
from jaxlab.diffusion.ld3_run import LD3Config

__all__ = ["LD3Config", "RECIPE", "build"]


def build(cfg: LD3Config, mesh: jax.sharding.Mesh) -> Parts:
    problem = ld3_run.make_problem(cfg)
    compare = ld3_run.make_compare(cfg, problem)
    return Parts(
        init=ld3_run.make_init(cfg, problem),
        train_step=ld3_run.make_train_step(cfg, problem),
        state_sharding=ld3_run.per_sample_sharding(mesh),
        evaluate=lambda state: ld3_run.evaluate(compare, state),
        finalize=lambda state, run_dir: ld3_run.write_steps(cfg, problem, compare, state, run_dir),
    )


RECIPE = register(
    Recipe(
        name="ld3",
        config_cls=LD3Config,
        build=build,
        description="LD3: learn few-NFE solver time steps by distilling a many-NFE teacher",
        traced=ld3_run.TRACED,
    )
)

"""``planner``: Diffusion Planner (``jaxlab.diffusion.planner``) trained on expert logs of the
driving world (``jaxlab.envs.driving``) and evaluated in closed loop.

Data (:mod:`jaxlab.diffusion.planner_data`): the expert's logs, made once on the host when the
data iterator is first created (so building or lowering the recipe stays cheap) and served by a
grain loader whose position is checkpointed with the run; the batch is an input of the train step,
split over the mesh's data axes (parameters replicated), never a constant of the compiled program.
Training (:mod:`jaxlab.diffusion.planner_training`): the ego state perturbation, the x_0 loss,
``optim`` (AdamW with a warm-up; ``decay_fraction`` adds a decay tail), the EMA of the weights used
for sampling; traced ``optim.lr``, ``optim.weight_decay`` and ``ema_decay``.

Evaluation (:mod:`jaxlab.diffusion.planner_eval`): open-loop ADE/FDE of the sampled ego plans
against held-out expert logs and the closed-loop score of the guided planner on ``eval_scenes``
scenes of ``eval_steps`` steps at 10 Hz. ``jaxlab eval planner --run-dir DIR`` prints the closed-loop
table of the expert, the constant-velocity planner and the diffusion planner without and with
guidance, and writes ``planner.gif`` (sampled plans and neighbour predictions on a few scenes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax

from jaxlab.core import json_files
from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion import planner_data, planner_eval, planner_training
from jaxlab.diffusion.planner_config import PlannerRunConfig

__all__ = ["PlannerRunConfig", "RECIPE", "build"]


def build(cfg: PlannerRunConfig, mesh: jax.sharding.Mesh) -> Parts:
    def evaluate(state) -> dict[str, float]:
        return planner_eval.evaluate_run(cfg, state.ema_params, planners=("diffusion",))

    def finalize(state, run_dir: Path) -> None:
        if cfg.gif_scenes > 0:
            path = run_dir / "planner.gif"
            planner_eval.write_gif(cfg, state.ema_params, path, n_scenes=cfg.gif_scenes, steps=20)

    return Parts(
        init=planner_training.make_init(cfg),
        train_step=planner_training.make_train_step(cfg),
        abstract_batch=planner_data.abstract_batch(cfg, mesh),
        data=lambda: planner_data.train_iterator(
            cfg, shard_index=jax.process_index(), shard_count=jax.process_count()
        ),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.batch_size, "ex"),
    )


def eval_main(cfg: PlannerRunConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval planner --run-dir DIR [--scenes N] [--steps T] [--seed S] [--json]
    [--no-gif]``: the closed-loop table (score = no-collision x drivable x making-progress x
    (5 TTC + 5 progress + 4 speed + 2 comfort) / 16, x100) and ``planner.gif``."""
    from jaxlab.core.run import open_run

    p = argparse.ArgumentParser(prog="jaxlab eval planner")
    p.add_argument("--scenes", type=int, default=cfg.eval_scenes)
    p.add_argument("--steps", type=int, default=cfg.eval_steps)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-gif", action="store_true")
    args = p.parse_args(argv)
    for name in ("scenes", "steps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", getattr(args, name), "an integer >= 1")
    run = open_run(run_dir, recipe=RECIPE)
    params, rcfg = run.state.ema_params, run.cfg
    res = planner_eval.evaluate_run(
        rcfg, params, seed=args.seed, n_scenes=args.scenes, steps=args.steps
    )
    if args.json:
        print(json_files.dumps({"step": run.step, **res}, where="the evaluation"))
    else:
        print(f"checkpoint step {run.step} of {run_dir}; guidance {rcfg.model.guidance}")
        print(
            f"open loop: ADE {res['open_loop/ade']:.3f} m, FDE {res['open_loop/fde']:.3f} m "
            f"(horizon {rcfg.model.horizon} x 0.1 s)"
        )
        print(planner_eval.format_table(res, planner_eval.PLANNERS))
    if not args.no_gif:
        gif = Path(run_dir) / "planner.gif"
        planner_eval.write_gif(rcfg, params, gif, n_scenes=3, steps=30)
        print(f"wrote {gif}")
    return 0


RECIPE = register(
    Recipe(
        name="planner",
        config_cls=PlannerRunConfig,
        build=build,
        description="Diffusion Planner: joint prediction + planning in the driving world, guidance",
        traced=planner_training.TRACED,
        eval_main=eval_main,
    )
)

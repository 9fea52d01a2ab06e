"""Zero-shot and fine-tuning evidence for the Kinetix general agent (paper §5-6), as JSON lines.

1. **Pretrain** the entity-transformer agent with SFL for ``--updates`` PPO updates of
   ``--envs x --steps`` env steps on random S levels (``env.train_levels=random``, the procedural
   generator). While the generator is not installed, it pretrains instead on the human-designed
   M levels at size M (``--fallback-levels``) and the S evaluation below is then a zero-shot
   *transfer* to unseen levels of another size (the transformer reads any entity count).
   Prints ``{"what": "pretrain", ...}`` every ``--log-every`` updates.
2. **Zero-shot**: solve rate of the pretrained agent on every S human-designed level
   (``--eval-levels``; ``--attempts`` attempts each) next to a random and a no-op policy:
   ``{"what": "zero_shot", "level", "agent", "random", "noop", ...}`` and a summary line.
3. **Fine-tuning vs tabula rasa** on ``--finetune-levels``: the pretrained parameters
   (``init_from``, fresh optimiser) against a freshly initialised agent, same hyper-parameters
   and keys, ``--finetune-seeds`` seeds in one vmapped program, evaluation solve rate
   (``--finetune-attempts`` attempts) of every seed every ``--eval-every`` updates:
   ``{"what": "finetune", "level", "init": "pretrained"|"scratch", "update", "env_steps",
   "solve_rate": [per seed]}``, then ``finetune_summary`` with each seed's and the median env
   steps to a 0.9 solve rate.

Budgets: the defaults run in tens of CPU-minutes and only show the pipeline; the paper's effect
needs ~1B pretraining steps (an accelerator, ``tpu_configs/kinetix-ppo-*.yaml``).

Usage: ``python -m experiments.kinetix_zero_shot.kinetix_zero_shot [--updates 40] [--max-minutes M]
[--envs 64] [--steps 64] [--net transformer|mlp] [--finetune-updates 20] [--finetune-seeds 3]
[--run-dir runs/zero-shot] [--skip-pretrain] [--skip-zero-shot] [--skip-finetune]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.loop import Hook
from jaxlab.envs.kinetix import level_sets
from jaxlab.recipes import kinetix_ppo as kp
from jaxlab.rl import evaluate as ev
from jaxlab.rl import kinetix_eval as ke

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "kinetix-levels"


def emit(**row) -> None:
    row.setdefault("load", round(os.getloadavg()[0], 1))
    print(json.dumps(row), flush=True)


def small_transformer(args) -> dict:
    """Overrides shared by every run of this script (PPO sizes; the network: the paper's entity
    transformer, or ``--net mlp`` on flat observations, several times cheaper on a CPU)."""
    mb = max(1, args.envs * args.steps // 512)
    net = (
        {"network.kind": "mlp", "env.observation_type": "symbolic_flat"}
        if args.net == "mlp"
        else {"network.kind": "transformer", "env.observation_type": "symbolic_entity"}
    )
    return net | {
        "ppo.num_envs": args.envs,
        "ppo.num_steps": args.steps,
        "ppo.num_minibatches": mb,
        "ppo.update_epochs": args.epochs,
        "optim.lr": args.lr,
        "eval.num_attempts": args.attempts,
        "eval.gif_levels": 0,
        "loop.progress": False,
        "loop.eval_every": 0,
    }


def pretrain(args, recipe) -> tuple[kp.KinetixPPOConfig, Path]:
    base = recipe.config("s-pretrain")
    over = small_transformer(args)
    over.update(
        {
            "curriculum.sfl.batch_size": args.sfl_batch,
            "curriculum.sfl.num_batches": 1,
            "curriculum.sfl.buffer_size": args.sfl_buffer,
            "curriculum.sfl.rollout_steps": args.sfl_steps,
            "curriculum.sfl.update_every": args.sfl_every,
            "loop.total_steps": args.updates,
            "loop.steps_per_call": 1,
            "loop.log_every": args.log_every,
            "loop.checkpoint_every": 0,
            "eval.levels": args.eval_levels,
        }
    )
    cfg = C.replace(base, **over)
    if level_sets.generator_available():
        source = "random S levels (procedural generator)"
    else:
        cfg = C.replace(cfg, **{"env.size": "m", "env.train_levels": args.fallback_levels})
        source = f"fallback: human M levels at size M ({args.fallback_levels})"
    emit(
        what="pretrain_setup",
        levels=source,
        size=cfg.env.size,
        updates=args.updates,
        envs=args.envs,
        steps=args.steps,
        curriculum=cfg.curriculum.kind,
        net=cfg.network.kind,
        noop_filter=cfg.env.noop_filter,
    )
    run_dir = Path(args.run_dir) / "pretrain"
    if args.skip_pretrain:  # reuse the run's latest checkpoint as it is
        return cfg, run_dir
    per = cfg.ppo.num_envs * cfg.ppo.num_steps
    t0, c0 = time.perf_counter(), time.process_time()

    def log(step, state, metrics):
        if args.max_minutes and time.perf_counter() - t0 > 60 * args.max_minutes:
            # The loop checkpoints and stops cleanly on SIGTERM; the zero-shot stage then
            # evaluates that checkpoint.
            os.kill(os.getpid(), signal.SIGTERM)
        emit(
            what="pretrain",
            update=step,
            env_steps=step * per,
            train_solve_rate=round(float(metrics["solve_rate"]), 3),
            train_return=round(float(metrics["episode_return"]), 3),
            sfl_buffer_learnability=round(float(metrics.get("sfl/buffer_learnability", 0)), 4),
            wall_s=round(time.perf_counter() - t0, 1),
            cpu_s=round(time.process_time() - c0, 1),
        )

    loop.run(recipe, cfg, run_dir, hooks=[Hook(log, args.log_every)])
    return cfg, run_dir


def zero_shot(args, cfg, run_dir) -> None:
    run = run_lib.open_run(run_dir, recipe="kinetix-ppo", cfg=cfg)
    state = run.state
    evaluator = ke.Evaluator(
        kp.agent(cfg), args.eval_levels, num_attempts=args.attempts, max_steps=cfg.env.max_timesteps
    )
    key = jax.random.PRNGKey(args.seed)
    names, agent, _ = evaluator(state, key)
    rand = evaluator(state, key, "random")[1]
    noop = evaluator(state, key, "noop")[1]
    for i, n in enumerate(names):
        emit(
            what="zero_shot",
            level=n,
            agent=round(float(agent.solve_rate[i]), 3),
            random=round(float(rand.solve_rate[i]), 3),
            noop=round(float(noop.solve_rate[i]), 3),
            agent_return=round(float(agent.mean_return[i]), 3),
            attempts=args.attempts,
        )
    emit(
        what="zero_shot_summary",
        levels=len(names),
        agent=round(float(np.mean(agent.solve_rate)), 3),
        random=round(float(np.mean(rand.solve_rate)), 3),
        noop=round(float(np.mean(noop.solve_rate)), 3),
    )
    print(
        ev.format_table(names, agent, extra={"random": rand.solve_rate, "noop": noop.solve_rate}),
        flush=True,
    )


def _first_crossing(curve: list[tuple[int, float]], bar: float = 0.9) -> int | None:
    """Env steps of the first evaluation whose solve rate is at least ``bar`` (None: never)."""
    return next((steps for steps, rate in curve if rate >= bar), None)


def finetune(args, recipe, pre_cfg, pre_dir) -> None:
    """Per level and init, the eval solve-rate curve of every seed and the env steps to reach 0.9.

    ``--finetune-seeds`` seeds train in one vmapped program (same keys for both inits); the
    pretrained parameters get a fresh optimiser. A seed that never reaches 0.9 counts as the
    budget + one evaluation interval in the median, so the median is conservative for the
    pretrained agent whenever it fails more often than scratch.
    """
    seeds = args.finetune_seeds
    for level in args.finetune_levels.split(","):
        name = ev.level_name(Path(level))
        evaluator = None
        for init in ("pretrained", "scratch"):
            over = small_transformer(args)
            over.update(
                {
                    "env.size": "s",
                    "env.train_levels": level,
                    "init_from": str(pre_dir) if init == "pretrained" else "",
                    "loop.total_steps": args.finetune_updates,
                    "eval.num_attempts": args.finetune_attempts,
                }
            )
            cfg = C.replace(recipe.config("finetune"), **over)
            parts = run_lib.build(recipe, cfg, jax.devices()[:1])
            keys = jax.random.split(jax.random.PRNGKey(args.seed), seeds)
            # Seeds initialised one by one and stacked: vmapping the init (orthogonal
            # initialisers) compiles far slower on XLA:CPU than the init itself runs. The
            # pretrained parameters come in through the recipe's finetune (open_run).
            states = [recipe.finetune(cfg, run_lib.init_state(parts, k)) for k in keys]
            state = jax.tree.map(lambda *x: jnp.stack(x), *states)
            step = jax.jit(
                jax.vmap(functools.partial(parts.train_step, batch=None)), donate_argnums=0
            )
            if evaluator is None:  # the evaluation takes parameters as arguments: share it
                evaluator = ke.Evaluator(
                    kp.agent(cfg),
                    level,
                    num_attempts=args.finetune_attempts,
                    max_steps=cfg.env.max_timesteps,
                )
            per = cfg.ppo.num_envs * cfg.ppo.num_steps
            curves: list[list[tuple[int, float]]] = [[] for _ in range(seeds)]
            t0 = time.perf_counter()
            for u in range(args.finetune_updates + 1):
                if u % args.eval_every == 0:
                    rates = []
                    for i in range(seeds):
                        one = jax.tree.map(lambda x, i=i: x[i], state)
                        _, res, _ = evaluator(one, jax.random.PRNGKey(1000 + u))
                        curves[i].append((u * per, float(res.solve_rate[0])))
                        rates.append(round(float(res.solve_rate[0]), 3))
                    emit(
                        what="finetune",
                        level=name,
                        init=init,
                        update=u,
                        env_steps=u * per,
                        solve_rate=rates,
                        mean_solve_rate=round(float(np.mean(rates)), 3),
                        wall_s=round(time.perf_counter() - t0, 1),
                    )
                if u < args.finetune_updates:
                    state, _ = step(state)
            reached = [_first_crossing(c) for c in curves]
            never = (args.finetune_updates + args.eval_every) * per
            emit(
                what="finetune_summary",
                level=name,
                init=init,
                seeds=seeds,
                env_steps_to_0_9=reached,
                median_env_steps_to_0_9=float(
                    np.median([never if r is None else r for r in reached])
                ),
                reached=sum(r is not None for r in reached),
                budget_env_steps=args.finetune_updates * per,
                attempts=args.finetune_attempts,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=40, help="pretraining PPO updates")
    ap.add_argument(
        "--max-minutes", type=float, default=0.0, help="stop pretraining after this wall time"
    )
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--sfl-batch", type=int, default=128)
    ap.add_argument("--sfl-buffer", type=int, default=32)
    ap.add_argument("--sfl-steps", type=int, default=128)
    ap.add_argument("--sfl-every", type=int, default=10)
    ap.add_argument("--attempts", type=int, default=10)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--eval-levels", default=str(SHARED / "s"))
    ap.add_argument("--fallback-levels", default=str(SHARED / "m"))
    ap.add_argument(
        "--finetune-levels",
        default=f"{SHARED / 's' / 'h4_thrust_aim.json'},{SHARED / 's' / 'h2_one_wheel_car.json'}",
    )
    ap.add_argument("--finetune-updates", type=int, default=20)
    ap.add_argument("--finetune-seeds", type=int, default=1, help="seeds per fine-tuning run")
    ap.add_argument(
        "--finetune-attempts", type=int, default=0, help="attempts per evaluation (0: --attempts)"
    )
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--net", choices=("transformer", "mlp"), default="transformer")
    ap.add_argument("--run-dir", default="runs/kinetix-zero-shot")
    ap.add_argument("--skip-finetune", action="store_true")
    ap.add_argument(
        "--skip-pretrain", action="store_true", help="use --run-dir's pretrained checkpoint as is"
    )
    ap.add_argument("--skip-zero-shot", action="store_true")
    ap.add_argument("--no-xla-cache", action="store_true", help="disable the compilation cache")
    args = ap.parse_args()
    args.finetune_attempts = args.finetune_attempts or args.attempts
    if not args.no_xla_cache:
        # The fine-tuning runs share shapes with each other: compile each program once.
        jax.config.update("jax_compilation_cache_dir", str(Path(args.run_dir) / "xla_cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    recipe = recipe_lib.get("kinetix-ppo")
    cfg, run_dir = pretrain(args, recipe)
    if not args.skip_zero_shot:
        zero_shot(args, cfg, run_dir)
    if not args.skip_finetune:
        finetune(args, recipe, cfg, run_dir)


if __name__ == "__main__":
    main()

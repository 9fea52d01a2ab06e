"""Guided vs unguided Diffusion Planner in closed loop: do the guidance energies
(:mod:`jaxlab.diffusion.planner_energies`) lower collisions while the executed plans stay
physical? Per scenario set (``--seeds``, each a fresh set of ``--scenes`` scenes of ``--steps``
steps at 10 Hz): collision, off-road (drivable, off-road time), progress, comfort, and the
plan-quality rates of :mod:`jaxlab.envs.driving.evaluation` (jump > 2 m per 0.1 s, backward step,
largest jump), overall and on straight roads; the expert's and the unguided planner's rows as
references. JSON lines on stdout, and a markdown table with ``--md PATH``.

Run: ``python -m experiments.planner_guidance.guidance_physics --run-dir R --seeds 1,2,3`` for a
trained run (``jaxlab train planner --preset cpu --run-dir R``), or without ``--run-dir`` to
train a short ``cpu``-preset planner first (``--train-steps``, ``--train-scenes``) into
``--train-dir``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import numpy as np

from jaxlab.core.loop import run as run_loop
from jaxlab.core.run import open_run
from jaxlab.diffusion import planner_data
from jaxlab.diffusion.planner_eval import planner_plan_fn
from jaxlab.envs.driving import evaluation as de
from jaxlab.recipes import planner as rp

KEYS = (
    "collision",
    "drivable",
    "offroad_time",
    "progress",
    "comfortable",
    "jump_rate",
    "backward_rate",
    "max_jump",
    "jump_rate_straight",
    "backward_rate_straight",
    "score",
)


def train_short(run_dir: Path, steps: int, scenes: int):
    """A ``cpu``-preset planner trained for ``steps`` steps on ``scenes`` expert scenes."""
    cfg = rp.RECIPE.config(
        "cpu",
        [
            f"loop.total_steps={steps}",
            f"n_scenes={scenes}",
            "loop.checkpoint_every=0",
            "loop.progress=false",
            "gif_scenes=0",
        ],
    )
    res = run_loop(rp.RECIPE, cfg, run_dir)
    return cfg, res.state.ema_params


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--train-dir", default="/tmp/planner_guidance_run")
    ap.add_argument("--train-steps", type=int, default=1500)
    ap.add_argument("--train-scenes", type=int, default=256)
    ap.add_argument(
        "--variants", default=None, help="'collision:0.5;collision:0.5+drivable:60' (the run's)"
    )
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--scenes", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--md", default=None)
    args = ap.parse_args(argv)
    if args.run_dir:
        run = open_run(args.run_dir, recipe=rp.RECIPE)
        cfg, params = run.cfg, run.state.ema_params
    else:
        cfg, params = train_short(Path(args.train_dir), args.train_steps, args.train_scenes)
    m = cfg.model
    variants = {"guided": m.guidance}
    if args.variants:
        variants = {
            v: tuple((n, float(w)) for n, w in (t.split(":") for t in v.split("+")))
            for v in args.variants.split(";")
        }
    env, params_w = planner_data.world(cfg)
    fns = {
        "expert": lambda p: de.expert_plan_fn(env, params_w),
        "unguided": lambda p: planner_plan_fn(m, p, guidance=()),
    }
    for name, g in variants.items():
        fns[name] = lambda p, g=g: planner_plan_fn(m, p, guidance=g)
    # one program per planner; the scenario set's key and the reference progress are arguments
    jitted = {
        name: jax.jit(
            lambda key, ep, p, f=f: de.closed_loop(
                key,
                env,
                params_w,
                f(p),
                n_scenes=args.scenes,
                steps=args.steps,
                expert_progress=ep,
            )
        )  # fmt: skip
        for name, f in fns.items()
    }
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        key = jax.random.PRNGKey(seed)
        expert = jitted["expert"](key, None, params)
        ref = expert["progress_m"]
        for name in fns:
            res = expert if name == "expert" else jitted[name](key, ref, params)
            s = de.summarize(res)
            row = {"planner": name, "seed": seed, **s}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.md:
        Path(args.md).write_text(table(rows, list(fns), m, args))
    return 0


def table(rows, planners, m, args) -> str:
    """Mean and (min, max) over the scenario sets per planner and metric."""
    lines = [
        f"guidance window {list(m.guidance_window)}; {args.scenes} scenes x {args.steps} steps "
        f"per set, sets {args.seeds}",
        "",
        "| planner | " + " | ".join(KEYS) + " |",
        "|---" * (len(KEYS) + 1) + "|",
    ]
    for name in planners:
        sel = [r for r in rows if r["planner"] == name]
        cells = []
        for k in KEYS:
            v = np.array([r.get(k, np.nan) for r in sel], float)
            cells.append(f"{v.mean():.3f} ({v.min():.3f}-{v.max():.3f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

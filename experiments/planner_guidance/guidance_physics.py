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

``--max-shifts 0,1,3`` runs every guided variant under each bound on a push's size
(``PlannerConfig.guidance_max_shift``, metres; 0 unbounded), and ``--shift-scenes N`` adds the
open-loop size of guidance: on N held-out expert scenes, the largest distance (m) between an ego
plan point sampled with and without guidance from the same noise (median, 90th percentile, max
over scenes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import jax
import numpy as np

from jaxlab.core.loop import run as run_loop
from jaxlab.core.run import open_run
from jaxlab.diffusion import planner as pl
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
    ap.add_argument("--max-shifts", default=None, help="'0,1,3' (m; default: the config's)")
    ap.add_argument("--shift-scenes", type=int, default=0)
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
    caps = [m.guidance_max_shift]
    if args.max_shifts:
        caps = [float(c) for c in args.max_shifts.split(",")]
    models = {
        f"{v} cap {c:g}" if len(caps) > 1 else v: (dataclasses.replace(m, guidance_max_shift=c), g)
        for v, g in variants.items()
        for c in caps
    }
    env, params_w = planner_data.world(cfg)
    fns = {
        "expert": lambda p: de.expert_plan_fn(env, params_w),
        "unguided": lambda p: planner_plan_fn(m, p, guidance=()),
    }
    for name, (mc, g) in models.items():
        fns[name] = lambda p, mc=mc, g=g: planner_plan_fn(mc, p, guidance=g)
    shifts = {}
    if args.shift_scenes:
        shifts = open_loop_shifts(cfg, params, models, args.shift_scenes)
        for name, row in shifts.items():
            print(json.dumps({"planner": name, **row}), flush=True)
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
    for seed in (int(s) for s in args.seeds.split(",") if s):
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
        Path(args.md).write_text(table(rows, list(fns), m, args) + shift_table(shifts))
    return 0


def open_loop_shifts(cfg, params, models, n_scenes: int) -> dict[str, dict[str, float]]:
    """Per guided model: the largest ego plan point distance (m) between guided and unguided
    samples from the same noise on held-out expert scenes; median, p90 and max over scenes."""
    held = planner_data.expert_data(cfg, "valid")
    n = min(n_scenes, held["future"].shape[0])
    sc = {k: v[:n] for k, v in held.items() if k in pl.SCENE_KEYS}
    key = jax.random.PRNGKey(0)
    base = jax.jit(lambda p, s: pl.sample_trajectories(p, key, s, cfg.model, guidance=()))(
        params, sc
    )
    out = {}
    for name, (mc, g) in models.items():
        got = jax.jit(lambda p, s, mc=mc, g=g: pl.sample_trajectories(p, key, s, mc, guidance=g))(
            params, sc
        )
        d = np.asarray(np.linalg.norm(np.asarray(got - base)[:, 0, :, :2], axis=-1).max(-1))
        out[name] = {
            "shift_p50": float(np.median(d)),
            "shift_p90": float(np.quantile(d, 0.9)),
            "shift_max": float(d.max()),
        }
    return out


def shift_table(shifts) -> str:
    if not shifts:
        return ""
    lines = [
        "",
        "Open-loop size of guidance: largest ego plan point distance (m) guided vs unguided, "
        "same noise, per held-out scene",
        "",
        "| planner | median | p90 | max |",
        "|---|---|---|---|",
    ]
    for name, r in shifts.items():
        lines.append(
            f"| {name} | {r['shift_p50']:.3f} | {r['shift_p90']:.3f} | {r['shift_max']:.3f} |"
        )
    return "\n".join(lines) + "\n"


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

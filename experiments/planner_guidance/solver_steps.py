"""How far are 10 DPM-Solver++ steps from 100, on the trained planner and on denoisers that
depend on x_t? And how much does the trained planner's data prediction depend on x_t?

The planner's network reads x_t as the original's does (the noisy (1 + T) x 4 trajectory of each
agent, flattened, through an MLP into the agent's token). Whether the trained network uses it is
measured here as the sensitivity |D(x_t + d) - D(x_t)| / |d| of its normalised data prediction
to a small perturbation d of x_t, at several t, next to the sensitivity alpha_t s^2 /
(alpha_t^2 s^2 + sigma_t^2) of the posterior mean of data spread s around it (Gaussian).

The step distance is the largest ego plan point distance (m) between ``--steps`` samples and a
``--ref-steps`` sample from the same noise on held-out expert scenes, for the trained network
(s = 0) and for the network's prediction wrapped as that posterior mean,
D_s(x_t) = mu + alpha_t s^2 / (alpha_t^2 s^2 + sigma_t^2) (x_t - alpha_t mu), mu the network's
prediction: a denoiser whose spread around the network's plan is s (normalised units).

Run: ``python -m experiments.planner_guidance.solver_steps --run-dir R --md OUT.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.run import open_run
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion import planner_data
from jaxlab.diffusion.model_wrapper import expand_to
from jaxlab.diffusion.schedules import VPLinear
from jaxlab.recipes import planner as rp


def posterior_fn(spread: float, schedule: VPLinear):
    """The ``x0_fn`` hook D_s of the module docstring (None for spread 0: the network itself)."""
    if spread == 0:
        return None

    def x0_fn(mu, x_t, t):
        a, sg = expand_to(schedule.alpha(t), x_t), expand_to(schedule.sigma(t), x_t)
        return mu + a * spread**2 / (a**2 * spread**2 + sg**2) * (x_t - a * mu)

    return x0_fn


def sensitivity(params, scene, future, cfg, schedule, ts, key) -> list[float]:
    """Mean over scenes of |D(x_t + d) - D(x_t)| / |d| (ego rows, normalised units), per t, with
    x_t noised from the expert's future (B, A, T, 4)."""
    enc = pl.make_net(cfg).apply(params, scene, method=pl.DiffusionPlannerNet.encode)
    b = scene["current"].shape[0]
    shape = (b, cfg.n_agents, 1 + cfg.horizon, 4)
    x0 = pl.normalize(cfg, jnp.concatenate([scene["current"][:, :, None], future], 2))
    k2 = key
    out = []
    for t in ts:
        tb = jnp.full((b,), t)
        a, sg = schedule.alpha(tb)[:, None, None, None], schedule.sigma(tb)[:, None, None, None]
        x_t = a * x0 + sg * jax.random.normal(k2, shape)
        d = 1e-2 * jax.random.normal(jax.random.fold_in(k2, 1), shape)
        d0 = pl.denoise(params, x_t, tb, enc, scene, cfg, schedule)
        d1 = pl.denoise(params, x_t + d, tb, enc, scene, cfg, schedule)
        num = jnp.linalg.norm((d1 - d0)[:, 0].reshape(b, -1), axis=-1)
        out.append(float(jnp.mean(num / jnp.linalg.norm(d[:, 0].reshape(b, -1), axis=-1))))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--scenes", type=int, default=256)
    ap.add_argument("--steps", default="5,10,20,50")
    ap.add_argument("--ref-steps", type=int, default=100)
    ap.add_argument("--spreads", default="0,0.05,0.2")
    ap.add_argument("--times", default="0.01,0.1,0.5")
    ap.add_argument("--md", default=None)
    args = ap.parse_args(argv)
    run = open_run(args.run_dir, recipe=rp.RECIPE)
    cfg, params = run.cfg, run.state.ema_params
    m, sch = cfg.model, VPLinear()
    held = planner_data.expert_data(cfg, "valid")
    n = min(args.scenes, held["future"].shape[0])
    sc = {k: jnp.asarray(v[:n]) for k, v in held.items() if k in pl.SCENE_KEYS}
    key = jax.random.PRNGKey(0)
    times = [float(t) for t in args.times.split(",")]
    future = jnp.nan_to_num(jnp.asarray(held["future"][:n]))
    sens = sensitivity(params, sc, future, m, sch, times, key)
    rows = [{"t": t, "network": v} for t, v in zip(times, sens, strict=True)]
    steps = [int(s) for s in args.steps.split(",")]
    dist = []
    for spread in (float(s) for s in args.spreads.split(",")):
        fn = posterior_fn(spread, sch)
        sample = jax.jit(
            lambda p, s, n_steps, fn=fn: pl.sample_trajectories(
                p, key, s, m, steps=n_steps, guidance=(), x0_fn=fn
            )[:, 0, :, :2],
            static_argnums=2,
        )
        ref = np.asarray(sample(params, sc, args.ref_steps))
        for n_steps in steps:
            d = np.linalg.norm(np.asarray(sample(params, sc, n_steps)) - ref, axis=-1).max(-1)
            row = {"spread": spread, "steps": n_steps, "mean_m": float(d.mean())}
            row["max_m"] = float(d.max())
            dist.append(row)
            print(json.dumps(row), flush=True)
    for r in rows:
        a, sg = float(sch.alpha(r["t"])), float(sch.sigma(r["t"]))
        for spread in (0.05, 0.2):
            r[f"posterior_{spread:g}"] = a * spread**2 / (a**2 * spread**2 + sg**2)
        print(json.dumps(r), flush=True)
    if args.md:
        Path(args.md).write_text(table(rows, dist, args, n))
    return 0


def table(sens_rows, dist, args, n) -> str:
    lines = [
        f"Step distance: largest ego plan point distance (m) to {args.ref_steps} steps, "
        f"{n} held-out scenes, mean (max)",
        "",
        "| spread s | " + " | ".join(f"{s} steps" for s in args.steps.split(",")) + " |",
        "|---" * (1 + len(args.steps.split(","))) + "|",
    ]
    for spread in sorted({r["spread"] for r in dist}):
        cells = [f"{r['mean_m']:.4f} ({r['max_m']:.4f})" for r in dist if r["spread"] == spread]
        lines.append(f"| {spread:g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Sensitivity of the ego data prediction to x_t (normalised units): the trained network "
        "vs the posterior mean of spread s",
        "",
        "| t | network | s = 0.05 | s = 0.2 |",
        "|---|---|---|---|",
    ]
    for r in sens_rows:
        lines.append(
            f"| {r['t']:g} | {r['network']:.4f} | {r['posterior_0.05']:.4f} "
            f"| {r['posterior_0.2']:.4f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

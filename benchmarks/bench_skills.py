"""Skill discovery: CSF vs METRA vs a random and a zero policy (coverage, zero-shot goals), and
throughput.

``--mode learn`` (the figures): for each env (``--envs``) and method (``--methods``),
``--seeds`` runs vmapped into one program train for ``--iters`` iterations of ``--num-envs``
envs (env steps per seed = iters x num_envs), then ``rl.skills.evaluate`` measures, per seed,
the cells covered by ``--eval-skills`` rollouts of random skills (cell ``--cell``; the same for a
uniformly random and the zero policy) and the zero-shot success on ``--goals`` held-out goals
(``z = (phi(g) - phi(s)) / ||.||``, radius ``--radius``). One JSON line per (env, method) with the
per-seed values, a bar chart ``<out>/coverage_<env>.png`` / ``goals_<env>.png`` and the skills
PNG of seed 0 per method.

``--envs`` may name ``kinetix-morphology:LEVEL`` (e.g. ``kinetix-morphology:s/car_left``): coverage
only (its observation is not a position, so no goals).

``--mode speed``: env steps and gradient steps per second of one chunk of iterations (``lax.scan``
of ``training``'s iteration) at 1 and 256 envs, with compile time; ``act_add`` (policy, env step,
buffer add, no learning) and ``update`` (gradient steps alone) show where the time goes.

Usage::

    python -m benchmarks.bench_skills --mode learn --envs point-mass-2d,point-maze \
        --methods csf,metra --seeds 3 --iters 2000 --out /tmp/skills
    python -m benchmarks.bench_skills --mode speed --envs point-mass-2d --num-envs-list 1,256
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.harness import emit, steady_rate
from jaxlab import media
from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.skills import csf, metra
from jaxlab.rl.skills.evaluate import (
    SkillEvalConfig,
    make_evaluate,
    plot_skill_trajectories,
    rollout_xy,
    skill_policy,
)
from jaxlab.rl.skills.training import SkillConfig, SkillOptim, make_train, sample_skills

MAKE = {"csf": csf.make_parts, "metra": metra.make_parts}


def skill_run(env: str, args, num_envs: int, **off_changes):
    """``(skill config, off-policy config, optimisers, env options)`` of one benchmark run."""
    if env.startswith("kinetix-morphology"):
        env, _, level = env.partition(":")
        opts = {"max_timesteps": args.horizon, "level": level or "s/car_left"}
    else:
        opts = {"max_steps": args.horizon}
    if env == "point-mass-2d":
        opts["size"] = args.size
    off = OffPolicyConfig(
        env=env.partition(":")[0],
        num_envs=num_envs,
        buffer_size=args.buffer,
        batch_size=256,
        learning_starts=25,
    )
    adam = OptimConfig(name="adam", lr=args.lr)
    cfg = SkillConfig(skill_dim=2, hidden=(args.hidden, args.hidden), gamma=0.99, tau=0.01)
    return cfg, dataclasses.replace(off, **off_changes), SkillOptim(*(adam,) * 5), opts


def learn(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ecfg = SkillEvalConfig(
        num_skills=args.eval_skills,
        cell=args.cell,
        num_goals=args.goals,
        goal_radius=args.radius,
    )
    for env in args.envs.split(","):
        summary = {}
        for method in args.methods.split(","):
            cfg, off, optim, opts = skill_run(env, args, args.num_envs)
            parts = MAKE[method](cfg, off, optim, env_options=opts)
            t0 = time.perf_counter()
            keys = jax.random.split(jax.random.key(args.seed), args.seeds)
            state, metrics = jax.jit(jax.vmap(make_train(parts, args.iters)))(keys)
            jax.block_until_ready(state)
            train_s = time.perf_counter() - t0
            ev = jax.jit(jax.vmap(make_evaluate(parts, ecfg, args.horizon), in_axes=(0, None)))
            res = jax.device_get(ev(state, jax.random.key(10_000 + args.seed)))
            m = jax.device_get(metrics)
            row = {
                "what": "skills_learn",
                "env": env,
                "method": method,
                "seeds": args.seeds,
                "env_steps_per_seed": args.iters * args.num_envs,
                "grad_steps_per_seed": int(np.asarray(m["learning"])[0].sum()),
                "train_s": round(train_s, 1),
                "delta_norm_max_last": np.asarray(m["delta_norm_max"])[:, -1].round(3).tolist(),
                **{k: np.asarray(v).round(3).tolist() for k, v in res.items()},
                "load": round(os.getloadavg()[0], 1),
            }
            emit(row)
            summary[method] = res
            first = jax.tree.map(lambda x: x[0], state)
            skills = sample_skills(jax.random.key(7), 24, 2)
            xy = jax.jit(
                lambda k, first=first, parts=parts, skills=skills: rollout_xy(
                    parts.env,
                    parts.env_params,
                    skill_policy(parts, first),
                    skills,
                    args.horizon,
                    k,
                )
            )(jax.random.key(8))
            plot_skill_trajectories(
                out / f"skills_{env.replace('/', '_').replace(':', '_')}_{method}.png",
                xy,
                skills,
                env=parts.env,
                title=f"{method} on {env} (seed 0)",
            )
        labels, cov, cov_err, goal, goal_err = [], [], [], [], []
        first = next(iter(summary.values()))
        for name, vals in [(k, v["coverage"]) for k, v in summary.items()] + [
            ("random", first["coverage_random"]),
            ("zero", first["coverage_zero"]),
        ]:
            labels.append(name)
            cov.append(float(np.mean(vals)))
            cov_err.append(float(np.std(vals) / np.sqrt(len(vals))))
        for v in summary.values():
            if "goal_success" in v:
                goal.append(float(np.mean(v["goal_success"])))
                goal_err.append(float(np.std(v["goal_success"]) / np.sqrt(len(v["goal_success"]))))
        media.plot_bars(
            out / f"coverage_{env.replace('/', '_').replace(':', '_')}.png",
            cov,
            labels=labels,
            ylabel="cells covered",
            title=f"{env}: coverage ({args.seeds} seeds, {args.iters * args.num_envs} env steps)",
        )
        if goal:
            media.plot_bars(
                out / f"goals_{env.replace('/', '_').replace(':', '_')}.png",
                goal,
                labels=list(summary),
                ylabel="goal success",
                title=f"{env}: zero-shot goals (r={args.radius})",
            )
        emit(
            {
                "what": "skills_summary",
                "env": env,
                "labels": labels,
                "coverage_mean": cov,
                "coverage_se": cov_err,
                "goal_success_mean": goal,
                "goal_success_se": goal_err,
            }
        )


def speed(args) -> None:
    for env in args.envs.split(","):
        for method in args.methods.split(","):
            for n in (int(v) for v in args.num_envs_list.split(",")):
                cfg, off, optim, opts = skill_run(
                    env,
                    args,
                    n,
                    buffer_size=max(args.buffer, 4 * n * args.chunk),
                    learning_starts=0,
                )
                cfg = dataclasses.replace(cfg, hidden=(256, 256))
                parts = MAKE[method](cfg, off, optim, env_options=opts)
                no_learning = dataclasses.replace(off, learning_starts=10**9)
                fill_parts = MAKE[method](cfg, no_learning, optim, env_options=opts)
                state = parts.init(jax.random.key(0))
                fill = chunk(fill_parts, args.chunk)
                while state.iteration * n < 256:
                    state = fill(state)[0]
                state = state.replace(iteration=state.iteration * 0 + 1)
                size = dict(env=env, method=method, num_envs=n, chunk=args.chunk, batch=256)
                k = args.chunk
                measure("skills_iteration", chunk(parts, k), state, n * k, k, args.seconds, **size)
                measure("act_add", fill, state, n * k, 0, args.seconds, **size)
                upd = jax.jit(
                    lambda s, parts=parts, k=k: jax.lax.scan(
                        parts.update, s, jax.random.split(s.key, k)
                    )
                )
                measure("update", upd, state, 0, k, args.seconds, **size)


def chunk(parts, length: int):
    return jax.jit(lambda s: jax.lax.scan(lambda c, _: parts.iteration(c), s, None, length=length))


def measure(what, fn, state, n_env, n_grad, seconds, **extra):
    t0 = time.perf_counter()
    compiled = fn.lower(state).compile()
    compile_s = time.perf_counter() - t0
    elapsed, calls, _ = steady_rate(lambda s: compiled(s)[0], state, (), seconds)
    row = dict(what=what, compile_s=round(compile_s, 2), time_per_chunk=elapsed / calls, **extra)
    if n_env:
        row["env_steps_per_s"] = round(n_env * calls / elapsed, 1)
    if n_grad:
        row["grad_steps_per_s"] = round(n_grad * calls / elapsed, 1)
    row["load"] = round(os.getloadavg()[0], 1)
    emit(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="learn", choices=["learn", "speed"])
    ap.add_argument("--envs", default="point-mass-2d,point-maze")
    ap.add_argument("--methods", default="csf,metra")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--num-envs-list", default="1,256")
    ap.add_argument("--horizon", type=int, default=50)
    ap.add_argument("--size", type=float, default=5.0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--buffer", type=int, default=100_000)
    ap.add_argument("--eval-skills", type=int, default=64)
    ap.add_argument("--cell", type=float, default=0.5)
    ap.add_argument("--goals", type=int, default=50)
    ap.add_argument("--radius", type=float, default=0.5)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default="/tmp/jaxlab_skills")
    args = ap.parse_args()
    (learn if args.mode == "learn" else speed)(args)


if __name__ == "__main__":
    main()

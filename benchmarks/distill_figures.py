"""The figures of the distillation and task-arithmetic notes, over seeds (one JSON line each).

``parity``: per teacher seed (n=30, k=4 sparse parity, a 1000-wide MLP teacher, SGD 0.2, batch 256,
a checkpoint every 50 steps): the phase-transition step, the probe ``|E[f x_i]|`` on / off the
support at the transition checkpoint and at the final one (Monte Carlo over 32768 inputs), and
for ``--students`` student seeds of each method the samples to 95 % accuracy (50-wide students,
SGD 0.2, batch 64, multiplier ``--multiplier``).

``task-arithmetic``: the cpu-preset experiment (d=32, P=16, width 64, 200 SGD steps) for
``--seeds`` seeds (relations vmapped): accuracies at addition (1, 1) and negation (1, −1) for the full, rank-1
and 50 %-pruned task vectors, the best min(T1, T2) over the λ grid and the best out-of-domain
accuracy, per relation, as mean and min over seeds.

Usage: ``python benchmarks/distill_figures.py parity|task-arithmetic [--seeds 3]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jaxlab.benchmarks.harness import emit

from jaxlab.lm import distill
from jaxlab.lm import sparse_parity as sp
from jaxlab.lm import task_arithmetic as ta


def parity(args) -> None:
    task = sp.SparseParity(n=args.n, k=args.k)
    teacher, student = distill.ParityMLP(args.teacher_width), distill.ParityMLP(args.student_width)
    tspec = distill.TrainSpec(steps=args.teacher_steps, batch=256, every=50, lr=0.2)
    sspec = distill.TrainSpec(steps=args.student_steps, batch=64, every=100, lr=0.2)
    train = jax.jit(distill.train_teacher, static_argnums=(1, 2, 3))
    probe = jax.jit(distill.probe_run, static_argnums=(0, 2))
    x = sp.sample(jax.random.PRNGKey(123), task, 32768)[0]
    eval_x = x[:4096]

    def one(run, key, mask, alpha):
        return distill.train_student(
            key, student, teacher, run, mask, alpha, task, sspec, eval_x, multiplier=args.multiplier
        )

    students = jax.jit(jax.vmap(jax.vmap(one, (None, None, 0, 0)), (None, 0, None, None)))
    per_method = {m: [] for m in distill.METHODS}
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        run = train(jax.random.PRNGKey(seed), teacher, task, tspec)
        corr, acc = probe(teacher, run, task, x)
        on, off = (np.asarray(v) for v in sp.support_ratio(task, corr))
        step = distill.phase_transition_step(run.losses)
        c = distill.transition_checkpoint(run)
        peak = int(np.argmax(on))
        masks = jnp.asarray(
            np.stack([distill.method_selection(m, len(run.steps), c) for m in distill.METHODS])
        )
        alphas = jnp.asarray([0.0, 0.0, 0.0, 1.0])
        keys = jax.random.split(jax.random.PRNGKey(1000 + seed), args.students)
        curves = students(run, keys, masks, alphas)
        samples = np.asarray(distill.samples_to_accuracy(curves, sspec.batch))
        row = {
            "what": "parity",
            "teacher_seed": seed,
            "n": task.n,
            "k": task.k,
            "transition_step": step,
            "transition_checkpoint_step": int(run.steps[c]),
            "teacher_acc_at_transition": round(float(acc[c]), 4),
            "on_support_at_transition": round(float(on[c]), 5),
            "off_support_at_transition": round(float(off[c]), 5),
            "ratio_at_transition": round(float(on[c] / off[c]), 2),
            "peak_ratio": round(float(on[peak] / off[peak]), 2),
            "peak_step": int(run.steps[peak]),
            "on_support_final": round(float(on[-1]), 5),
            "off_support_final": round(float(off[-1]), 5),
            "samples_to_95": {m: samples[:, i].tolist() for i, m in enumerate(distill.METHODS)},
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        for i, m in enumerate(distill.METHODS):
            per_method[m].extend(samples[:, i].tolist())
        emit(row)
    # runs that never reach 95 % count as the whole budget (a lower bound on their samples)
    budget = sspec.steps * sspec.batch
    capped = {m: np.minimum(np.asarray(v), budget) for m, v in per_method.items()}
    med = {m: float(np.median(v)) for m, v in capped.items()}
    emit(
        {
            "what": "parity_summary",
            "runs_per_method": len(per_method["labels"]),
            "budget_samples": budget,
            "reached_95": {m: int(np.isfinite(v).sum()) for m, v in per_method.items()},
            "median_samples_to_95": med,
            "mean_samples_to_95_capped": {m: float(v.mean()) for m, v in capped.items()},
            "median_speedup_vs_labels": {m: round(med["labels"] / v, 2) for m, v in med.items()},
            "median_speedup_vs_one_shot": {
                m: round(med["one_shot"] / v, 2) for m, v in med.items()
            },
        }
    )


def task_arithmetic(args) -> None:
    cfg = ta.ExperimentConfig()
    alphas = jnp.asarray(list(ta.RELATIONS.values()))
    run = jax.jit(jax.vmap(ta.run_experiment, (None, None, 0)), static_argnums=1)
    t0 = time.perf_counter()
    # relations vmapped, seeds one after the other (bounded memory)
    per_seed = [
        jax.device_get(run(k, cfg, alphas))
        for k in jax.random.split(jax.random.PRNGKey(0), args.seeds)
    ]
    out = {key: np.stack([o[key] for o in per_seed]) for key in per_seed[0]}
    grid = np.asarray(out["grid"][0, 0])
    for r, rel in enumerate(ta.RELATIONS):
        row = {
            "what": "task_arithmetic",
            "relation": rel,
            "alpha": ta.RELATIONS[rel],
            "seeds": args.seeds,
        }
        for variant in ("full", "low_rank", "pruned"):
            acc = np.asarray(out[variant][:, r])  # [seeds, g, g, 3]
            for name, lam in (
                ("add", (1, 1)),
                ("negate", (1, -1)),
                ("negate2", (1, -2)),
                ("t1_only", (1, 0)),
                ("t2_only", (0, 1)),
            ):
                i, j = ta.grid_index(grid, *lam)
                v = acc[:, i, j]
                row[f"{variant}_{name}"] = {
                    "T1_mean": round(float(v[:, 0].mean()), 4),
                    "T1_min": round(float(v[:, 0].min()), 4),
                    "T2_mean": round(float(v[:, 1].mean()), 4),
                    "T2_max": round(float(v[:, 1].max()), 4),
                }
            both = np.minimum(acc[..., 0], acc[..., 1]).reshape(args.seeds, -1)
            row[f"{variant}_best_both"] = np.round(both.max(-1), 4).tolist()
            row[f"{variant}_best_ood"] = np.round(
                acc[..., 2].reshape(args.seeds, -1).max(-1), 4
            ).tolist()
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        emit(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["parity", "task-arithmetic"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--students", type=int, default=2)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--teacher-width", type=int, default=1000)
    ap.add_argument("--student-width", type=int, default=50)
    ap.add_argument("--teacher-steps", type=int, default=1500)
    ap.add_argument("--student-steps", type=int, default=4000)
    ap.add_argument("--multiplier", type=float, default=2.0)
    args = ap.parse_args()
    (parity if args.what == "parity" else task_arithmetic)(args)


if __name__ == "__main__":
    main()

"""The figures of the distillation and task-arithmetic notes, over seeds (one JSON line each).

``parity``: per teacher seed (n=30, k=4 sparse parity, a 1000-wide MLP teacher, SGD 0.2, batch 256,
a checkpoint every 50 steps): the phase-transition step, the probe ``|E[f x_i]|`` on / off the
support at the transition checkpoint and at the final one (Monte Carlo over 32768 inputs), and
for ``--students`` student seeds of each method the samples to 95 % accuracy (50-wide students,
SGD 0.2, batch 64, multiplier ``--multiplier``).

The flags ``--torch-init`` (PyTorch default init, the paper's), ``--student-schedule
warmup_cosine`` (6 % warm-up + cosine, the paper's students), ``--multiplier``, ``--tau``,
``--student-width``, ``--student-lr``, ``--transition-drop`` (which checkpoint is the 2-shot one)
select the settings of the 2x-bar study; every row carries its config.

``pcfg``: per teacher seed, a 2-layer d_model-32 bidirectional masked LM (Adam 3e-3, warm-up +
cosine, β2 0.95, batch 32, 800 steps, a checkpoint every 40) on 4096 sentences of a random
cfg3-style grammar (3 levels, 3 terminals, 8-27 tokens, masking 0.3 with 80/10/10): held-out loss
and accuracy per checkpoint, the n-gram probes (``M_robust`` / ``M_close`` for 3- and 5-grams) and
the constituent probe per checkpoint, the ``M_robust`` peak as the 2-shot checkpoint, and
``--students`` d_model-16 students per method (800 steps, multiplier 1); the summary gives the
median of budget / samples-to-reach the label (one-shot) student's final accuracy.

``task-arithmetic``: the cpu-preset experiment (d=32, P=16, width 64, 200 SGD steps) for
``--seeds`` seeds (relations vmapped): accuracies at addition (1, 1) and negation (1, −1) for the full, rank-1
and 50 %-pruned task vectors, the best min(T1, T2) over the λ grid and the best out-of-domain
accuracy, per relation, as mean and min over seeds.

Usage: ``python -m experiments.distill_figures.distill_figures parity|pcfg|task-arithmetic
[--seeds 3]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import distill, pcfg
from jaxlab.lm import pcfg_distill as pd
from jaxlab.lm import sparse_parity as sp
from jaxlab.lm import task_arithmetic as ta


def parity(args) -> None:
    task = sp.SparseParity(n=args.n, k=args.k)
    teacher = distill.ParityMLP(args.teacher_width, torch_init=args.torch_init)
    student = distill.ParityMLP(args.student_width, torch_init=args.torch_init)
    tspec = distill.TrainSpec(
        steps=args.teacher_steps,
        batch=args.teacher_batch,
        every=args.every,
        optim=OptimConfig(name="sgd", lr=args.teacher_lr),
    )
    student_optim = (
        distill.warmup_cosine(args.student_lr, args.student_steps, name="sgd", b2=0.999)
        if args.student_schedule == "warmup_cosine"
        else OptimConfig(name="sgd", lr=args.student_lr)
    )
    sspec = distill.TrainSpec(
        steps=args.student_steps, batch=args.student_batch, every=100, optim=student_optim
    )
    train = jax.jit(distill.train_teacher, static_argnums=(1, 2, 3))
    probe = jax.jit(distill.probe_run, static_argnums=(0, 2))
    x = sp.sample(jax.random.PRNGKey(123), task, 32768)[0]
    eval_x = x[:4096]

    def one(run, key, mask, alpha):
        return distill.train_student(
            key,
            student,
            teacher,
            run,
            mask,
            alpha,
            task,
            sspec,
            eval_x,
            multiplier=args.multiplier,
            kd=distill.KDLoss(tau=args.tau),
        )

    students = jax.jit(jax.vmap(jax.vmap(one, (None, None, 0, 0)), (None, 0, None, None)))
    per_method = {m: [] for m in distill.METHODS}
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        run = train(jax.random.PRNGKey(seed), teacher, task, tspec)
        corr, acc = probe(teacher, run, task, x)
        on, off = (np.asarray(v) for v in sp.support_ratio(task, corr))
        step = distill.phase_transition_step(run.losses, drop=args.transition_drop)
        c = distill.transition_checkpoint(run, drop=args.transition_drop)
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
            "config": {
                k: getattr(args, k)
                for k in (
                    "teacher_width",
                    "student_width",
                    "multiplier",
                    "tau",
                    "student_lr",
                    "student_batch",
                    "student_schedule",
                    "torch_init",
                    "transition_drop",
                )
            },
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
            "n": task.n,
            "k": task.k,
            "config": row["config"],
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


def pcfg_distillation(args) -> None:
    """Masked-LM teacher on a random cfg3-style grammar, probes per checkpoint, students."""
    grammar = pcfg.random_layered_grammar(args.grammar_seed, symbols_per_level=(1, 3, 3))
    task = pd.MLMTask(n_terminals=3, max_len=28, mask_rate=0.3)
    level1 = tuple(s for s in grammar.rules if s.startswith("N1_"))
    corpus, _ = pd.make_corpus(np.random.default_rng(0), grammar, args.corpus, task)
    held_out, held_sents = pd.make_corpus(np.random.default_rng(1), grammar, 512, task)
    eval_batch = pd.mask_tokens(jax.random.PRNGKey(77), held_out.tokens, held_out.lengths, task)
    probes = pd.make_probe_set(held_sents[:48], task, level1)
    positions = tuple(range(2, 26, 3))
    teacher = pd.MaskedLM(task.vocab, 3, d_model=args.teacher_width, n_heads=args.teacher_width // 8,
                          head_dim=8, d_ff=2 * args.teacher_width, n_layers=args.layers)  # fmt: skip
    student = pd.MaskedLM(task.vocab, 3, d_model=args.student_width, n_heads=args.student_width // 8,
                          head_dim=8, d_ff=2 * args.student_width, n_layers=args.layers)  # fmt: skip
    tspec = distill.TrainSpec(
        steps=args.teacher_steps, batch=32, every=args.every,
        optim=distill.warmup_cosine(args.teacher_lr, args.teacher_steps),
    )  # fmt: skip
    sspec = distill.TrainSpec(
        steps=args.student_steps, batch=32, every=args.every,
        optim=distill.warmup_cosine(args.student_lr, args.student_steps),
    )  # fmt: skip
    train = jax.jit(pd.train_teacher, static_argnums=(1, 3, 4))
    metrics = jax.jit(pd.checkpoint_metrics, static_argnums=0)
    probe = jax.jit(pd.probe_run, static_argnums=(1, 4, 5, 6))

    def one(run, key, mask, alpha):
        return pd.train_student(key, student, teacher, run, mask, alpha, corpus, task, sspec,
                                eval_batch, multiplier=args.multiplier, kd=distill.KDLoss(tau=args.tau))  # fmt: skip

    students = jax.jit(jax.vmap(jax.vmap(one, (None, None, 0, 0)), (None, 0, None, None)))
    speed_labels, speed_one = {m: [] for m in distill.METHODS}, {m: [] for m in distill.METHODS}
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        run = jax.device_get(train(jax.random.PRNGKey(seed), teacher, corpus, task, tspec))
        loss, acc = (np.asarray(v) for v in metrics(teacher, run, eval_batch))
        pr = {k: np.asarray(v) for k, v in probe(jax.random.PRNGKey(5), teacher, run, probes,
                                                   task, positions, len(level1)).items()}  # fmt: skip
        c = pd.curriculum_checkpoint(pr["m_robust_3gram"])
        masks = jnp.asarray(
            np.stack([distill.method_selection(m, len(run.steps), c) for m in distill.METHODS])
        )
        keys = jax.random.split(jax.random.PRNGKey(1000 + seed), args.students)
        curves = jax.device_get(students(run, keys, masks, jnp.asarray([0.0, 0.0, 0.0, 1.0])))
        final = np.asarray(curves.accuracy)[..., -1]  # [students, methods]
        # samples to reach the accuracy the label (resp. one-shot) student ends with, same seed
        for ref, out in ((3, speed_labels), (2, speed_one)):
            target = jnp.asarray(final[:, ref])[:, None, None]
            need = np.asarray(distill.samples_to_accuracy(curves, sspec.batch, target))
            for i, m in enumerate(distill.METHODS):
                out[m].extend((sspec.steps * sspec.batch / need[:, i]).tolist())
        emit(
            {
                "what": "pcfg",
                "teacher_seed": seed,
                "checkpoint_steps": np.asarray(run.steps).tolist(),
                "teacher_loss": np.round(loss, 4).tolist(),
                "teacher_accuracy": np.round(acc, 4).tolist(),
                **{k: np.round(v, 4).tolist() for k, v in pr.items()},
                "curriculum_checkpoint_step": int(run.steps[c]),
                "student_steps": np.asarray(curves.steps[0, 0]).tolist(),
                "student_accuracy_seed_mean": {
                    m: np.round(np.asarray(curves.accuracy)[:, i].mean(0), 4).tolist()
                    for i, m in enumerate(distill.METHODS)
                },
                "final_accuracy": {m: final[:, i].tolist() for i, m in enumerate(distill.METHODS)},
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
    emit(
        {
            "what": "pcfg_summary",
            "runs_per_method": len(speed_labels["labels"]),
            "student_budget_samples": sspec.steps * sspec.batch,
            # budget / samples needed to reach the label student's (one-shot's) final accuracy
            "median_speedup_vs_labels": {m: float(np.median(v)) for m, v in speed_labels.items()},
            "median_speedup_vs_one_shot": {m: float(np.median(v)) for m, v in speed_one.items()},
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
    ap.add_argument("what", choices=["parity", "pcfg", "task-arithmetic"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--students", type=int, default=2)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--teacher-width", type=int, default=1000)
    ap.add_argument("--student-width", type=int, default=50)
    ap.add_argument("--teacher-steps", type=int, default=1500)
    ap.add_argument("--student-steps", type=int, default=4000)
    ap.add_argument("--multiplier", type=float, default=2.0)
    ap.add_argument("--tau", type=float, default=1.0)
    ap.add_argument("--teacher-lr", type=float, default=0.2)
    ap.add_argument("--teacher-batch", type=int, default=256)
    ap.add_argument("--every", type=int, default=50, help="teacher steps between checkpoints")
    ap.add_argument("--student-lr", type=float, default=0.2)
    ap.add_argument("--student-batch", type=int, default=64)
    ap.add_argument("--student-schedule", choices=["constant", "warmup_cosine"], default="constant")
    ap.add_argument("--torch-init", action="store_true", help="PyTorch nn.Linear init (paper)")
    ap.add_argument(
        "--transition-drop",
        type=float,
        default=0.1,
        help="the 2-shot checkpoint: first at which the loss is this fraction below log 2",
    )
    ap.add_argument("--grammar-seed", type=int, default=0, help="pcfg")
    ap.add_argument("--corpus", type=int, default=4096, help="pcfg: training sentences")
    ap.add_argument("--layers", type=int, default=2, help="pcfg: transformer layers")
    args = ap.parse_args()
    if args.what == "pcfg":  # the masked-LM defaults (overridable as above)
        for name, value in (("teacher_width", 32), ("student_width", 16), ("teacher_steps", 800),
                            ("student_steps", 800), ("teacher_lr", 3e-3), ("student_lr", 3e-3),
                            ("every", 40), ("multiplier", 1.0)):  # fmt: skip
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    {"parity": parity, "pcfg": pcfg_distillation, "task-arithmetic": task_arithmetic}[args.what](
        args
    )


if __name__ == "__main__":
    main()

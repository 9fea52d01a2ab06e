"""Distillation benchmarks, one JSON line per measurement.

* ``teacher_train``: teacher samples per second (MLP, fresh batches, a snapshot every ``every``
  steps stacked by the outer scan).
* ``student``: student samples per second with the teacher in the loop (the teacher checkpoint is
  gathered from the stacked run by the schedule at every step and applied to the batch), for one
  student and for the four methods x ``--seeds`` seeds in one vmapped program.
* ``probe``: correlation probes over every teacher checkpoint, the teacher vmapped over the
  checkpoint axis vs a Python loop over checkpoints (same jitted per-checkpoint function).

``compile_s`` is ahead-of-time compile time; ``time_s`` the best of ``--repeats`` calls.
Timings on a shared 2-core machine are noisy (``cpu_s`` is the process CPU time of the timed call).

Usage: ``python -m benchmarks.bench_distill [--quick] [--repeats 2] [--only student]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import compile_timed, wall_cpu
from benchmarks.harness import emit_rate as _emit
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import distill
from jaxlab.lm import sparse_parity as sp


def _time(compiled, args, repeats: int) -> tuple[float, float]:
    """Best wall seconds and mean CPU seconds per call (see ``harness.wall_cpu``)."""
    best_wall, _, _, mean_cpu = wall_cpu({"f": (compiled, args)}, repeats)["f"]
    return best_wall, mean_cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--only", choices=["teacher_train", "student", "probe"], default=None)
    args = ap.parse_args()

    task = sp.SparseParity(n=30, k=4)
    tw, sw = (256, 32) if args.quick else (1000, 50)
    tsteps = 200 if args.quick else 1000
    teacher, student = distill.ParityMLP(tw), distill.ParityMLP(sw)
    sgd = OptimConfig(name="sgd", lr=0.2)
    tspec = distill.TrainSpec(steps=tsteps, batch=256, every=50, optim=sgd)
    sspec = distill.TrainSpec(steps=200 if args.quick else 1000, batch=64, every=100, optim=sgd)
    key = jax.random.PRNGKey(0)
    size = {"n": task.n, "k": task.k, "teacher_width": tw, "student_width": sw}

    train = lambda k: distill.train_teacher(k, teacher, task, tspec)  # noqa: E731
    compiled, c = compile_timed(train, key)
    run = compiled(key)
    if args.only in (None, "teacher_train"):
        t, cpu = _time(compiled, (key,), args.repeats)
        samples = tspec.steps * tspec.batch
        _emit(
            "teacher_train",
            {**size, "steps": tspec.steps, "batch": tspec.batch},
            c,
            t,
            samples / t,
            "samples/s",
            cpu_s=round(cpu, 3),
        )

    n_ckpt = int(run.steps.shape[0])
    eval_x = sp.sample(jax.random.PRNGKey(7), task, 1024)[0]
    if args.only in (None, "student"):
        mask = jnp.asarray(distill.method_selection("progressive", n_ckpt, None))

        def one(k, m, a):
            return distill.train_student(
                k, student, teacher, run, m, a, task, sspec, eval_x, multiplier=2.0
            ).accuracy

        compiled, c = compile_timed(one, key, mask, jnp.float32(0.0))
        t, cpu = _time(compiled, (key, mask, jnp.float32(0.0)), args.repeats)
        samples = sspec.steps * sspec.batch
        _emit(
            "student",
            {**size, "students": 1, "checkpoints": n_ckpt},
            c,
            t,
            samples / t,
            "samples/s",
            cpu_s=round(cpu, 3),
        )

        masks = jnp.asarray(
            np.stack([distill.method_selection(m, n_ckpt, n_ckpt // 2) for m in distill.METHODS])
        )
        alphas = jnp.asarray([0.0, 0.0, 0.0, 1.0])
        keys = jax.random.split(key, args.seeds)
        many = jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None))
        compiled, c = compile_timed(many, keys, masks, alphas)
        t, cpu = _time(compiled, (keys, masks, alphas), args.repeats)
        n_students = 4 * args.seeds
        _emit(
            "student",
            {**size, "students": n_students, "checkpoints": n_ckpt},
            c,
            t,
            n_students * samples / t,
            "samples/s",
            cpu_s=round(cpu, 3),
        )

    if args.only in (None, "probe"):
        x = sp.sample(jax.random.PRNGKey(5), task, 8192)[0]
        compiled, c = compile_timed(lambda r: distill.probe_run(teacher, r, task, x), run)
        t, cpu = _time(compiled, (run,), args.repeats)
        _emit(
            "probe_vmapped",
            {**size, "checkpoints": n_ckpt, "inputs": 8192},
            c,
            t,
            n_ckpt / t,
            "checkpoints/s",
            cpu_s=round(cpu, 3),
        )

        one_ckpt = jax.jit(
            lambda p: sp.degree1_correlations(jax.nn.softmax(teacher.apply(p, x))[:, 1], x)
        )
        jax.block_until_ready(one_ckpt(distill.checkpoint_params(run, 0)))
        params = [distill.checkpoint_params(run, i) for i in range(n_ckpt)]
        t0 = time.perf_counter()
        jax.block_until_ready([one_ckpt(p) for p in params])
        t = time.perf_counter() - t0
        _emit(
            "probe_loop",
            {**size, "checkpoints": n_ckpt, "inputs": 8192},
            0.0,
            t,
            n_ckpt / t,
            "checkpoints/s",
        )


if __name__ == "__main__":
    main()

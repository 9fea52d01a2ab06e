"""``distill``: progressive distillation (arXiv 2410.05464) on the shared loop: sparse parity
(``task: parity``, default) or a PCFG language model (``task: pcfg``): a masked LM, or with
``pcfg.objective: next_token`` the autoregressive variant (a causal transformer trained on
next-token prediction).

A loop step is one step of the teacher (``optim.teacher``; an MLP on fresh sparse-parity batches,
or a bidirectional transformer masked LM (causal, next-token, for ``pcfg.objective:
next_token``) on a corpus of ``pcfg.corpus_size`` sentences of a random
cfg3-style grammar); every ``teacher.checkpoint_every`` steps its parameters are written into a
snapshot buffer inside the train state, so the loop's checkpoints keep the whole trajectory and a
resumed run continues it. ``finalize`` probes every checkpoint, picks the transition (2-shot)
checkpoint, distils students (``optim.student``) of the four methods (progressive, 2-shot,
one-shot, labels) over ``student.seeds`` seeds in one vmapped program
(:mod:`jaxlab.lm.distill_pipeline`), and writes ``results.json``, ``teacher_loss.png``,
``teacher_probes.png`` and ``students.png``.

Examples::

    jaxlab train distill --preset cpu
    jaxlab train distill parity.n=40 parity.k=4 student.multiplier=4
    jaxlab train distill --preset pcfg
    jaxlab train distill --preset pcfg pcfg.objective=next_token
    jaxlab eval distill --run-dir DIR      # teacher accuracy and the students by method
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp

from jaxlab.core import json_files, optim
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.lm import distill
from jaxlab.lm import distill_pipeline as dp


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    """Configuration of the ``distill`` recipe (``loop.total_steps`` = teacher steps).

    Attributes:
      task: "parity" (MLP teacher) or "pcfg" (masked-LM transformer teacher).
      parity: the sparse-parity task (``parity.n``, ``parity.k``, ``parity.probe_samples``).
      pcfg: the PCFG task (grammar, corpus, objective, probes).
      teacher: the teacher (``teacher.checkpoint_every`` divides ``loop.total_steps``).
      student: the students (``student.multiplier``, ``student.tau`` (the teacher's temperature),
        ``student.tau_anneal``, ``student.kl``, ``student.schedule``, ``student.seeds``, ...).
      optim: the teacher's and the students' optimisers.
    """

    seed: int = 0
    task: Literal["parity", "pcfg"] = "parity"
    parity: dp.ParityConfig = dp.ParityConfig()
    pcfg: dp.PcfgConfig = dp.PcfgConfig()
    teacher: dp.TeacherConfig = dp.TeacherConfig()
    student: dp.StudentConfig = dp.StudentConfig()
    optim: dp.DistillOptim = dp.DistillOptim()
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=1500, steps_per_call=50, log_every=50, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        n_ckpt, rest = divmod(self.loop.total_steps, self.teacher.checkpoint_every)
        if rest or n_ckpt < 2:
            raise ConfigError(
                "teacher.checkpoint_every",
                self.teacher.checkpoint_every,
                f"a divisor of loop.total_steps={self.loop.total_steps} at most half of it "
                "(the progressive schedule needs intermediate checkpoints)",
            )
        if self.task not in ("parity", "pcfg"):
            raise ConfigError("task", self.task, "'parity' or 'pcfg'")
        if self.task == "pcfg":
            for name, v in (
                ("teacher.width", self.teacher.width),
                ("student.width", self.student.width),
            ):
                if v % 8:
                    raise ConfigError(name, v, "a multiple of 8 (d_model with heads of 8)")

    def teacher_spec(self) -> distill.TrainSpec:
        t = self.teacher
        return distill.TrainSpec(
            self.loop.total_steps, t.batch, t.checkpoint_every, self.optim.teacher
        )


def build(cfg: DistillConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The recipe's parts: data parallel over ``mesh`` (each step's batch is split over the data
    axes, the parameters are replicated)."""
    task = dp.make_task(
        cfg.task, cfg.parity, cfg.pcfg, cfg.teacher, cfg.student, seed=cfg.seed,
        student_optim=cfg.optim.student,
    )  # fmt: skip
    spec, total = cfg.teacher_spec(), cfg.loop.total_steps

    def init(key: jax.Array) -> dp.TeacherState:
        init_key, data_key = jax.random.split(key)
        hparams = {k: jnp.float32(v) for k, v in hparams_of(RECIPE, cfg).items()}
        opt = optim.from_hparams(cfg.optim.teacher, total, hparams, "optim.teacher")
        params = task.model.init(init_key, *task.dummy)
        return dp.init_teacher(params, opt, data_key, spec, hparams)

    def train_step(state: dp.TeacherState, batch: None) -> tuple[dp.TeacherState, dict]:
        del batch
        opt = optim.from_hparams(cfg.optim.teacher, total, state.hparams, "optim.teacher")
        key = jax.random.fold_in(state.key, state.step)
        loss_fn = task.batch_loss(key, lambda x: constrain_leading(x, mesh))
        return dp.teacher_update(state, loss_fn, opt, spec)

    accuracy = jax.jit(task.accuracy)

    def finalize(state: dp.TeacherState, run_dir: Path) -> None:
        run = dp.teacher_run(jax.device_get(state), spec)
        dp.write_artifacts(task.results(run), Path(run_dir))

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=lambda state: {"teacher_accuracy": float(accuracy(state.params))},
        finalize=finalize,
        units_per_step=(cfg.teacher.batch, task.unit),
    )


def eval_main(cfg: DistillConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval distill --run-dir DIR [--json]``: the teacher's accuracy at the latest
    checkpoint and the students of every method (``results.json`` of a finished run; otherwise the
    students are distilled now from the checkpoints so far)."""
    from jaxlab.core.run import open_run

    p = argparse.ArgumentParser(prog="jaxlab eval distill")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    run = open_run(run_dir, recipe=RECIPE)
    teacher = float(run.parts.evaluate(run.state)["teacher_accuracy"])
    saved = Path(run_dir) / "results.json"
    if saved.exists() and run.step == cfg.loop.total_steps:
        results = json.loads(saved.read_text())
    else:
        task = dp.make_task(
            cfg.task, cfg.parity, cfg.pcfg, cfg.teacher, cfg.student, seed=cfg.seed,
            student_optim=cfg.optim.student,
        )  # fmt: skip
        results = task.results(dp.teacher_run(jax.device_get(run.state), cfg.teacher_spec()))
    if args.json:
        keep = ("student_accuracy", "samples_to_95", "samples_to_labels_final")
        out = {k: v for k, v in results.items() if k in keep}
        row = json_files.null_if_non_finite(
            {"step": run.step, "teacher_accuracy": teacher, **out}, "non-finite (no JSON value)"
        )
        print(json_files.dumps(row, where="the distill evaluation"))
        return 0
    print(f"checkpoint step {run.step} of {run_dir}: teacher accuracy {teacher:.4f}")
    print(dp.student_table(results))
    return 0


RECIPE = register(
    Recipe(
        name="distill",
        config_cls=DistillConfig,
        build=build,
        description="progressive distillation on sparse parity or a PCFG masked LM: teacher "
        "trajectory, probes, progressive / 2-shot / one-shot / label students",
        default_preset="cpu",
        traced=("optim.teacher.lr",),
        eval_main=eval_main,
    )
)

"""``distill``: progressive distillation (arXiv 2410.05464) on the shared loop: sparse parity
(``task: parity``, default) or a PCFG masked LM (``task: pcfg``).

A loop step is one step of the teacher (``optim.teacher``; an MLP on fresh sparse-parity batches,
or a bidirectional transformer masked LM on a corpus of ``corpus_size`` sentences of a random
cfg3-style grammar); every ``checkpoint_every`` steps its parameters are written into a snapshot
buffer inside the train state, so the loop's checkpoints keep the whole trajectory and a resumed
run continues it. ``finalize`` probes every checkpoint, picks the transition (2-shot) checkpoint,
distils students (``optim.student``) of the four methods (progressive, 2-shot, one-shot, labels)
over ``seeds`` seeds in one vmapped program (:mod:`jaxlab.lm.distill_pipeline`), and writes
``results.json``, ``teacher_loss.png``, ``teacher_probes.png`` and ``students.png``.

Examples::

    jaxlab train distill --preset cpu
    jaxlab train distill n=40 k=4 multiplier=4
    jaxlab train distill --preset pcfg
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp

from jaxlab.core import optim
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.lm import distill, pcfg
from jaxlab.lm import distill_pipeline as dp
from jaxlab.lm import pcfg_distill as pd
from jaxlab.lm import sparse_parity as sp


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    """Configuration of the ``distill`` recipe (``loop.total_steps`` = teacher steps).

    Attributes:
      task: "parity" (MLP teacher) or "pcfg" (masked-LM transformer teacher).
      n, k: sparse-parity size.
      teacher_width, teacher_batch: the teacher (pcfg: d_model, heads of 8).
      checkpoint_every: teacher steps between kept checkpoints (divides ``loop.total_steps``).
      student_width, student_steps, student_batch, student_eval_every: the students.
      multiplier: the student at step ``u`` uses the first selected checkpoint ``>= u·multiplier``.
      tau: distillation temperature.
      seeds: students per method (vmapped).
      probe_samples: inputs for the correlation probes and the evaluations (parity).
      pcfg_seed, pcfg_levels, pcfg_rule_lengths: the random grammar (pcfg).
      corpus_size, max_len, mask_rate: the masked-LM corpus (pcfg).
      teacher_layers, student_layers: transformer depths (pcfg).
      probe_sentences: held-out sentences for the n-gram and constituent probes (pcfg).
      optim: the teacher's and the students' optimisers.
    """

    seed: int = 0
    task: Literal["parity", "pcfg"] = "parity"
    n: int = 30
    k: int = 4
    teacher_width: int = 1000
    teacher_batch: int = 256
    checkpoint_every: int = 50
    student_width: int = 50
    student_steps: int = 4000
    student_batch: int = 64
    student_eval_every: int = 100
    multiplier: float = 2.0
    tau: float = 1.0
    seeds: int = 3
    probe_samples: int = 16384
    pcfg_seed: int = 0
    pcfg_levels: tuple[int, ...] = (1, 3, 3)
    pcfg_rule_lengths: tuple[int, ...] = (2, 3)
    corpus_size: int = 4096
    max_len: int = 28
    mask_rate: float = 0.3
    teacher_layers: int = 2
    student_layers: int = 2
    probe_sentences: int = 48
    optim: dp.DistillOptim = dp.DistillOptim()
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=1500, steps_per_call=50, log_every=50, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        sp.SparseParity(self.n, self.k)  # validates n, k
        n_ckpt, rest = divmod(self.loop.total_steps, max(self.checkpoint_every, 1))
        if self.checkpoint_every < 1 or rest or n_ckpt < 2:
            raise ConfigError(
                "checkpoint_every",
                self.checkpoint_every,
                f"a divisor of loop.total_steps={self.loop.total_steps} at most half of it "
                "(the progressive schedule needs intermediate checkpoints)",
            )
        if self.seeds < 1:
            raise ConfigError("seeds", self.seeds, "an integer >= 1")
        if self.task not in ("parity", "pcfg"):
            raise ConfigError("task", self.task, "'parity' or 'pcfg'")
        if self.task == "pcfg":
            for name in ("teacher_width", "student_width"):
                v = getattr(self, name)
                if v < 8 or v % 8:
                    raise ConfigError(name, v, "a multiple of 8 (d_model with heads of 8)")
            pd.MLMTask(3, self.max_len, self.mask_rate)  # validates max_len, mask_rate
            if self.corpus_size < 1:
                raise ConfigError("corpus_size", self.corpus_size, "a positive int")

    def teacher_spec(self) -> distill.TrainSpec:
        return distill.TrainSpec(
            self.loop.total_steps, self.teacher_batch, self.checkpoint_every, self.optim.teacher
        )


def teacher_task(cfg: DistillConfig) -> dp.TeacherTask:
    """The configured task's teacher, students and probes."""
    spec = distill.TrainSpec(
        cfg.student_steps, cfg.student_batch, cfg.student_eval_every, cfg.optim.student
    )
    students = dp.Students(spec, cfg.seeds, cfg.seed, cfg.multiplier, cfg.tau)
    if cfg.task == "parity":
        return dp.parity_task(
            sp.SparseParity(cfg.n, cfg.k), teacher_width=cfg.teacher_width,
            student_width=cfg.student_width, batch=cfg.teacher_batch,
            probe_samples=cfg.probe_samples, students=students,
        )  # fmt: skip
    grammar = pcfg.random_layered_grammar(
        cfg.pcfg_seed, symbols_per_level=cfg.pcfg_levels, rhs_lengths=cfg.pcfg_rule_lengths
    )
    setup = dp.pcfg_setup(
        grammar, max_len=cfg.max_len, mask_rate=cfg.mask_rate,
        teacher=(cfg.teacher_width, cfg.teacher_layers),
        student=(cfg.student_width, cfg.student_layers),
    )  # fmt: skip
    return dp.pcfg_task(
        setup, batch=cfg.teacher_batch, corpus_size=cfg.corpus_size,
        probe_sentences=cfg.probe_sentences, students=students,
    )  # fmt: skip


def build(cfg: DistillConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The recipe's parts: data parallel over ``mesh`` (each step's batch is split over the data
    axes, the parameters are replicated)."""
    task, spec, total = teacher_task(cfg), cfg.teacher_spec(), cfg.loop.total_steps

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
        units_per_step=(cfg.teacher_batch, task.unit),
    )


RECIPE = register(
    Recipe(
        name="distill",
        config_cls=DistillConfig,
        build=build,
        description="progressive distillation on sparse parity or a PCFG masked LM: teacher "
        "trajectory, probes, progressive / 2-shot / one-shot / label students",
        default_preset="cpu",
        traced=("optim.teacher.lr",),
    )
)

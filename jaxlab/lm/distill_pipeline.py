"""The progressive-distillation experiment, step by step on a train loop (sparse parity or a PCFG
masked LM; Panigrahi et al., ICLR 2025, arXiv 2410.05464).

The teacher trains one step at a time (:func:`teacher_update`), keeping a snapshot of its
parameters every ``every`` steps inside its state (:class:`TeacherState`), so a loop's checkpoints
hold the whole trajectory. Afterwards the trajectory becomes a :class:`distill.TeacherRun`
(:func:`teacher_run`), its checkpoints are probed, the transition (2-shot) checkpoint is chosen,
and students of the four methods over several seeds are distilled in one vmapped program
(:func:`distil_students`): :func:`parity_results` and :func:`pcfg_results` for the two tasks, and
:func:`write_artifacts` writes ``results.json`` and the three plots of either.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import json_files
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import distill, pcfg
from jaxlab.lm import pcfg_distill as pd
from jaxlab.lm import sparse_parity as sp


@flax.struct.dataclass
class TeacherState:
    """Teacher train state with its whole trajectory.

    Attributes:
      params, opt_state: the teacher now.
      key: data key (batch ``t`` uses ``fold_in(key, t)``).
      step: teacher steps done.
      snapshots: ``[C, ...]`` parameters after steps ``every, 2·every, …`` (zeros until written).
      losses: ``[T]`` per-step losses (zeros until run).
      hparams: the traced values of the teacher's optimiser.
    """

    params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    snapshots: Any
    losses: jax.Array
    hparams: dict


@dataclasses.dataclass(frozen=True)
class Students:
    """How the students are distilled.

    Attributes:
      spec: their training (steps, batch, evaluation interval, optimiser).
      seeds: students per method (vmapped).
      seed: the experiment's seed (the students' keys, the probes' inputs and the PCFG corpus).
      multiplier: the student at step ``u`` follows the first selected checkpoint at or after
        ``u·multiplier``.
      kd: the distillation term (temperature, its annealing, forward or reverse KL).
      saturate: follow the teacher's checkpoints at the student's pace (move on when its accuracy
        saturates, :func:`distill.saturation_update`) instead of at ``multiplier``.
    """

    spec: distill.TrainSpec
    seeds: int = 1
    seed: int = 0
    multiplier: float = 1.0
    kd: distill.KDLoss = distill.KDLoss()
    saturate: bool = False


def init_teacher(
    params: Any,
    opt: optax.GradientTransformation,
    key: jax.Array,
    spec: distill.TrainSpec,
    hparams: Mapping[str, Any],
) -> TeacherState:
    """The state of a teacher starting at ``params`` (empty snapshot buffer and losses)."""
    n_ckpt = spec.steps // spec.every
    return TeacherState(
        params=params,
        opt_state=opt.init(params),
        key=key,
        step=jnp.zeros((), jnp.int32),
        snapshots=jax.tree.map(lambda p: jnp.zeros((n_ckpt, *p.shape), p.dtype), params),
        losses=jnp.zeros((spec.steps,), jnp.float32),
        hparams={k: jnp.float32(v) for k, v in hparams.items()},
    )


def teacher_update(
    state: TeacherState,
    loss_fn: Callable[[Any], jax.Array],
    opt: optax.GradientTransformation,
    spec: distill.TrainSpec,
) -> tuple[TeacherState, dict[str, jax.Array]]:
    """One teacher step on ``loss_fn(params)`` that also stores the parameters in the snapshot
    buffer every ``spec.every`` steps and records the loss."""
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    done = state.step + 1
    write = done % spec.every == 0
    index = jnp.maximum(done // spec.every - 1, 0)
    snapshots = jax.tree.map(
        lambda buf, p: buf.at[index].set(jnp.where(write, p, buf[index])),
        state.snapshots,
        params,
    )
    losses = state.losses.at[jnp.minimum(state.step, spec.steps - 1)].set(loss)
    new = state.replace(
        params=params, opt_state=opt_state, step=done, snapshots=snapshots, losses=losses
    )
    return new, {"loss": loss}


def teacher_run(state: TeacherState, spec: distill.TrainSpec) -> distill.TeacherRun:
    """The trajectory so far as a :class:`distill.TeacherRun` (host or device arrays).

    Raises:
      ConfigError: fewer than two checkpoints written (the methods need an intermediate one).
    """
    done = int(state.step)
    n_done = done // spec.every
    if n_done < 2:
        raise ConfigError(
            "checkpoint_steps", n_done, "a teacher run with intermediate checkpoints (>= 2)"
        )
    return distill.TeacherRun(
        params=jax.tree.map(lambda p: p[:n_done], state.snapshots),
        steps=(jnp.arange(n_done, dtype=jnp.int32) + 1) * spec.every,
        losses=state.losses[:done],
    )


def distil_students(
    one: Callable[[jax.Array, jax.Array, jax.Array], distill.StudentCurve],
    n_checkpoints: int,
    transition: int | None,
    students: Students,
) -> distill.StudentCurve:
    """``one(key, selection mask, α)`` for every method of :data:`distill.METHODS` and
    ``students.seeds`` keys, as one jitted ``vmap`` (curves with leading ``[seeds, methods]``)."""
    methods = distill.METHODS
    masks = jnp.asarray(
        np.stack([distill.method_selection(m, n_checkpoints, transition) for m in methods])
    )
    alphas = jnp.asarray([1.0 if m == "labels" else 0.0 for m in methods])
    keys = jax.random.split(jax.random.PRNGKey(students.seed + 1), students.seeds)
    return jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None)))(keys, masks, alphas)


def _per_method(values: Any) -> dict[str, list]:
    """``{method: values[:, i]}`` as lists (``values``: ``[seeds, methods, ...]``)."""
    return {m: np.asarray(values)[:, i].tolist() for i, m in enumerate(distill.METHODS)}


def parity_results(
    run: distill.TeacherRun,
    teacher: Any,
    student: Any,
    task: sp.SparseParity,
    probe_x: jax.Array,
    students: Students,
) -> dict[str, Any]:
    """Sparse parity: the checkpoints' degree-1 probes and accuracies, the phase transition, and
    the four methods' students (accuracy on ``probe_x[:4096]``)."""
    n_done = int(np.asarray(run.steps).shape[0])
    corr, acc = jax.jit(distill.probe_run, static_argnums=(0, 2))(teacher, run, task, probe_x)
    on, off = sp.support_ratio(task, corr)
    try:
        transition_step = distill.phase_transition_step(run.losses)
        transition = distill.transition_checkpoint(run)
        found = True
    except ValueError:
        transition_step, transition, found = None, n_done // 2, False
    eval_x, sspec = probe_x[:4096], students.spec

    def one(key, mask, alpha):
        return distill.train_student(
            key, student, teacher, run, mask, alpha, task, sspec, eval_x,
            multiplier=students.multiplier, kd=students.kd, saturate=students.saturate,
        )  # fmt: skip

    curves = distil_students(one, n_done, transition, students)
    samples = np.asarray(distill.samples_to_accuracy(curves, sspec.batch))
    return {
        "n": task.n,
        "k": task.k,
        "checkpoint_steps": np.asarray(run.steps).tolist(),
        "teacher_losses": np.asarray(run.losses).tolist(),
        "checkpoint_accuracy": np.asarray(acc).tolist(),
        "probe_on_support": np.asarray(on).tolist(),
        "probe_off_support": np.asarray(off).tolist(),
        "transition_found": found,
        "transition_step": transition_step,
        "transition_checkpoint": int(transition),
        "transition_checkpoint_step": int(run.steps[transition]),
        "student_steps": np.asarray(curves.steps[0, 0]).tolist(),
        "student_batch": sspec.batch,
        "student_accuracy": _per_method(curves.accuracy),
        "samples_to_95": _per_method(samples),
    }


@dataclasses.dataclass(frozen=True)
class PcfgSetup:
    """The PCFG experiment's static pieces (grammar, task, models, level-1 symbols)."""

    grammar: pcfg.PCFG
    task: pd.MLMTask
    teacher: pd.MaskedLM
    student: pd.MaskedLM
    level1: tuple[str, ...]


def pcfg_setup(
    grammar: pcfg.PCFG,
    *,
    max_len: int,
    mask_rate: float,
    teacher: tuple[int, int],
    student: tuple[int, int],
    objective: str = "masked",
) -> PcfgSetup:
    """The masked-LM (or, ``objective="next_token"``, causal LM) task on ``grammar`` and the
    ``(width, layers)`` teacher and student transformers (d_model = width, heads of 8,
    d_ff = 2·width)."""
    n_term = len(grammar.terminals)
    task = pd.MLMTask(n_term, max_len, mask_rate, objective)

    def model(width, layers):
        return pd.MaskedLM(
            task.vocab, n_term, width, width // 8, 8, 2 * width, layers, causal=task.causal
        )

    level1 = tuple(s for s in grammar.rules if s.startswith("N1_"))
    return PcfgSetup(grammar, task, model(*teacher), model(*student), level1)


def pcfg_data(
    setup: PcfgSetup, *, seed: int, corpus_size: int, probe_sentences: int
) -> tuple[pd.Corpus, pd.MaskedBatch, pd.ProbeSet]:
    """The training corpus, a masked held-out batch and the probe set (concrete arrays even when
    first called while a step is being traced)."""
    with jax.ensure_compile_time_eval():
        rng = np.random.default_rng(seed)
        corpus, _ = pd.make_corpus(rng, setup.grammar, corpus_size, setup.task)
        held, sents = pd.make_corpus(rng, setup.grammar, max(probe_sentences, 256), setup.task)
        key = jax.random.PRNGKey(seed + 77)
        eval_batch = pd.make_batch(key, held.tokens, held.lengths, setup.task)
        probes = pd.make_probe_set(sents[:probe_sentences], setup.task, setup.level1)
    return corpus, eval_batch, probes


def pcfg_results(
    run: distill.TeacherRun,
    setup: PcfgSetup,
    data: tuple[pd.Corpus, pd.MaskedBatch, pd.ProbeSet],
    students: Students,
) -> dict[str, Any]:
    """PCFG: checkpoint metrics and probes, the ``M_robust`` peak as the 2-shot checkpoint, and
    the four methods' students (samples to the labels-only student's final accuracy)."""
    corpus, eval_batch, probes = data
    task, n_done, sspec = setup.task, int(np.asarray(run.steps).shape[0]), students.spec
    loss, acc = jax.jit(pd.checkpoint_metrics, static_argnums=0)(setup.teacher, run, eval_batch)
    positions = tuple(range(2, task.max_len - 2, 3))
    pr = jax.jit(pd.probe_run, static_argnums=(1, 4, 5, 6))(
        jax.random.PRNGKey(students.seed + 5), setup.teacher, run, probes, task, positions,
        len(setup.level1),
    )  # fmt: skip
    pr = {k: np.asarray(v) for k, v in pr.items()}
    transition = pd.curriculum_checkpoint(pr["m_robust_3gram"])

    def one(key, mask, alpha):
        return pd.train_student(
            key, setup.student, setup.teacher, run, mask, alpha, corpus, task, sspec, eval_batch,
            multiplier=students.multiplier, kd=students.kd, saturate=students.saturate,
        )  # fmt: skip

    curves = distil_students(one, n_done, transition, students)
    accuracy = np.asarray(curves.accuracy)  # [seeds, methods, evals]
    labels_final = jnp.asarray(accuracy[:, distill.METHODS.index("labels"), -1])[:, None, None]
    samples = np.asarray(distill.samples_to_accuracy(curves, sspec.batch, labels_final))
    return {
        "task": "pcfg",
        "objective": task.objective,
        "checkpoint_steps": np.asarray(run.steps).tolist(),
        "teacher_losses": np.asarray(run.losses).tolist(),
        "checkpoint_loss": np.asarray(loss).tolist(),
        "checkpoint_accuracy": np.asarray(acc).tolist(),
        "probes": {k: v.tolist() for k, v in pr.items()},
        "transition_checkpoint": int(transition),
        "transition_checkpoint_step": int(run.steps[transition]),
        "student_steps": np.asarray(curves.steps[0, 0]).tolist(),
        "student_batch": sspec.batch,
        "student_accuracy": _per_method(accuracy),
        "student_loss": _per_method(curves.loss),
        "samples_to_labels_final": _per_method(samples),
    }


def _never_reached_as_null(summary: dict[str, Any]) -> dict[str, Any]:
    """``samples_to_*`` entries are ``inf`` for a student that never reached the accuracy; JSON
    has no infinity, so they are written as null with the reason beside them."""

    def null_inf(v: Any) -> Any:
        if isinstance(v, dict | list):
            items = v.items() if isinstance(v, dict) else enumerate(v)
            done = {k: null_inf(x) for k, x in items}
            return done if isinstance(v, dict) else list(done.values())
        return None if isinstance(v, float) and math.isinf(v) else v

    out = dict(summary)
    for key in summary:
        if key.startswith("samples_to_"):
            out[key] = null_inf(summary[key])
            out[key + "_null"] = "null: the student never reached the accuracy in its steps"
    return out


def write_artifacts(results: dict[str, Any], run_dir: Path) -> None:
    """``results.json`` (without the per-step losses), ``teacher_loss.png``,
    ``teacher_probes.png`` and ``students.png`` of :func:`parity_results` or
    :func:`pcfg_results` (told apart by ``results["task"]``)."""
    from jaxlab import media

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in results.items() if k != "teacher_losses"}
    json_files.write(run_dir / "results.json", _never_reached_as_null(summary))
    losses = np.asarray(results["teacher_losses"])
    mark = results["transition_checkpoint_step"]
    steps = results["checkpoint_steps"]
    trained = (np.arange(1, losses.size + 1), losses)
    if results.get("task") == "pcfg":
        ar = results.get("objective") == "next_token"
        what, model = ("next", "next-token LM") if ar else ("masked", "masked LM")
        loss_curves = {f"train loss ({what} tokens)": trained,
                       "held-out loss": (steps, results["checkpoint_loss"])}  # fmt: skip
        loss_title = f"PCFG {model}; M_robust peak (2-shot checkpoint) at step {mark}"
        probes = {name: (steps, values) for name, values in results["probes"].items()}
        probe_labels = (
            "probe value",
            f"n-gram and constituent probes (2-shot checkpoint: step {mark})",
        )
        student_labels = ("student sentences", f"{what}-token accuracy (seed mean)",
                          "PCFG students by method")  # fmt: skip
    else:
        loss_curves = {"teacher loss": trained, "log 2": ([1, losses.size], [np.log(2)] * 2)}
        loss_title = f"sparse parity n={results['n']} k={results['k']}; transition ckpt {mark}"
        probes = {"|E[f x_i]|, i in S": (steps, results["probe_on_support"]),
                  "|E[f x_i]|, i not in S": (steps, results["probe_off_support"])}  # fmt: skip
        probe_labels = ("correlation", f"degree-1 probes (transition checkpoint: step {mark})")
        student_labels = ("student samples", "accuracy (seed mean)", "students by method")
    media.plot_curves(run_dir / "teacher_loss.png", loss_curves, xlabel="teacher step",
                      ylabel="cross-entropy", title=loss_title)  # fmt: skip
    media.plot_curves(run_dir / "teacher_probes.png", probes, xlabel="teacher step",
                      ylabel=probe_labels[0], title=probe_labels[1])  # fmt: skip
    samples = np.asarray(results["student_steps"]) * results["student_batch"]
    media.plot_curves(
        run_dir / "students.png",
        {m: (samples, np.mean(acc, axis=0)) for m, acc in results["student_accuracy"].items()},
        xlabel=student_labels[0],
        ylabel=student_labels[1],
        title=student_labels[2],
    )


@dataclasses.dataclass(frozen=True)
class TeacherTask:
    """One task's teacher as a train loop needs it.

    Attributes:
      model: the teacher module; ``dummy``: its ``init`` inputs after the key.
      batch_loss: ``(key, place) -> (params -> loss)`` on a fresh batch drawn with ``key``
        (``place``: applied to the batch's arrays, e.g. a sharding constraint).
      accuracy: ``params -> scalar`` held-out accuracy (jit-able).
      results: ``TeacherRun -> dict``: probes, transition and students (:func:`parity_results`
        or :func:`pcfg_results`).
      unit: what one sample of a batch is (``"sample"``, ``"sentence"``).
    """

    model: Any
    dummy: tuple
    batch_loss: Callable[[jax.Array, Callable], Callable[[Any], jax.Array]]
    accuracy: Callable[[Any], jax.Array]
    results: Callable[[distill.TeacherRun], dict[str, Any]]
    unit: str


def parity_task(
    task: sp.SparseParity,
    *,
    teacher_width: int,
    student_width: int,
    batch: int,
    probe_samples: int,
    students: Students,
) -> TeacherTask:
    """Sparse parity with MLP teacher and students (cross-entropy on fresh batches of ``batch``;
    probes and accuracies on ``probe_samples`` inputs drawn from ``students.seed``)."""
    teacher, student = distill.ParityMLP(teacher_width), distill.ParityMLP(student_width)
    probe_x, _ = sp.sample(jax.random.PRNGKey(students.seed + 10_000), task, probe_samples)

    def batch_loss(key, place):
        x, y = (place(a) for a in sp.sample(key, task, batch))
        loss = optax.softmax_cross_entropy_with_integer_labels
        return lambda p: loss(teacher.apply(p, x), y).mean()

    def accuracy(params):
        return jnp.mean(jnp.argmax(teacher.apply(params, probe_x), -1) == sp.labels(task, probe_x))

    def results(run):
        return parity_results(run, teacher, student, task, probe_x, students)

    dummy = (jnp.zeros((1, task.n), jnp.float32),)
    return TeacherTask(teacher, dummy, batch_loss, accuracy, results, "sample")


def pcfg_task(
    setup: PcfgSetup,
    *,
    batch: int,
    corpus_size: int,
    probe_sentences: int,
    students: Students,
) -> TeacherTask:
    """The PCFG masked (or next-token) LM of ``setup``: the corpus (``corpus_size`` sentences) and probe set are
    made on the host the first time a step, evaluation or the results need them."""
    data = functools.cache(
        functools.partial(
            pcfg_data, setup, seed=students.seed, corpus_size=corpus_size,
            probe_sentences=probe_sentences,
        )
    )  # fmt: skip
    length = setup.task.max_len

    def batch_loss(key, place):
        b = jax.tree.map(place, pd.sample_batch(key, data()[0], batch, setup.task))
        return lambda p: pd.mlm_metrics(setup.teacher, p, b)[0]

    def accuracy(params):
        return pd.mlm_metrics(setup.teacher, params, data()[1])[1]

    def results(run):
        return pcfg_results(run, setup, data(), students)

    dummy = (jnp.zeros((1, length), jnp.int32), jnp.ones((1, length), bool))
    return TeacherTask(setup.teacher, dummy, batch_loss, accuracy, results, "sentence")


def _check_sizes(obj: Any, names: tuple[str, ...]) -> None:
    """ConfigError naming the first of ``names`` (fields of ``obj``) that is not an int >= 1."""
    for name in names:
        if getattr(obj, name) < 1:
            raise ConfigError(name, getattr(obj, name), "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class ParityConfig:
    """The sparse-parity task: ``n`` bits, parity of ``k`` of them; ``probe_samples`` inputs for
    the correlation probes and the evaluations."""

    n: int = 30
    k: int = 4
    probe_samples: int = 16384

    def __post_init__(self):
        sp.SparseParity(self.n, self.k)  # validates n, k
        _check_sizes(self, ("probe_samples",))


@dataclasses.dataclass(frozen=True)
class PcfgConfig:
    """The PCFG language-modelling task: the random grammar (``seed``, symbols per ``levels``,
    right-hand side ``rule_lengths``), the corpus (``corpus_size`` sentences of at most
    ``max_len`` tokens), the ``objective`` (``masked``: masked LM at ``mask_rate``;
    ``next_token``: causal next-token prediction) and ``probe_sentences`` held-out sentences for
    the n-gram and constituent probes."""

    seed: int = 0
    levels: tuple[int, ...] = (1, 3, 3)
    rule_lengths: tuple[int, ...] = (2, 3)
    corpus_size: int = 4096
    max_len: int = 28
    mask_rate: float = 0.3
    probe_sentences: int = 48
    objective: Literal["masked", "next_token"] = "masked"

    def __post_init__(self):
        pd.MLMTask(3, self.max_len, self.mask_rate, self.objective)  # validates the fields
        _check_sizes(self, ("corpus_size", "probe_sentences"))


@dataclasses.dataclass(frozen=True)
class TeacherConfig:
    """The teacher: ``width`` (MLP width; pcfg: d_model, heads of 8), ``layers`` (pcfg
    transformer depth), ``batch`` per step, a checkpoint kept every ``checkpoint_every`` steps."""

    width: int = 1000
    layers: int = 2
    batch: int = 256
    checkpoint_every: int = 50

    def __post_init__(self):
        _check_sizes(self, ("width", "layers", "batch", "checkpoint_every"))


@dataclasses.dataclass(frozen=True)
class StudentConfig:
    """The students: ``width`` and ``layers`` as the teacher's; ``steps`` of ``batch`` samples,
    evaluated every ``eval_every``; ``seeds`` per method (vmapped); the student at step ``u``
    follows the first selected checkpoint at or after ``u·multiplier``; the teacher's distillation
    temperature ``tau`` (only the teacher is tempered), constant or annealed (``tau_anneal:
    linear``: ``max(tau·(1 − u/steps), tau_min)``), and the ``kl`` direction (``forward``:
    KL(teacher ‖ student), ``reverse``: KL(student ‖ teacher)); :class:`distill.KDLoss`.
    ``schedule``: ``multiplier`` (the checkpoint at or after ``u·multiplier``) or ``saturate``
    (the paper's ``progressive_till_saturate``: the next selected checkpoint once the student's
    accuracy stops rising; :func:`distill.saturation_update`)."""

    width: int = 50
    layers: int = 2
    steps: int = 4000
    batch: int = 64
    eval_every: int = 100
    multiplier: float = 2.0
    tau: float = 1.0
    tau_anneal: Literal["none", "linear"] = "none"
    tau_min: float = 0.05
    kl: Literal["forward", "reverse"] = "forward"
    schedule: Literal["multiplier", "saturate"] = "multiplier"
    seeds: int = 3

    def __post_init__(self):
        _check_sizes(self, ("width", "layers", "steps", "batch", "eval_every", "seeds"))
        if not self.multiplier > 0:
            raise ConfigError("multiplier", self.multiplier, "a float > 0")
        self.kd()  # validates tau, tau_anneal, tau_min, kl
        if self.schedule not in ("multiplier", "saturate"):
            raise ConfigError("schedule", self.schedule, "'multiplier' or 'saturate'")

    def kd(self) -> distill.KDLoss:
        """The students' distillation term."""
        return distill.KDLoss(self.tau, self.tau_anneal, self.tau_min, self.kl)


def make_task(
    kind: str,
    parity: ParityConfig,
    grammar: PcfgConfig,
    teacher: TeacherConfig,
    student: StudentConfig,
    *,
    seed: int,
    student_optim: OptimConfig,
) -> TeacherTask:
    """The ``kind`` ("parity" or "pcfg") task's teacher, students and probes."""
    spec = distill.TrainSpec(student.steps, student.batch, student.eval_every, student_optim)
    students = Students(
        spec, student.seeds, seed, student.multiplier, student.kd(), student.schedule == "saturate"
    )
    if kind == "parity":
        return parity_task(
            sp.SparseParity(parity.n, parity.k), teacher_width=teacher.width,
            student_width=student.width, batch=teacher.batch,
            probe_samples=parity.probe_samples, students=students,
        )  # fmt: skip
    g = pcfg.random_layered_grammar(
        grammar.seed, symbols_per_level=grammar.levels, rhs_lengths=grammar.rule_lengths
    )
    setup = pcfg_setup(
        g, max_len=grammar.max_len, mask_rate=grammar.mask_rate,
        teacher=(teacher.width, teacher.layers), student=(student.width, student.layers),
        objective=grammar.objective,
    )  # fmt: skip
    return pcfg_task(
        setup, batch=teacher.batch, corpus_size=grammar.corpus_size,
        probe_sentences=grammar.probe_sentences, students=students,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DistillOptim:
    """The teacher's and the students' optimisers (plain SGD at 0.2, the paper's sparse-parity
    MLPs; :func:`distill.warmup_cosine` Adam for the PCFG models)."""

    teacher: OptimConfig = OptimConfig(name="sgd", lr=0.2)
    student: OptimConfig = OptimConfig(name="sgd", lr=0.2)


def student_table(results: dict) -> str:
    """The students by method: final accuracy and samples to the target (seed means; a seed that
    never reached the target makes the mean ``never``), from :func:`parity_results` or
    :func:`pcfg_results`, or from their ``results.json`` (where such a seed is ``null``)."""
    if results.get("task") == "pcfg":
        key, target = "samples_to_labels_final", "samples to labels' final acc"
    else:
        key, target = "samples_to_95", "samples to 95% acc"
    seeds = len(next(iter(results["student_accuracy"].values())))
    per = f"{seeds} seed{'s' * (seeds != 1)}, means"
    lines = [f"{'method':<12} {'final acc':>9} {target:>30}   ({per})"]
    for method in distill.METHODS:
        acc = float(np.mean([curve[-1] for curve in results["student_accuracy"][method]]))
        # a seed that never reached the target is inf in memory and null in results.json
        counts = [math.inf if v is None else v for v in results[key][method]]
        samples = float(np.mean(counts))
        shown = "never" if not math.isfinite(samples) else f"{samples:.0f}"
        lines.append(f"{method:<12} {acc:>9.4f} {shown:>30}")
    return "\n".join(lines)

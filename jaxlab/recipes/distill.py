"""``distill``: progressive distillation (arXiv 2410.05464) on the shared loop: sparse parity
(``task: parity``, default) or a PCFG masked LM (``task: pcfg``).

A loop step is one SGD step of the MLP teacher on a fresh batch; every ``checkpoint_every`` steps
the teacher's parameters are written into a stacked snapshot buffer inside the train state, so the
loop's checkpoints keep the whole trajectory (every teacher checkpoint) and a resumed run continues
it. ``finalize`` then picks the checkpoint at the teacher's phase transition, probes every
checkpoint (``E[f(x) x_i]``), distils students of the four methods (progressive, 2-shot, one-shot,
labels) over ``seeds`` seeds in one vmapped program, and writes ``results.json``,
``teacher_loss.png``, ``teacher_probes.png`` and ``students.png`` (accuracy against samples).

With ``task: pcfg`` a loop step is one Adam step (warm-up + cosine, β2 = 0.95) of a bidirectional
transformer masked LM (``teacher_width`` = d_model, heads of 8) on a corpus of ``corpus_size``
sentences of a random cfg3-style grammar (:func:`jaxlab.lm.pcfg.random_layered_grammar`), masked
BERT-style; the snapshots are kept the same way. ``finalize`` runs the n-gram probes (``M_robust``,
``M_close`` for 3- and 5-grams) and the constituent probe on every checkpoint, takes the
``M_robust`` peak as the 2-shot checkpoint, distils students of the four methods and writes
``results.json``, ``teacher_loss.png``, ``teacher_probes.png`` and ``students.png`` (masked-token
accuracy against samples).

Examples::

    jaxlab train distill --preset cpu
    jaxlab train distill n=40 k=4 multiplier=4
    jaxlab train distill --preset pcfg
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.lm import distill, pcfg
from jaxlab.lm import pcfg_distill as pd
from jaxlab.lm import sparse_parity as sp


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    """Configuration of the ``distill`` recipe (``loop.total_steps`` = teacher steps).

    Attributes:
      seed: PRNG seed.
      task: "parity" (MLP teacher, SGD) or "pcfg" (masked-LM transformer teacher, Adam).
      n, k: sparse-parity size.
      teacher_width, teacher_batch, teacher_lr: the MLP teacher and its SGD.
      checkpoint_every: teacher steps between kept checkpoints (divides ``loop.total_steps``).
      student_width, student_steps, student_batch, student_lr, student_eval_every: the students.
      multiplier: the student at step ``u`` uses the first selected checkpoint ``>= u·multiplier``.
      tau: distillation temperature.
      seeds: students per method (vmapped).
      probe_samples: inputs for the correlation probes and the evaluations (parity).
      pcfg_seed, pcfg_levels, pcfg_rule_lengths: the random grammar (pcfg).
      corpus_size, max_len, mask_rate: the masked-LM corpus (pcfg).
      teacher_layers, student_layers: transformer depths (pcfg; widths are d_model, heads of 8).
      probe_sentences: held-out sentences for the n-gram and constituent probes (pcfg).
    """

    seed: int = 0
    task: Literal["parity", "pcfg"] = "parity"
    n: int = 30
    k: int = 4
    teacher_width: int = 1000
    teacher_batch: int = 256
    teacher_lr: float = 0.2
    checkpoint_every: int = 50
    student_width: int = 50
    student_steps: int = 4000
    student_batch: int = 64
    student_lr: float = 0.2
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
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=1500, steps_per_call=50, log_every=50, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        sp.SparseParity(self.n, self.k)  # validates n, k
        if self.checkpoint_every < 1 or self.loop.total_steps % self.checkpoint_every:
            raise ConfigError(
                "checkpoint_every",
                self.checkpoint_every,
                f"a positive divisor of loop.total_steps={self.loop.total_steps}",
            )
        if self.loop.total_steps // self.checkpoint_every < 2:
            raise ConfigError(
                "checkpoint_every",
                self.checkpoint_every,
                "at most loop.total_steps / 2 (the progressive schedule needs intermediate "
                "checkpoints)",
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

    @property
    def parity_task(self) -> sp.SparseParity:
        return sp.SparseParity(self.n, self.k)

    def teacher_spec(self) -> distill.TrainSpec:
        return distill.TrainSpec(
            steps=self.loop.total_steps,
            batch=self.teacher_batch,
            every=self.checkpoint_every,
            optimizer="sgd",
            lr=self.teacher_lr,
        )

    def student_spec(self) -> distill.TrainSpec:
        if self.task == "pcfg":
            return distill.TrainSpec(
                steps=self.student_steps,
                batch=self.student_batch,
                every=self.student_eval_every,
                optimizer="adam",
                lr=self.student_lr,
                schedule="warmup_cosine",
                b2=0.95,
            )
        return distill.TrainSpec(
            steps=self.student_steps,
            batch=self.student_batch,
            every=self.student_eval_every,
            optimizer="sgd",
            lr=self.student_lr,
        )


@flax.struct.dataclass
class TeacherState:
    """Teacher train state with its whole trajectory.

    Attributes:
      params, opt_state: the teacher now.
      key: data key (batch ``t`` uses ``fold_in(key, t)``).
      step: teacher steps done.
      snapshots: ``[C, ...]`` parameters after steps ``every, 2·every, …`` (zeros until written).
      losses: ``[T]`` per-step losses (zeros until run).
      hparams: ``{"teacher_lr": ...}``, the traced SGD learning rate.
    """

    params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    snapshots: Any
    losses: jax.Array
    hparams: dict


def _teacher_update(state, loss_fn, opt, spec):
    """One teacher step (learning rate traced in ``state.hparams``) that also stores the params
    in the snapshot buffer every ``spec.every`` steps and records the loss: the teachers of every
    task keep their whole trajectory this way."""
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    lr = state.hparams["teacher_lr"]
    params = optax.apply_updates(state.params, jax.tree.map(lambda u: lr * u, updates))
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


def build(cfg: DistillConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The recipe's parts: data parallel over ``mesh`` (each step's batch is split over the data
    axes, the parameters are replicated)."""
    if cfg.task == "pcfg":
        return build_pcfg(cfg, mesh)

    def spread(x):  # a batch made inside the step, split over the data axes
        return constrain_leading(x, mesh)

    task, spec = cfg.parity_task, cfg.teacher_spec()
    teacher = distill.ParityMLP(cfg.teacher_width)
    student = distill.ParityMLP(cfg.student_width)
    # SGD keeps no state: the traced learning rate scales the update in train_step
    opt = optax.sgd(1.0)
    n_ckpt = spec.steps // spec.every
    probe_x, _ = sp.sample(jax.random.PRNGKey(cfg.seed + 10_000), task, cfg.probe_samples)

    def init(key: jax.Array) -> TeacherState:
        init_key, data_key = jax.random.split(key)
        params = teacher.init(init_key, jnp.zeros((1, task.n), jnp.float32))
        return TeacherState(
            params=params,
            opt_state=opt.init(params),
            key=data_key,
            step=jnp.zeros((), jnp.int32),
            snapshots=jax.tree.map(lambda p: jnp.zeros((n_ckpt, *p.shape), p.dtype), params),
            losses=jnp.zeros((spec.steps,), jnp.float32),
            hparams=hparams_of(RECIPE, cfg),
        )

    def train_step(state: TeacherState, batch: None) -> tuple[TeacherState, dict]:
        del batch
        x, y = sp.sample(jax.random.fold_in(state.key, state.step), task, spec.batch)
        x, y = spread(x), spread(y)

        def loss_fn(p):
            logits = teacher.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        return _teacher_update(state, loss_fn, opt, spec)

    @jax.jit
    def _accuracy(params):
        logits = teacher.apply(params, probe_x)
        return jnp.mean(jnp.argmax(logits, -1) == sp.labels(task, probe_x))

    def evaluate(state: TeacherState) -> dict[str, float]:
        return {"teacher_accuracy": float(_accuracy(state.params))}

    def finalize(state: TeacherState, run_dir: Path) -> None:
        results = run_students(cfg, jax.device_get(state), teacher, student, probe_x)
        write_artifacts(results, Path(run_dir))

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(spec.batch, "sample"),
    )


def run_students(
    cfg: DistillConfig, state: TeacherState, teacher, student, probe_x
) -> dict[str, Any]:
    """Probes, transition, and the four methods' students over ``cfg.seeds`` seeds."""
    task, spec = cfg.parity_task, cfg.teacher_spec()
    done = int(state.step)
    n_done = done // spec.every
    if n_done < 2:
        raise ConfigError(
            "checkpoint_steps", n_done, "a teacher run with intermediate checkpoints (>= 2)"
        )
    run = distill.TeacherRun(
        params=jax.tree.map(lambda p: p[:n_done], state.snapshots),
        steps=(jnp.arange(n_done, dtype=jnp.int32) + 1) * spec.every,
        losses=state.losses[:done],
    )
    corr, acc = jax.jit(distill.probe_run, static_argnums=(0, 2))(teacher, run, task, probe_x)
    on, off = sp.support_ratio(task, corr)
    try:
        transition_step = distill.phase_transition_step(run.losses)
        transition = distill.transition_checkpoint(run)
        found = True
    except ValueError:
        transition_step, transition, found = None, n_done // 2, False
    methods = distill.METHODS
    masks = jnp.asarray(
        np.stack([distill.method_selection(m, n_done, transition) for m in methods])
    )
    alphas = jnp.asarray([1.0 if m == "labels" else 0.0 for m in methods])
    sspec = cfg.student_spec()
    eval_x = probe_x[:4096]

    def one(key, mask, alpha):
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
            multiplier=cfg.multiplier,
            tau=cfg.tau,
        )

    keys = jax.random.split(jax.random.PRNGKey(cfg.seed + 1), cfg.seeds)
    curves = jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None)))(keys, masks, alphas)
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
        "student_accuracy": {
            m: np.asarray(curves.accuracy[:, i]).tolist() for i, m in enumerate(methods)
        },
        "samples_to_95": {m: samples[:, i].tolist() for i, m in enumerate(methods)},
    }


def write_artifacts(results: dict[str, Any], run_dir: Path) -> None:
    """``results.json``, ``teacher_loss.png``, ``teacher_probes.png`` and ``students.png``."""
    from jaxlab import media

    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in results.items() if k != "teacher_losses"}
    (run_dir / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    losses = np.asarray(results["teacher_losses"])
    mark = results["transition_checkpoint_step"]
    media.plot_curves(
        run_dir / "teacher_loss.png",
        {
            "teacher loss": (np.arange(1, losses.size + 1), losses),
            "log 2": ([1, losses.size], [np.log(2)] * 2),
        },
        xlabel="teacher step",
        ylabel="cross-entropy",
        title=f"sparse parity n={results['n']} k={results['k']}; transition ckpt {mark}",
    )
    steps = results["checkpoint_steps"]
    media.plot_curves(
        run_dir / "teacher_probes.png",
        {
            "|E[f x_i]|, i in S": (steps, results["probe_on_support"]),
            "|E[f x_i]|, i not in S": (steps, results["probe_off_support"]),
        },
        xlabel="teacher step",
        ylabel="correlation",
        title=f"degree-1 probes (transition checkpoint: step {mark})",
    )
    samples = np.asarray(results["student_steps"]) * results["student_batch"]
    media.plot_curves(
        run_dir / "students.png",
        {m: (samples, np.mean(acc, axis=0)) for m, acc in results["student_accuracy"].items()},
        xlabel="student samples",
        ylabel="accuracy (seed mean)",
        title="students by method",
    )


# ----------------------------------------------------------------------------- task: pcfg


@dataclasses.dataclass(frozen=True)
class PcfgSetup:
    """The PCFG experiment's static pieces (grammar, task, models, level-1 symbols)."""

    grammar: pcfg.PCFG
    task: pd.MLMTask
    teacher: pd.MaskedLM
    student: pd.MaskedLM
    level1: tuple[str, ...]


def pcfg_setup(cfg: DistillConfig) -> PcfgSetup:
    grammar = pcfg.random_layered_grammar(
        cfg.pcfg_seed, symbols_per_level=cfg.pcfg_levels, rhs_lengths=cfg.pcfg_rule_lengths
    )
    n_term = len(grammar.terminals)
    task = pd.MLMTask(n_term, cfg.max_len, cfg.mask_rate)

    def model(width, layers):
        return pd.MaskedLM(task.vocab, n_term, width, width // 8, 8, 2 * width, layers)

    level1 = tuple(s for s in grammar.rules if s.startswith("N1_"))
    return PcfgSetup(
        grammar,
        task,
        model(cfg.teacher_width, cfg.teacher_layers),
        model(cfg.student_width, cfg.student_layers),
        level1,
    )


def build_pcfg(cfg: DistillConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The ``task: pcfg`` parts. The corpus is generated on the host the first time a step,
    evaluation or finalisation needs it (building and ``init`` stay cheap)."""
    setup = pcfg_setup(cfg)
    task, teacher, spec = setup.task, setup.teacher, cfg.teacher_spec()
    n_ckpt = spec.steps // spec.every
    # Adam with warm-up + cosine at peak 1, scaled by the traced teacher_lr in train_step
    schedule = distill.TrainSpec(
        steps=spec.steps, batch=spec.batch, every=spec.every, optimizer="adam", lr=1.0,
        schedule="warmup_cosine", b2=0.95,
    )  # fmt: skip
    opt = schedule.make_optimizer()

    @functools.cache
    def data():
        # concrete arrays even when first called while a step is being traced
        with jax.ensure_compile_time_eval():
            rng = np.random.default_rng(cfg.seed)
            corpus, _ = pd.make_corpus(rng, setup.grammar, cfg.corpus_size, task)
            held, sents = pd.make_corpus(rng, setup.grammar, max(cfg.probe_sentences, 256), task)
            key = jax.random.PRNGKey(cfg.seed + 77)
            eval_batch = pd.mask_tokens(key, held.tokens, held.lengths, task)
            probes = pd.make_probe_set(sents[: cfg.probe_sentences], task, setup.level1)
        return corpus, eval_batch, probes

    def init(key: jax.Array) -> TeacherState:
        init_key, data_key = jax.random.split(key)
        dummy = jnp.zeros((1, task.max_len), jnp.int32)
        params = teacher.init(init_key, dummy, jnp.ones((1, task.max_len), bool))
        return TeacherState(
            params=params,
            opt_state=opt.init(params),
            key=data_key,
            step=jnp.zeros((), jnp.int32),
            snapshots=jax.tree.map(lambda p: jnp.zeros((n_ckpt, *p.shape), p.dtype), params),
            losses=jnp.zeros((spec.steps,), jnp.float32),
            hparams=hparams_of(RECIPE, cfg),
        )

    def train_step(state: TeacherState, batch: None) -> tuple[TeacherState, dict]:
        del batch
        corpus = data()[0]
        b = pd.sample_batch(jax.random.fold_in(state.key, state.step), corpus, spec.batch, task)
        b = jax.tree.map(lambda x: constrain_leading(x, mesh), b)

        def loss_fn(p):
            return pd.mlm_metrics(teacher, p, b)[0]

        return _teacher_update(state, loss_fn, opt, spec)

    @jax.jit
    def _accuracy(params, eval_batch):
        return pd.mlm_metrics(teacher, params, eval_batch)[1]

    def evaluate(state: TeacherState) -> dict[str, float]:
        return {"teacher_accuracy": float(_accuracy(state.params, data()[1]))}

    def finalize(state: TeacherState, run_dir: Path) -> None:
        results = run_pcfg_students(cfg, setup, jax.device_get(state), *data())
        write_pcfg_artifacts(results, Path(run_dir))

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(spec.batch, "sentence"),
    )


def run_pcfg_students(
    cfg: DistillConfig,
    setup: PcfgSetup,
    state: TeacherState,
    corpus: pd.Corpus,
    eval_batch: pd.MaskedBatch,
    probes: pd.ProbeSet,
) -> dict[str, Any]:
    """Checkpoint metrics and probes, the ``M_robust`` peak, and the four methods' students."""
    task, spec = setup.task, cfg.teacher_spec()
    done = int(state.step)
    n_done = done // spec.every
    if n_done < 2:
        raise ConfigError(
            "checkpoint_steps", n_done, "a teacher run with intermediate checkpoints (>= 2)"
        )
    run = distill.TeacherRun(
        params=jax.tree.map(lambda p: p[:n_done], state.snapshots),
        steps=(jnp.arange(n_done, dtype=jnp.int32) + 1) * spec.every,
        losses=state.losses[:done],
    )
    loss, acc = jax.jit(pd.checkpoint_metrics, static_argnums=0)(setup.teacher, run, eval_batch)
    positions = tuple(range(2, task.max_len - 2, 3))
    pr = jax.jit(pd.probe_run, static_argnums=(1, 4, 5, 6))(
        jax.random.PRNGKey(cfg.seed + 5), setup.teacher, run, probes, task, positions,
        len(setup.level1),
    )  # fmt: skip
    pr = {k: np.asarray(v) for k, v in pr.items()}
    transition = pd.curriculum_checkpoint(pr["m_robust_3gram"])
    methods = distill.METHODS
    masks = jnp.asarray(
        np.stack([distill.method_selection(m, n_done, transition) for m in methods])
    )
    alphas = jnp.asarray([1.0 if m == "labels" else 0.0 for m in methods])
    sspec = cfg.student_spec()

    def one(key, mask, alpha):
        return pd.train_student(
            key, setup.student, setup.teacher, run, mask, alpha, corpus, task, sspec, eval_batch,
            multiplier=cfg.multiplier, tau=cfg.tau,
        )  # fmt: skip

    keys = jax.random.split(jax.random.PRNGKey(cfg.seed + 1), cfg.seeds)
    curves = jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None)))(keys, masks, alphas)
    accuracy = np.asarray(curves.accuracy)  # [seeds, methods, evals]
    labels_final = jnp.asarray(accuracy[:, methods.index("labels"), -1])[:, None, None]
    samples = np.asarray(distill.samples_to_accuracy(curves, sspec.batch, labels_final))
    return {
        "task": "pcfg",
        "checkpoint_steps": np.asarray(run.steps).tolist(),
        "teacher_losses": np.asarray(run.losses).tolist(),
        "checkpoint_loss": np.asarray(loss).tolist(),
        "checkpoint_accuracy": np.asarray(acc).tolist(),
        "probes": {k: v.tolist() for k, v in pr.items()},
        "transition_checkpoint": int(transition),
        "transition_checkpoint_step": int(run.steps[transition]),
        "student_steps": np.asarray(curves.steps[0, 0]).tolist(),
        "student_batch": sspec.batch,
        "student_accuracy": {m: accuracy[:, i].tolist() for i, m in enumerate(methods)},
        "student_loss": {m: np.asarray(curves.loss)[:, i].tolist() for i, m in enumerate(methods)},
        "samples_to_labels_final": {m: samples[:, i].tolist() for i, m in enumerate(methods)},
    }


def write_pcfg_artifacts(results: dict[str, Any], run_dir: Path) -> None:
    """``results.json``, ``teacher_loss.png``, ``teacher_probes.png`` and ``students.png``."""
    from jaxlab import media

    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in results.items() if k != "teacher_losses"}
    (run_dir / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    losses = np.asarray(results["teacher_losses"])
    mark = results["transition_checkpoint_step"]
    steps = results["checkpoint_steps"]
    media.plot_curves(
        run_dir / "teacher_loss.png",
        {
            "train loss (masked tokens)": (np.arange(1, losses.size + 1), losses),
            "held-out loss": (steps, results["checkpoint_loss"]),
        },
        xlabel="teacher step",
        ylabel="cross-entropy",
        title=f"PCFG masked LM; M_robust peak (2-shot checkpoint) at step {mark}",
    )
    media.plot_curves(
        run_dir / "teacher_probes.png",
        {name: (steps, values) for name, values in results["probes"].items()},
        xlabel="teacher step",
        ylabel="probe value",
        title=f"n-gram and constituent probes (2-shot checkpoint: step {mark})",
    )
    samples = np.asarray(results["student_steps"]) * results["student_batch"]
    media.plot_curves(
        run_dir / "students.png",
        {m: (samples, np.mean(acc, axis=0)) for m, acc in results["student_accuracy"].items()},
        xlabel="student sentences",
        ylabel="masked-token accuracy (seed mean)",
        title="PCFG students by method",
    )


RECIPE = register(
    Recipe(
        name="distill",
        config_cls=DistillConfig,
        build=build,
        description="progressive distillation on sparse parity or a PCFG masked LM: teacher "
        "trajectory, probes, progressive / 2-shot / one-shot / label students",
        default_preset="cpu",
        traced=("teacher_lr",),
    )
)

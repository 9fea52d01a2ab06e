"""Progressive distillation: teachers trained with every checkpoint kept, students that follow them.

Panigrahi et al., "Progressive distillation induces an implicit curriculum" (ICLR 2025,
arXiv 2410.05464). The student minimises (the paper's ``boolean_distill_expts.py``)

    L = α · CE(y, s(x)) + (1 − α) · KL(softmax(t(x)/τ) ‖ softmax(s(x)))

(forward KL with only the teacher tempered; equal to the paper's soft cross-entropy up to the
teacher's entropy, which has no gradient; :class:`KDLoss` adds the paper's linear temperature
annealing and the reverse KL). The teacher ``t`` used at student step ``u`` is the *first selected teacher checkpoint
at or after step u · multiplier* (the student follows the teacher's trajectory, faster by the
multiplier), and the last selected one once the trajectory is exhausted. The methods differ in the
selection: **progressive** (every checkpoint), **2-shot** (the checkpoint at the teacher's phase
transition and the final one), **one-shot** (the final one) and **labels** (α = 1: no teacher).

Everything runs in one program: the teacher's training is a ``lax.scan`` whose outer level stacks a
parameter snapshot every ``every`` steps (so the teacher run is a pytree with a leading checkpoint
axis), and a student's training gathers its teacher from that stack by a traced index, so the four
methods and the seeds are a ``vmap`` over ``(selection mask, α, key)`` of one compiled function.
:func:`save_teacher_run` / :func:`load_teacher_run` keep every checkpoint on disk through
:class:`jaxlab.core.checkpoint.Checkpointer`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import sparse_parity
from jaxlab.lm.sparse_parity import SparseParity
from jaxlab.nn.transformer import TransformerBlock

Method = Literal["progressive", "two_shot", "one_shot", "labels"]
METHODS: tuple[Method, ...] = ("progressive", "two_shot", "one_shot", "labels")


# ----------------------------------------------------------------------------- models


def _uniform_fan_in(fan_in: int) -> Callable:
    """PyTorch's default ``U(±1/√fan_in)`` (the paper's teachers are PyTorch ``nn.Linear``)."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class ParityMLP(nn.Module):
    """One-hidden-layer ReLU MLP ``x -> W2 relu(W1 x + b1) (+ b2)`` with 2 logits (the paper's MLP).

    Default ("small") initialisation: the first layer is ``N(0, (input_scale²/n))`` with
    ``U(±1/√n)`` biases; the head is ``N(0, head_std²)`` without bias, so the initial function is
    near constant and the probes measure what training put there, not the random initial function.
    With ``torch_init`` every layer is PyTorch's ``nn.Linear`` default, ``U(±1/√fan_in)`` kernels and
    biases (the paper's code, ``parity/utils.py::prepare_model``).

    Attributes:
      width: hidden units.
      input_scale: first-layer std times ``√n`` (small init).
      head_std: std of the output weights (small init).
      torch_init: use the paper's PyTorch default initialisation instead.
    """

    width: int
    input_scale: float = 0.1
    head_std: float = 1e-3
    torch_init: bool = False

    @nn.compact
    def __call__(self, x: Float[Array, "*batch n"]) -> Float[Array, "*batch 2"]:
        n = x.shape[-1]
        if self.torch_init:
            kernel_in, kernel_out = _uniform_fan_in(n), _uniform_fan_in(self.width)
        else:
            kernel_in = nn.initializers.normal(self.input_scale / math.sqrt(n))
            kernel_out = nn.initializers.normal(self.head_std)
        h = nn.Dense(
            self.width, kernel_init=kernel_in, bias_init=_uniform_fan_in(n), name="hidden"
        )(x)
        return nn.Dense(
            2,
            use_bias=self.torch_init,
            kernel_init=kernel_out,
            bias_init=_uniform_fan_in(self.width),
            name="head",
        )(nn.relu(h))


class ParityTransformer(nn.Module):
    """Bidirectional transformer classifier on the bits of ``x`` (the paper's GPT-2 teacher, small).

    Tokens ``(1 - x_i)/2 ∈ {0, 1}`` are embedded, a learned position embedding is added, then
    ``n_layers`` pre-norm :class:`jaxlab.nn.transformer.TransformerBlock` (non-causal) and a
    linear head on the mean-pooled stream give 2 logits.

    Attributes:
      d_model: residual width; n_heads, head_dim: attention shape; d_ff: SwiGLU width;
      n_layers: blocks.
    """

    d_model: int = 32
    n_heads: int = 4
    head_dim: int = 8
    d_ff: int = 64
    n_layers: int = 2

    @nn.compact
    def __call__(self, x: Float[Array, "batch n"]) -> Float[Array, "batch 2"]:
        tokens = ((1 - x) // 2).astype(jnp.int32)
        h = nn.Embed(2, self.d_model, name="embed")(tokens)
        pos = self.param(
            "pos", nn.initializers.normal(0.02), (x.shape[-1], self.d_model), jnp.float32
        )
        h = h + pos[None]
        for i in range(self.n_layers):
            h, _ = TransformerBlock(
                n_heads=self.n_heads,
                head_dim=self.head_dim,
                d_ff=self.d_ff,
                causal=False,
                name=f"block_{i}",
            )(h)
        return nn.Dense(2, name="head")(jnp.mean(h, axis=-2))


# ----------------------------------------------------------------------------- loss


def distillation_loss(
    student_logits: Float[Array, "batch classes"],
    teacher_logits: Float[Array, "batch classes"],
    labels: Int[Array, " batch"],
    *,
    alpha: Float[Array, ""] | float,
    tau: Float[Array, ""] | float = 1.0,
    reverse: bool = False,
    weights: Float[Array, " batch"] | None = None,
) -> Float[Array, ""]:
    """``α·CE(y, s) + (1−α)·KL(softmax(t/τ) ‖ softmax(s))``, averaged over the batch (nats).

    Only the teacher is tempered: its distribution is ``softmax(t/τ)`` and the student's is its
    untempered ``softmax(s)``, as in the paper's ``boolean_distill_expts.py`` (a soft
    cross-entropy there; the KL differs from it by the teacher's entropy, which has no gradient).
    ``reverse`` uses ``KL(softmax(s) ‖ softmax(t/τ))`` instead. With ``weights`` the average is
    ``Σ w·ℓ / max(Σ w, 1)`` (the masked positions of a masked LM). The teacher's logits are
    constants (``stop_gradient``); ``τ > 0`` may be traced (an annealed temperature).
    """
    s = student_logits.astype(jnp.float32)
    t = jax.lax.stop_gradient(teacher_logits.astype(jnp.float32))
    ce = optax.softmax_cross_entropy_with_integer_labels(s, labels)
    log_p_t = jax.nn.log_softmax(t / tau, axis=-1)
    log_p_s = jax.nn.log_softmax(s, axis=-1)
    if reverse:
        kl = jnp.sum(jnp.exp(log_p_s) * (log_p_s - log_p_t), axis=-1)
    else:
        kl = jnp.sum(jnp.exp(log_p_t) * (log_p_t - log_p_s), axis=-1)
    per_example = alpha * ce + (1.0 - alpha) * kl
    if weights is None:
        return jnp.mean(per_example)
    return jnp.sum(weights * per_example) / jnp.maximum(jnp.sum(weights), 1.0)


@dataclasses.dataclass(frozen=True)
class KDLoss:
    """The distillation term of a student's loss (static; hashable).

    Attributes:
      tau: the teacher's temperature ``τ > 0`` (at step 0 when annealed).
      anneal: ``"none"`` (constant ``τ``) or ``"linear"``: ``τ_u = max(τ·(1 − u/steps), tau_min)``
        over the student's ``steps`` (the paper's ``teacher_temperature_anneal``).
      tau_min: floor of the annealed temperature (``> 0``).
      kl: ``"forward"`` ``KL(teacher ‖ student)`` or ``"reverse"`` ``KL(student ‖ teacher)``.
    """

    tau: float = 1.0
    anneal: Literal["none", "linear"] = "none"
    tau_min: float = 0.05
    kl: Literal["forward", "reverse"] = "forward"

    def __post_init__(self) -> None:
        for name in ("tau", "tau_min"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ConfigError(name, v, "a temperature > 0")
        if self.anneal not in ("none", "linear"):
            raise ConfigError("tau_anneal", self.anneal, "'none' or 'linear'")
        if self.kl not in ("forward", "reverse"):
            raise ConfigError("kl", self.kl, "'forward' or 'reverse'")

    def temperature(self, step: Int[Array, ""] | int, steps: int) -> Float[Array, ""]:
        """``τ`` at student step ``step`` of ``steps`` (traced steps allowed)."""
        if self.anneal == "none":
            return jnp.float32(self.tau)
        frac = jnp.asarray(step, jnp.float32) / steps
        return jnp.maximum(self.tau * (1.0 - frac), self.tau_min)

    def __call__(self, student_logits, teacher_logits, labels, *, alpha, step, steps, weights=None):
        """:func:`distillation_loss` at step ``step`` of ``steps`` with this temperature and KL."""
        return distillation_loss(
            student_logits, teacher_logits, labels, alpha=alpha,
            tau=self.temperature(step, steps), reverse=self.kl == "reverse", weights=weights,
        )  # fmt: skip


#: the default distillation term: forward KL at τ = 1
FORWARD_KL = KDLoss()


# ----------------------------------------------------------------------------- teacher runs


@flax.struct.dataclass
class TeacherRun:
    """A teacher's whole trajectory (device arrays, or host arrays after ``jax.device_get``).

    Attributes:
      params: parameter tree with a leading checkpoint axis ``[C, ...]`` (checkpoint ``c`` taken
        after step ``steps[c]``).
      steps: ``[C]`` int32 training steps of the checkpoints (increasing; the last is the final).
      losses: ``[T]`` per-step training loss (on the fresh batch, before its update).
    """

    params: Any
    steps: Int[Array | np.ndarray, " C"]
    losses: Float[Array | np.ndarray, " T"]


def warmup_cosine(
    lr: float, steps: int, *, name: str = "adam", b2: float = 0.95, warmup: float = 0.06
) -> OptimConfig:
    """The paper's students and PCFG models: ``name`` (Adam, β2 = 0.95) with a linear warm-up over
    the first ``warmup`` fraction of ``steps`` (at least one step), then cosine decay to 0."""
    return OptimConfig(
        name=name,
        lr=lr,
        schedule="cosine",
        warmup_steps=max(int(round(warmup * steps)), 1),
        min_lr_ratio=0.0,
        b2=b2,
    )


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """Static training settings of a teacher or student.

    Attributes:
      steps: optimiser steps (each on a fresh batch); the schedule of ``optim`` runs over them.
      batch: samples per step.
      every: steps between checkpoints (teacher) or evaluations (student); divides ``steps``.
      optim: the optimiser (default plain SGD at 0.1; :func:`warmup_cosine` for the paper's
        students and PCFG models).
    """

    steps: int = 2000
    batch: int = 64
    every: int = 50
    optim: OptimConfig = OptimConfig(name="sgd", lr=0.1)

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "a positive int")
        if self.steps % self.every:
            raise ConfigError("every", self.every, f"a divisor of steps={self.steps}")

    def learning_rate(self) -> optax.Schedule | float:
        return optim_lib.learning_rate(self.optim, self.steps)

    def make_optimizer(self) -> optax.GradientTransformation:
        return optim_lib.make(self.optim, self.steps)


def train_teacher(
    key: PRNGKeyArray, model: nn.Module, task: SparseParity, spec: TrainSpec
) -> TeacherRun:
    """Trains ``model`` on fresh sparse-parity batches with cross-entropy, keeping every checkpoint.

    A ``lax.scan`` over ``steps / every`` chunks of a ``lax.scan`` over steps; the chunk outputs
    stack the parameters, giving ``TeacherRun.params`` of leading size ``steps / every``.
    Jit with ``model``, ``task`` and ``spec`` static; vmap over ``key`` for seeds.
    """
    init_key, data_key = jax.random.split(key)
    params = model.init(init_key, jnp.zeros((1, task.n), jnp.float32))
    opt = spec.make_optimizer()

    def step(carry, t):
        params, opt_state = carry
        x, y = sparse_parity.sample(jax.random.fold_in(data_key, t), task, spec.batch)

        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def chunk(carry, c):
        carry, losses = jax.lax.scan(step, carry, c * spec.every + jnp.arange(spec.every))
        return carry, (carry[0], losses)

    n_ckpt = spec.steps // spec.every
    _, (snapshots, losses) = jax.lax.scan(chunk, (params, opt.init(params)), jnp.arange(n_ckpt))
    steps = (jnp.arange(n_ckpt, dtype=jnp.int32) + 1) * spec.every
    return TeacherRun(params=snapshots, steps=steps, losses=losses.reshape(-1))


def checkpoint_params(run: TeacherRun, index: Int[Array, ""] | int) -> Any:
    """The parameters of checkpoint ``index`` (traced indices allowed)."""
    return jax.tree.map(lambda p: p[index], run.params)


def phase_transition_step(
    losses: Float[Array, " T"] | np.ndarray, *, drop: float = 0.1, window: int = 20
) -> int:
    """The step where the teacher leaves its plateau: the first step at which the running mean loss
    (over ``window`` steps) falls ``drop`` below the plateau value ``log 2`` (chance for 2 classes).

    Raises:
      ValueError: the loss never leaves the plateau (no transition to choose a checkpoint from).
    """
    losses = np.asarray(losses, np.float64)
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    below = np.nonzero(smooth <= (1.0 - drop) * math.log(2.0))[0]
    if below.size == 0:
        raise ValueError(
            f"losses: the teacher never fell {drop:.0%} below log 2 in {losses.size} steps "
            "(no phase transition; train the teacher longer)"
        )
    return int(below[0] + window - 1)


def transition_checkpoint(run: TeacherRun, **kwargs: Any) -> int:
    """Index of the first checkpoint at or after :func:`phase_transition_step` (the 2-shot one).

    Raises:
      ValueError: that checkpoint is the final one (no intermediate checkpoint).
    """
    step = phase_transition_step(run.losses, **kwargs)
    steps = np.asarray(run.steps)
    index = int(np.searchsorted(steps, step, side="left"))
    if index >= steps.size - 1:
        raise ValueError(
            f"checkpoint_steps: the transition (step {step}) is at or after the final checkpoint "
            f"{int(steps[-1])}; save checkpoints more often"
        )
    return index


# ----------------------------------------------------------------------------- schedules


def schedule_index(
    student_step: Int[Array, ""] | int,
    checkpoint_steps: Int[Array, " C"],
    selected: Bool[Array, " C"],
    multiplier: float | Float[Array, ""],
) -> Int[Array, ""]:
    """The teacher checkpoint used at ``student_step``: the first *selected* checkpoint whose step
    is ``>= student_step · multiplier``, or the last selected one when none is.

    Jit- and vmap-able (``selected`` may be traced, so methods are a vmap axis).
    """
    target = jnp.asarray(student_step, jnp.float32) * multiplier
    steps = jnp.asarray(checkpoint_steps)
    big = jnp.iinfo(jnp.int32).max
    candidates = jnp.where(selected & (steps.astype(jnp.float32) >= target), steps, big)
    last = jnp.max(jnp.where(selected, jnp.arange(steps.shape[0]), -1))
    first = jnp.argmin(candidates)
    return jnp.where(candidates[first] == big, last, first).astype(jnp.int32)


def method_selection(method: str, n_checkpoints: int, transition: int | None) -> np.ndarray:
    """The boolean checkpoint mask of a method (see the module docstring).

    Raises:
      ConfigError: unknown method; progressive with fewer than 2 checkpoints; 2-shot without an
        intermediate ``transition`` index.
    """
    mask = np.zeros(n_checkpoints, bool)
    if method == "progressive":
        if n_checkpoints < 2:
            raise ConfigError(
                "checkpoint_steps",
                n_checkpoints,
                "a teacher run with intermediate checkpoints (>= 2) for the progressive schedule",
            )
        mask[:] = True
    elif method == "two_shot":
        if transition is None or not 0 <= transition < n_checkpoints - 1:
            raise ConfigError(
                "transition",
                transition,
                f"an intermediate checkpoint index in [0, {n_checkpoints - 2}] for 2-shot",
            )
        mask[[transition, n_checkpoints - 1]] = True
    elif method in ("one_shot", "labels"):
        mask[-1] = True
    else:
        raise ConfigError("method", method, "one of " + ", ".join(METHODS))
    return mask


@flax.struct.dataclass
class Saturation:
    """State of the ``saturate`` teacher schedule (the paper's ``progressive_till_saturate``).

    Attributes:
      index: the teacher checkpoint in use.
      history: ``[window + 1]`` the latest evaluation accuracies, oldest first.
      seen: evaluations so far.
      last: the accuracy when the teacher last moved on (``-1``: not yet set).
    """

    index: Int[Array, ""]
    history: Float[Array, " W"]
    seen: Int[Array, ""]
    last: Float[Array, ""]


def saturation_init(selected: Bool[Array, " C"], window: int = 5) -> Saturation:
    """The schedule at the student's start: the first selected checkpoint, no history."""
    return Saturation(
        index=jnp.argmax(selected).astype(jnp.int32),
        history=jnp.zeros((window + 1,), jnp.float32),
        seen=jnp.zeros((), jnp.int32),
        last=jnp.float32(-1.0),
    )


def saturation_update(
    sat: Saturation, accuracy: Float[Array, ""], selected: Bool[Array, " C"], *, tol: float = 0.01
) -> Saturation:
    """Moves to the next selected checkpoint when the student has saturated on the current one.

    With ``W + 1`` accuracies seen, ``prev`` = the mean of the ``W`` before the newest ``a``
    (``last`` is set to ``prev`` the first time): the teacher moves on when ``a − prev < tol``
    (no gain over the window) and ``a − last > tol`` (progress since the last move), as the paper's
    ``boolean_distill_expts.py``; the last selected checkpoint is kept once reached.
    """
    history = jnp.concatenate([sat.history[1:], jnp.asarray(accuracy, jnp.float32)[None]])
    seen = sat.seen + 1
    ready = seen >= history.shape[0]
    prev = jnp.mean(history[:-1])
    last = jnp.where(ready & (sat.last < 0), prev, sat.last)
    move = ready & (history[-1] - prev < tol) & (history[-1] - last > tol)
    later = selected & (jnp.arange(selected.shape[0]) > sat.index)
    nxt = jnp.where(jnp.any(later), jnp.argmax(later), sat.index).astype(jnp.int32)
    return Saturation(
        index=jnp.where(move, nxt, sat.index),
        history=history,
        seen=seen,
        last=jnp.where(move, history[-1], last),
    )


# ----------------------------------------------------------------------------- students


@flax.struct.dataclass
class StudentCurve:
    """Evaluation of a student during training.

    Attributes:
      steps: ``[E]`` student steps of the evaluations.
      accuracy: ``[E]`` accuracy on the evaluation inputs.
      loss: ``[E]`` mean training loss over the preceding ``every`` steps.
      teacher_index: ``[E]`` teacher checkpoint used at the evaluation (``saturate``: the one used
        in the steps before it).
    """

    steps: Int[Array | np.ndarray, "*batch E"]
    accuracy: Float[Array | np.ndarray, "*batch E"]
    loss: Float[Array | np.ndarray, "*batch E"]
    teacher_index: Int[Array | np.ndarray, "*batch E"]


def train_student(
    key: PRNGKeyArray,
    student: nn.Module,
    teacher: nn.Module,
    run: TeacherRun,
    selected: Bool[Array, " C"],
    alpha: Float[Array, ""] | float,
    task: SparseParity,
    spec: TrainSpec,
    eval_x: Float[Array, "m n"],
    *,
    multiplier: float = 1.0,
    kd: KDLoss = FORWARD_KL,
    saturate: bool = False,
) -> StudentCurve:
    """Distils ``student`` from the teacher run with the loss ``kd`` (:func:`distillation_loss`).

    With ``saturate`` the teacher is instead the current checkpoint of :class:`Saturation`: it
    starts at the first selected one and moves to the next selected one when the student's
    evaluation accuracy saturates (:func:`saturation_update`).

    At step ``u`` the teacher is checkpoint :func:`schedule_index` ``(u, run.steps, selected,
    multiplier)`` gathered from the stack; with ``α = 1`` its logits get zero weight (labels only).
    Every ``spec.every`` steps the accuracy on ``eval_x`` is recorded. Jit with the modules, task
    and spec static; vmap over ``key`` (seeds) and ``(selected, alpha)`` (methods).
    """
    run = jax.tree.map(jnp.asarray, run)
    init_key, data_key = jax.random.split(key)
    params = student.init(init_key, jnp.zeros((1, task.n), jnp.float32))
    opt = spec.make_optimizer()
    eval_y = sparse_parity.labels(task, eval_x)

    def teacher_at(u, sat):
        return sat.index if saturate else schedule_index(u, run.steps, selected, multiplier)

    def step(carry, u):
        params, opt_state, sat = carry
        x, y = sparse_parity.sample(jax.random.fold_in(data_key, u), task, spec.batch)
        index = teacher_at(u, sat)
        t_logits = teacher.apply(checkpoint_params(run, index), x)

        def loss_fn(p):
            return kd(student.apply(p, x), t_logits, y, alpha=alpha, step=u, steps=spec.steps)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, sat), loss

    def chunk(carry, c):
        carry, losses = jax.lax.scan(step, carry, c * spec.every + jnp.arange(spec.every))
        params, opt_state, sat = carry
        acc = jnp.mean(jnp.argmax(student.apply(params, eval_x), -1) == eval_y)
        tindex = teacher_at((c + 1) * spec.every, sat)
        sat = saturation_update(sat, acc, selected) if saturate else sat
        return (params, opt_state, sat), (acc, jnp.mean(losses), tindex)

    n_eval = spec.steps // spec.every
    start = (params, opt.init(params), saturation_init(selected))
    _, (acc, loss, tindex) = jax.lax.scan(chunk, start, jnp.arange(n_eval))
    steps = (jnp.arange(n_eval, dtype=jnp.int32) + 1) * spec.every
    return StudentCurve(steps=steps, accuracy=acc, loss=loss, teacher_index=tindex)


def samples_to_accuracy(
    curve: StudentCurve, batch: int, threshold: float | Float[Array, "..."] = 0.95
) -> Float[Array, "..."]:
    """Samples seen when the accuracy first reaches ``threshold`` (``inf`` if never; an array
    threshold broadcasts against the curves' leading axes, e.g. one per seed).

    Works on batched curves (leading seed/method axes).
    """
    reached = curve.accuracy >= threshold
    first = jnp.argmax(reached, axis=-1)
    steps = jnp.take_along_axis(curve.steps * jnp.ones_like(first)[..., None], first[..., None], -1)
    return jnp.where(jnp.any(reached, axis=-1), steps[..., 0] * batch, jnp.inf)


def probe_run(
    teacher: nn.Module, run: TeacherRun, task: SparseParity, x: Float[Array, "m n"]
) -> tuple[Float[Array, "C n"], Float[Array, " C"]]:
    """``E[f(x) x_i]`` per checkpoint (``f`` = class-1 probability) and each checkpoint's accuracy,
    mapped over the checkpoint axis with ``lax.map`` (memory of one checkpoint's activations on
    ``x`` at a time, not ``C`` of them)."""
    y = sparse_parity.labels(task, x)

    def one(params):
        probs = jax.nn.softmax(teacher.apply(params, x), axis=-1)
        return (
            sparse_parity.degree1_correlations(probs[:, 1], x),
            jnp.mean(jnp.argmax(probs, -1) == y),
        )

    return jax.lax.map(one, run.params)


# ----------------------------------------------------------------------------- persistence


def save_teacher_run(run: TeacherRun, directory: str | Path, config: Any) -> list[int]:
    """Writes every checkpoint of ``run`` (step ``steps[c]`` holds ``{params, loss-so-far}``) with
    :class:`jaxlab.core.checkpoint.Checkpointer`, keeping all of them. Returns the steps."""
    from jaxlab.core.checkpoint import Checkpointer

    ckpt = Checkpointer(directory, config, keep=None, async_save=False)
    steps = [int(s) for s in np.asarray(run.steps)]
    try:
        for c, s in enumerate(steps):
            tree = {"params": checkpoint_params(run, c), "losses": run.losses[:s]}
            ckpt.save(s, tree, force=True)
    finally:
        ckpt.close()
    return steps


def load_teacher_run(directory: str | Path, config: Any, abstract_params: Any) -> TeacherRun:
    """Reads every checkpoint written by :func:`save_teacher_run` back into a stacked run.

    Raises:
      ConfigError: fewer than one checkpoint in ``directory``.
    """
    from jaxlab.core.checkpoint import Checkpointer

    ckpt = Checkpointer(directory, config, keep=None, async_save=False)
    try:
        steps = ckpt.all_steps()
        if not steps:
            raise ConfigError("checkpoint_steps", [], f"at least one checkpoint in {directory}")
        restored = []
        for s in steps:
            abstract = {
                "params": abstract_params,
                "losses": jax.ShapeDtypeStruct((s,), jnp.float32),
            }
            state, _ = ckpt.restore(abstract, step=s)
            restored.append(state)
    finally:
        ckpt.close()
    params = jax.tree.map(lambda *xs: jnp.stack(xs), *[r["params"] for r in restored])
    return TeacherRun(
        params=params,
        steps=jnp.asarray(steps, jnp.int32),
        losses=jnp.asarray(restored[-1]["losses"]),
    )

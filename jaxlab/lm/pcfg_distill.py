"""Progressive distillation on a PCFG: a masked-LM teacher with every checkpoint kept, its students
and the paper's n-gram / constituent probes (Panigrahi et al., ICLR 2025, arXiv 2410.05464, §5).

The paper trains BERT-style masked LMs on sentences of a layered ``cfg3`` grammar (mask rate 0.3,
80 % ``[MASK]`` / 10 % random / 10 % kept; AdamW with β2 = 0.95, 6 % warm-up then cosine) and
distils a smaller one from the teacher's checkpoints with the loss of
:func:`jaxlab.lm.distill.distillation_loss` on the masked positions. The implicit curriculum shows
in the **n-gram probe** ``M_robust``: mask position ``p``, also hide the ``2w`` tokens around it
(replace them by ``[MASK]`` and drop them from attention) and measure the L1 distance between the
two predicted distributions at ``p``; it rises while the teacher learns local (n-gram) statistics,
peaks at the end of the fast loss drop and falls once the teacher uses the long-range structure.
``M_close`` hides everything *outside* the window instead. The **constituent probe** is a linear
(softmax-regression) probe on the hidden states predicting which non-terminal ends at each
position (the paper's boundary / non-terminal prediction).

The autoregressive variant (``MLMTask.objective="next_token"``, the paper's GPT-2 runs on the
same grammar) trains a causal transformer to predict each token from its prefix; the losses,
students and probes are the same functions, the n-gram probe reading the prediction of token ``p``
at position ``p - 1`` (only the window's left part is visible to it).

The 2-shot checkpoint is the intermediate checkpoint where ``M_robust`` for 3-grams peaks (the
paper's ``C1``). Everything is one jit-able program per stage: the teacher's training is a
``lax.scan`` stacking a snapshot every ``every`` steps (a :class:`distill.TeacherRun`), the students
of all methods and seeds are a ``vmap`` of :func:`train_student`, and the probes ``vmap`` over the
checkpoint axis. The corpus is generated on the host once (:mod:`jaxlab.lm.pcfg`) and sampled
inside the program by index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.lm import distill, pcfg
from jaxlab.nn.norms import RMSNorm
from jaxlab.nn.transformer import TransformerBlock

# ----------------------------------------------------------------------------- task and data


#: training objectives on PCFG sentences: BERT's masked LM, or next-token prediction.
OBJECTIVES = ("masked", "next_token")


@dataclasses.dataclass(frozen=True)
class MLMTask:
    """Static shape of the language-modelling task on PCFG sentences.

    Attributes:
      n_terminals: terminal vocabulary (token ids ``0 … n_terminals-1``); ``pad_id`` and
        ``mask_id`` follow.
      max_len: padded sentence length.
      mask_rate: fraction of real tokens to predict (paper: 0.3; masked objective only).
      objective: ``"masked"`` (bidirectional masked LM) or ``"next_token"`` (causal LM predicting
        every token after the first from its prefix).
    """

    n_terminals: int = 3
    max_len: int = 72
    mask_rate: float = 0.3
    objective: str = "masked"

    @property
    def causal(self) -> bool:
        """Whether the task's model attends causally (the next-token objective)."""
        return self.objective == "next_token"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError("objective", self.objective, f"one of {OBJECTIVES}")
        if self.n_terminals < 2:
            raise ConfigError("n_terminals", self.n_terminals, "an int >= 2")
        if self.max_len < 2:
            raise ConfigError("max_len", self.max_len, "an int >= 2")
        if not 0.0 < self.mask_rate < 1.0:
            raise ConfigError("mask_rate", self.mask_rate, "a fraction in (0, 1)")

    @property
    def pad_id(self) -> int:
        return self.n_terminals

    @property
    def mask_id(self) -> int:
        return self.n_terminals + 1

    @property
    def vocab(self) -> int:
        return self.n_terminals + 2


@flax.struct.dataclass
class Corpus:
    """Padded sentences: ``tokens [N, L]`` (pad = ``task.pad_id``) and ``lengths [N]``."""

    tokens: Int[Array, "N L"]
    lengths: Int[Array, " N"]


@flax.struct.dataclass
class MaskedBatch:
    """Masked-LM batch: inputs, original tokens, the positions to predict (float weights) and the
    attention mask (True for attended tokens)."""

    inputs: Int[Array, "b L"]
    targets: Int[Array, "b L"]
    weights: Float[Array, "b L"]
    attend: Bool[Array, "b L"]


def make_corpus(
    rng: np.random.Generator, grammar: pcfg.PCFG, count: int, task: MLMTask
) -> tuple[Corpus, list[pcfg.Sentence]]:
    """``count`` sentences of ``grammar`` as a :class:`Corpus` (and the sentences, for probes).

    Raises:
      ConfigError: the grammar's terminals do not match ``task.n_terminals``, or a sentence is
        longer than ``task.max_len``.
    """
    if len(grammar.terminals) != task.n_terminals:
        raise ConfigError("n_terminals", task.n_terminals, f"{len(grammar.terminals)} (grammar)")
    sentences = pcfg.sample(rng, grammar, count)
    tokens, lengths = pcfg.to_arrays(sentences, task.max_len, task.pad_id)
    return Corpus(jnp.asarray(tokens), jnp.asarray(lengths)), sentences


def real_positions(lengths: Int[Array, " b"], max_len: int) -> Bool[Array, "b L"]:
    return jnp.arange(max_len)[None, :] < lengths[:, None]


def mask_tokens(
    key: PRNGKeyArray, tokens: Int[Array, "b L"], lengths: Int[Array, " b"], task: MLMTask
) -> MaskedBatch:
    """BERT masking (the paper's ``80_10_10``): each real token is chosen with probability
    ``mask_rate``; a chosen token becomes ``[MASK]`` (80 %), a uniform random terminal (10 %) or
    stays (10 %). Every real token is attended."""
    k_pick, k_kind, k_rand = jax.random.split(key, 3)
    real = real_positions(lengths, tokens.shape[-1])
    chosen = real & (jax.random.uniform(k_pick, tokens.shape) < task.mask_rate)
    kind = jax.random.uniform(k_kind, tokens.shape)
    random_tok = jax.random.randint(k_rand, tokens.shape, 0, task.n_terminals)
    inputs = jnp.where(chosen & (kind < 0.8), task.mask_id, tokens)
    inputs = jnp.where(chosen & (kind >= 0.8) & (kind < 0.9), random_tok, inputs)
    targets = jnp.where(real, tokens, 0)  # padding gets a valid class (its weight is 0)
    return MaskedBatch(inputs, targets, chosen.astype(jnp.float32), real)


def next_token_batch(tokens: Int[Array, "b L"], lengths: Int[Array, " b"]) -> MaskedBatch:
    """Next-token prediction: the input is the sentence itself, position ``p`` predicts token
    ``p + 1`` (weight 1 while ``p + 1 < length``); every real token is attended (causally)."""
    real = real_positions(lengths, tokens.shape[-1])
    has_next = jnp.roll(real, -1, axis=1).at[:, -1].set(False)
    targets = jnp.where(has_next, jnp.roll(tokens, -1, axis=1), 0)
    return MaskedBatch(tokens, targets, has_next.astype(jnp.float32), real)


def make_batch(
    key: PRNGKeyArray, tokens: Int[Array, "b L"], lengths: Int[Array, " b"], task: MLMTask
) -> MaskedBatch:
    """The task's training batch of these sentences: :func:`mask_tokens` or, for
    ``objective="next_token"``, :func:`next_token_batch` (``key`` unused)."""
    if task.objective == "next_token":
        return next_token_batch(tokens, lengths)
    return mask_tokens(key, tokens, lengths, task)


def sample_batch(key: PRNGKeyArray, corpus: Corpus, batch: int, task: MLMTask) -> MaskedBatch:
    """``batch`` sentences drawn uniformly (with replacement) from ``corpus``, made into the task's
    batch (:func:`make_batch`)."""
    k_idx, k_mask = jax.random.split(key)
    idx = jax.random.randint(k_idx, (batch,), 0, corpus.tokens.shape[0])
    return make_batch(k_mask, corpus.tokens[idx], corpus.lengths[idx], task)


# ----------------------------------------------------------------------------- model


class MaskedLM(nn.Module):
    """Bidirectional pre-norm transformer masked LM (BERT's role in the paper, small): token
    embedding, ``n_layers`` non-causal :class:`jaxlab.nn.transformer.TransformerBlock` (RoPE
    positions), a final RMSNorm and a head onto the terminals. With ``causal`` the same network
    attends causally (GPT-2's role: the next-token objective).

    Attributes:
      vocab: input ids (terminals, pad, mask); n_out: predicted classes (terminals).
      d_model, n_heads, head_dim, d_ff, n_layers: shape.
      causal: causal self-attention.
    """

    vocab: int
    n_out: int
    d_model: int = 64
    n_heads: int = 8
    head_dim: int = 8
    d_ff: int = 128
    n_layers: int = 2
    causal: bool = False

    @nn.compact
    def __call__(
        self, tokens: Int[Array, "b L"], attend: Bool[Array, "b L"], *, hidden: bool = False
    ) -> Float[Array, "b L out"] | tuple[Float[Array, "b L out"], Float[Array, "b L d"]]:
        """Logits ``[b, L, n_out]`` (and the final normalised hidden states when ``hidden``);
        keys with ``attend = False`` are not attended."""
        h = nn.Embed(self.vocab, self.d_model, embedding_init=nn.initializers.normal(0.02))(tokens)
        for i in range(self.n_layers):
            h, _ = TransformerBlock(
                n_heads=self.n_heads,
                head_dim=self.head_dim,
                d_ff=self.d_ff,
                causal=self.causal,
                name=f"block_{i}",
            )(h, padding_mask=attend)
        h = RMSNorm(name="final_norm")(h)
        logits = nn.Dense(self.n_out, use_bias=False, name="head")(h)
        return (logits, h) if hidden else logits


def mlm_metrics(
    model: nn.Module, params, batch: MaskedBatch
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Mean cross-entropy and top-1 accuracy over the masked positions."""
    logits = model.apply(params, batch.inputs, batch.attend)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch.targets)
    acc = (jnp.argmax(logits, -1) == batch.targets).astype(jnp.float32)
    total = jnp.maximum(batch.weights.sum(), 1.0)
    return (ce * batch.weights).sum() / total, (acc * batch.weights).sum() / total


# ----------------------------------------------------------------------------- teacher / students


def train_teacher(
    key: PRNGKeyArray, model: nn.Module, corpus: Corpus, task: MLMTask, spec: distill.TrainSpec
) -> distill.TeacherRun:
    """Trains the masked LM on corpus batches with cross-entropy on the masked positions, keeping a
    snapshot every ``spec.every`` steps (``lax.scan`` of ``lax.scan``). Jit with ``model``,
    ``task``, ``spec`` static."""
    init_key, data_key = jax.random.split(key)
    dummy = jnp.zeros((1, task.max_len), jnp.int32)
    params = model.init(init_key, dummy, jnp.ones((1, task.max_len), bool))
    opt = spec.make_optimizer()

    def step(carry, t):
        params, opt_state = carry
        batch = sample_batch(jax.random.fold_in(data_key, t), corpus, spec.batch, task)
        loss, grads = jax.value_and_grad(lambda p: mlm_metrics(model, p, batch)[0])(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def chunk(carry, c):
        carry, losses = jax.lax.scan(step, carry, c * spec.every + jnp.arange(spec.every))
        return carry, (carry[0], losses)

    n_ckpt = spec.steps // spec.every
    _, (snapshots, losses) = jax.lax.scan(chunk, (params, opt.init(params)), jnp.arange(n_ckpt))
    steps = (jnp.arange(n_ckpt, dtype=jnp.int32) + 1) * spec.every
    return distill.TeacherRun(params=snapshots, steps=steps, losses=losses.reshape(-1))


def checkpoint_metrics(
    model: nn.Module, run: distill.TeacherRun, batch: MaskedBatch
) -> tuple[Float[Array, " C"], Float[Array, " C"]]:
    """Masked-LM loss and accuracy of every checkpoint on ``batch`` (vmapped over checkpoints)."""
    return jax.vmap(lambda p: mlm_metrics(model, p, batch))(run.params)


def train_student(
    key: PRNGKeyArray,
    student: nn.Module,
    teacher: nn.Module,
    run: distill.TeacherRun,
    selected: Bool[Array, " C"],
    alpha: Float[Array, ""] | float,
    corpus: Corpus,
    task: MLMTask,
    spec: distill.TrainSpec,
    eval_batch: MaskedBatch,
    *,
    multiplier: float = 1.0,
    kd: distill.KDLoss = distill.FORWARD_KL,
    saturate: bool = False,
) -> distill.StudentCurve:
    """Distils the student masked LM from the teacher run: at step ``u`` the teacher is checkpoint
    :func:`distill.schedule_index` ``(u, run.steps, selected, multiplier)`` and the loss is
    ``kd`` (:func:`distill.distillation_loss`) over the masked positions (``α = 1``: labels only). Records
    the masked-token accuracy on ``eval_batch`` every ``spec.every`` steps. ``saturate``: the teacher
    schedule of :func:`distill.saturation_update` instead. Vmap over ``key``
    (seeds) and ``(selected, alpha)`` (methods)."""
    run = jax.tree.map(jnp.asarray, run)
    init_key, data_key = jax.random.split(key)
    dummy = jnp.zeros((1, task.max_len), jnp.int32)
    params = student.init(init_key, dummy, jnp.ones((1, task.max_len), bool))
    opt = spec.make_optimizer()
    n_out = task.n_terminals

    def teacher_at(u, sat):
        return sat.index if saturate else distill.schedule_index(u, run.steps, selected, multiplier)

    def step(carry, u):
        params, opt_state, sat = carry
        batch = sample_batch(jax.random.fold_in(data_key, u), corpus, spec.batch, task)
        index = teacher_at(u, sat)
        t_logits = teacher.apply(distill.checkpoint_params(run, index), batch.inputs, batch.attend)

        def loss_fn(p):
            s_logits = student.apply(p, batch.inputs, batch.attend)
            return kd(
                s_logits.reshape(-1, n_out),
                t_logits.reshape(-1, n_out),
                batch.targets.reshape(-1),
                alpha=alpha,
                step=u,
                steps=spec.steps,
                weights=batch.weights.reshape(-1),
            )

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, sat), loss

    def chunk(carry, c):
        carry, losses = jax.lax.scan(step, carry, c * spec.every + jnp.arange(spec.every))
        params, opt_state, sat = carry
        _, acc = mlm_metrics(student, params, eval_batch)
        tindex = teacher_at((c + 1) * spec.every, sat)
        sat = distill.saturation_update(sat, acc, selected) if saturate else sat
        return (params, opt_state, sat), (acc, jnp.mean(losses), tindex)

    n_eval = spec.steps // spec.every
    start = (params, opt.init(params), distill.saturation_init(selected))
    _, (acc, loss, tindex) = jax.lax.scan(chunk, start, jnp.arange(n_eval))
    steps = (jnp.arange(n_eval, dtype=jnp.int32) + 1) * spec.every
    return distill.StudentCurve(steps=steps, accuracy=acc, loss=loss, teacher_index=tindex)


# ----------------------------------------------------------------------------- probes

ProbsFn = Callable[[Int[Array, "b L"], Bool[Array, "b L"]], Float[Array, "b L V"]]


def ngram_probe(
    probs_fn: ProbsFn,
    tokens: Int[Array, "b L"],
    lengths: Int[Array, " b"],
    positions: Sequence[int],
    half_width: int,
    mask_id: int,
    *,
    mode: str = "robust",
    read_offset: int = 0,
) -> Float[Array, ""]:
    """The paper's n-gram probe (``PCFG_mlm/data_generation/ngram_gen.py``,
    ``probing/ngram_prediction.py``): median over (sentence, position ``p`` in ``positions`` with
    ``p < length``) of ``‖P(·|x with p masked) − P(·|x perturbed)‖₁`` at ``p``, where the
    perturbation replaces by ``[MASK]`` and removes from attention the window
    ``[p − w, p + w]`` (``mode="robust"``: M_robust) or every real token outside it
    (``mode="close"``: M_close). The masked position itself is also dropped from attention in both
    inputs, as in the paper's probe. Returns NaN when no pair is valid.

    Args:
      probs_fn: ``(inputs, attend) -> probabilities [b, L, V]``.
      half_width: ``w`` (``w = 1``: 3-grams, ``w = 2``: 5-grams).
      read_offset: where token ``p``'s prediction is read, ``p + read_offset``: ``0`` for a
        masked LM, ``-1`` for a next-token model (positions must then be >= 1).
    """
    if mode not in ("robust", "close"):
        raise ConfigError("mode", mode, "'robust' or 'close'")
    if half_width < 0:
        raise ConfigError("half_width", half_width, "an int >= 0")
    b, length = tokens.shape
    pos = jnp.asarray(positions, jnp.int32)  # [P]
    idx = jnp.arange(length)
    real = real_positions(lengths, length)  # [b, L]
    at_p = idx[None, :] == pos[:, None]  # [P, L]
    window = jnp.abs(idx[None, :] - pos[:, None]) <= half_width  # [P, L]
    hide_base = at_p[:, None, :] & real[None]  # [P, b, L]
    hide_pert = (window if mode == "robust" else ~window)[:, None, :] & real[None]
    hide_pert = hide_pert | hide_base

    def run(hide):
        inputs = jnp.where(hide, mask_id, tokens[None])
        attend = real[None] & ~hide
        probs = probs_fn(inputs.reshape(-1, length), attend.reshape(-1, length))
        probs = probs.reshape(len(positions), b, length, -1)
        at = pos[:, None, None, None] + read_offset
        return jnp.take_along_axis(probs, at, axis=2)[:, :, 0]  # [P, b, V]

    dist = jnp.sum(jnp.abs(run(hide_base) - run(hide_pert)), axis=-1)  # [P, b]
    valid = pos[:, None] < lengths[None, :]
    return jnp.nanmedian(jnp.where(valid, dist, jnp.nan))


def linear_probe_accuracy(
    key: PRNGKeyArray,
    features: Float[Array, "m d"],
    labels: Int[Array, " m"],
    weights: Float[Array, " m"],
    n_classes: int,
    *,
    steps: int = 300,
    lr: float = 0.05,
    train_fraction: float = 0.5,
) -> Float[Array, ""]:
    """Held-out accuracy of a softmax-regression probe ``labels ≈ argmax(W f + b)`` trained with
    Adam (full batch, ``steps`` steps) on a random ``train_fraction`` of the rows with
    ``weights > 0`` and evaluated on the rest (the constituent probe; jit/vmap-able)."""
    m, d = features.shape
    mu = jnp.sum(features * weights[:, None], 0) / jnp.maximum(weights.sum(), 1.0)
    sd = jnp.sqrt(
        jnp.sum(((features - mu[None]) ** 2) * weights[:, None], 0)
        / jnp.maximum(weights.sum(), 1.0)
    )
    f = (features - mu[None]) / (sd[None] + 1e-6)
    train = (jax.random.uniform(key, (m,)) < train_fraction).astype(jnp.float32) * weights
    test = weights * (1.0 - train / jnp.maximum(weights, 1e-9))
    params = (jnp.zeros((d, n_classes)), jnp.zeros((n_classes,)))
    opt = optax.adam(lr)

    def loss_fn(p):
        ce = optax.softmax_cross_entropy_with_integer_labels(f @ p[0] + p[1][None], labels)
        return jnp.sum(ce * train) / jnp.maximum(train.sum(), 1.0)

    def step(carry, _):
        p, s = carry
        g = jax.grad(loss_fn)(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

    (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
    correct = (jnp.argmax(f @ p[0] + p[1][None], -1) == labels).astype(jnp.float32)
    return jnp.sum(correct * test) / jnp.maximum(test.sum(), 1.0)


@flax.struct.dataclass
class ProbeSet:
    """Inputs of the probes: unmasked sentences and the constituent labels (1 + index of the
    non-terminal of the probed level ending at each position, 0: none)."""

    tokens: Int[Array, "b L"]
    lengths: Int[Array, " b"]
    boundary: Int[Array, "b L"]


def make_probe_set(
    sentences: Sequence[pcfg.Sentence], task: MLMTask, level_symbols: Sequence[str]
) -> ProbeSet:
    tokens, lengths = pcfg.to_arrays(sentences, task.max_len, task.pad_id)
    bounds = pcfg.boundary_labels(sentences, task.max_len, level_symbols)
    return ProbeSet(jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(bounds))


def probe_run(
    key: PRNGKeyArray,
    model: MaskedLM,
    run: distill.TeacherRun,
    probes: ProbeSet,
    task: MLMTask,
    positions: tuple[int, ...],
    n_constituents: int,
) -> dict[str, Float[Array, " C"]]:
    """Per checkpoint (``lax.map`` over the checkpoint axis, bounded memory): ``M_robust`` and ``M_close`` for 3-grams (``w=1``) and 5-grams
    (``w=2``), and the constituent probe's held-out accuracy on the final hidden states. Jit with
    ``model``, ``task``, ``positions``, ``n_constituents`` static."""
    real = real_positions(probes.lengths, task.max_len)

    def one(params):
        def probs_fn(inputs, attend):
            return jax.nn.softmax(model.apply(params, inputs, attend), -1)

        offset = -1 if task.causal else 0
        out = {
            f"m_{mode}_{2 * w + 1}gram": ngram_probe(
                probs_fn,
                probes.tokens,
                probes.lengths,
                positions,
                w,
                task.mask_id,
                mode=mode,
                read_offset=offset,
            )  # fmt: skip
            for mode in ("robust", "close")
            for w in (1, 2)
        }
        _, h = model.apply(params, probes.tokens, real, hidden=True)
        out["constituent_probe"] = linear_probe_accuracy(
            key,
            h.reshape(-1, h.shape[-1]),
            probes.boundary.reshape(-1),
            real.reshape(-1).astype(jnp.float32),
            n_constituents + 1,
        )
        return out

    return jax.lax.map(one, run.params)


def curriculum_checkpoint(m_robust: Sequence[float] | np.ndarray | Array) -> int:
    """The 2-shot checkpoint: where the 3-gram ``M_robust`` peaks among the intermediate checkpoints
    (the paper's ``C1``).

    Raises:
      ConfigError: fewer than 2 checkpoints.
    """
    m = np.asarray(m_robust, np.float64)
    if m.size < 2:
        raise ConfigError("checkpoint_steps", int(m.size), "a run with >= 2 checkpoints")
    return int(np.nanargmax(m[:-1]))

"""The language-model executor: the operators as batched, constrained calls to an injected LM.

The model is a :class:`jaxlab.decoding.interface.CausalLM` with its parameters and token strings
(this module never imports a model family). Every operator builds one text prompt per problem
(and per sample for ``sc_ensemble``), puts BOS before it, left-pads the batch to a bucketed width (so a handful of
shapes are compiled), and decodes all prompts in one jit-compiled, vmapped call of SMC from
:mod:`jaxlab.decoding.smc` whose condition potential makes every output parse:

* answers (``generate``, ``revise``, ``format``): the regex ``-?(0|[1-9][0-9]{0,3})``;
* ``programmer``: the expression grammar of :mod:`jaxlab.decoding.arithmetic`
  (:func:`~jaxlab.decoding.arithmetic.grammar_condition`), evaluated by
  :func:`~jaxlab.workflows.programmer.safe_eval`;
* ``review``: the regex ``yes|no``.

Each prompt's output is its highest-weight particle (for the default locally constrained
proposal with weights, ``grammar_smc``-style SMC; ``proposal="constrained_unweighted"`` is plain
locally constrained decoding). Prompt formats (the model is expected to be trained on them,
:func:`training_text`)::

    {template}Q: {question}\\nA: {answer}\\n          generate
    {template}Q: {question}\\nE: {expression}\\n      programmer
    {template}Q: {question}\\nA: {answer}? {yes|no}\\n review
    {template}Q: {question}\\nA: {old}? no\\nA: {new}\\n  revise
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PRNGKeyArray

from jaxlab.decoding import arithmetic
from jaxlab.decoding import smc as smc_lib
from jaxlab.decoding.interface import CausalLM, Params, with_eos_last
from jaxlab.decoding.length_bound import bound_length
from jaxlab.decoding.potentials import regex_potential
from jaxlab.workflows.interpreter import Answers
from jaxlab.workflows.program import PROMPTS
from jaxlab.workflows.programmer import ProgrammerError, safe_eval
from jaxlab.workflows.tasks import Problems

ANSWER_PATTERN = r"-?(0|[1-9][0-9]{0,3})"
REVIEW_PATTERN = r"yes|no"


def prompt_text(kind: str, template: str, question: str, answer: int | None = None) -> str:
    """The prompt of one operator call (module docstring)."""
    head = f"{PROMPTS[template]}Q: {question}\n"
    if kind in ("generate", "format"):
        return head + "A: "
    if kind == "programmer":
        return head + "E: "
    if kind == "review":
        return head + f"A: {answer}? "
    if kind == "revise":
        return head + f"A: {answer}? no\nA: "
    raise ValueError(f"kind={kind!r}: expected generate, format, programmer, review or revise")


def training_text(rng: np.random.Generator, question: str, expression: str, answer: int) -> str:
    """One training document in one of the executor's formats, drawn uniformly: a random
    template with the direct answer, the expression, or a review (and, when the shown answer is
    wrong, its revision) of a possibly perturbed answer."""
    template = list(PROMPTS)[rng.integers(len(PROMPTS))]
    kind = ("generate", "programmer", "review")[rng.integers(3)]
    if kind == "generate":
        return prompt_text("generate", template, question) + f"{answer}\n"
    if kind == "programmer":
        return prompt_text("programmer", template, question) + f"{expression}\n"
    shown = answer if rng.random() < 0.5 else answer + int(rng.choice([-10, -2, -1, 1, 2, 10]))
    tail = "yes\n" if shown == answer else f"no\nA: {answer}\n"
    return prompt_text("review", template, question, shown) + tail


@dataclasses.dataclass(frozen=True)
class TextLM:
    """An injected model with what the executor needs to write and read text.

    Attributes:
        lm: the model.
        params: its parameters.
        token_strings: the string of each token id (single characters for byte models).
        bos_id: id put right before every prompt.
        pad_id: id that fills the left of shorter prompts in a batch (e.g. the model's end of
            document token, so padding reads like earlier documents of a packed window);
            ``None``: ``bos_id``.
        terminator: the character that ends an output (a token of ``token_strings``).
    """

    lm: CausalLM
    params: Params
    token_strings: tuple[str, ...]
    bos_id: int
    pad_id: int | None = None
    terminator: str = "\n"

    def __post_init__(self) -> None:
        if len(self.token_strings) != self.lm.vocab_size:
            raise ValueError(
                f"TextLM.token_strings has {len(self.token_strings)} entries: expected "
                f"lm.vocab_size={self.lm.vocab_size}"
            )
        if self.terminator not in self.token_strings:
            raise ValueError(f"TextLM.terminator={self.terminator!r}: not a token string")


@functools.partial(
    jax.jit, static_argnames=("lm", "num_particles", "max_tokens", "proposal", "terminator_id")
)
def decode_batch(
    key: PRNGKeyArray,
    lm: CausalLM,
    params: Params,
    prompts: Int[Array, "batch width"],
    condition,
    *,
    num_particles: int,
    max_tokens: int,
    proposal: str,
    terminator_id: int,
) -> tuple[Int[Array, "batch max_tokens"], Int[Array, " batch"], Array]:
    """Constrained SMC for every prompt (vmapped): the best particle's tokens (LM ids), its
    length and whether it has positive weight."""
    renumbered = with_eos_last(lm, terminator_id)
    v = lm.vocab_size
    inverse = jnp.asarray([i for i in range(v) if i != terminator_id], jnp.int32)
    prompts = jnp.where(prompts == terminator_id, v - 1, prompts - (prompts > terminator_id))
    config = smc_lib.SMCConfig(
        num_particles=num_particles, max_tokens=max_tokens, proposal=proposal
    )

    def one(k, prompt):
        res = smc_lib.smc(k, renumbered, params, prompt, config=config, condition=condition)
        best = jnp.argmax(res.log_weights)
        return res.tokens[best], res.lengths[best], res.log_weights[best] > -jnp.inf

    tokens, lengths, ok = jax.vmap(one)(jax.random.split(key, prompts.shape[0]), prompts)
    return inverse[tokens], lengths, ok


def _bucket(n: int, base: int) -> int:
    return max(base, int(base * 2 ** np.ceil(np.log2(max(n, 1) / base))))


class LMExecutor:
    """The operators of :class:`~jaxlab.workflows.interpreter.Executor` on a :class:`TextLM`.

    Args:
        model: the injected model.
        num_particles: SMC particles per prompt.
        proposal: SMC proposal (``constrained``: weighted, ``constrained_unweighted``: LCD).
        max_answer_tokens / max_expression_tokens: output length limits.
        width_bucket: prompt widths are rounded up to a multiple of this (fewer compilations).

    Attributes:
        stats: model calls, prompts, generated tokens (of the returned outputs), particle
            decoding steps (padded batch x particles x steps: the work done) and seconds in
            model calls so far.
    """

    def __init__(
        self,
        model: TextLM,
        *,
        num_particles: int = 4,
        proposal: str = "constrained",
        max_answer_tokens: int = 6,
        max_expression_tokens: int = 12,
        width_bucket: int = 32,
    ):
        self.model = model
        self.num_particles = num_particles
        self.proposal = proposal
        self.width_bucket = width_bucket
        strings = model.token_strings
        self.term_id = strings.index(model.terminator)
        self.char_id = {s: i for i, s in enumerate(strings) if len(s) == 1}
        cond_strings = tuple(s for i, s in enumerate(strings) if i != self.term_id)
        self.max_tokens = {"answer": max_answer_tokens, "review": 3, "expr": max_expression_tokens}
        self.conditions = {
            "answer": bound_length(
                regex_potential(ANSWER_PATTERN, cond_strings), max_answer_tokens
            ),
            "review": bound_length(regex_potential(REVIEW_PATTERN, cond_strings), 3),
            "expr": arithmetic.grammar_condition(
                arithmetic.ExpressionTask(
                    token_strings=strings,
                    terminator_id=self.term_id,
                    max_tokens=max_expression_tokens,
                    max_depth=1,
                    max_digits=2,
                )
            ),
        }
        self.stats = {
            "calls": 0,
            "prompts": 0,
            "tokens": 0,
            "particle_steps": 0,
            "model_seconds": 0.0,
        }

    def encode(self, text: str) -> list[int]:
        try:
            return [self.char_id[c] for c in text]
        except KeyError as e:
            raise ValueError(
                f"character {e.args[0]!r} of prompt {text[:40]!r} has no token"
            ) from None

    def generate_texts(
        self, key: PRNGKeyArray, kind: str, texts: Sequence[str]
    ) -> list[str | None]:
        """Decodes every prompt in one batched call; ``None`` where no particle survived."""
        import time

        ids = [self.encode(t) for t in texts]
        width = _bucket(max(len(i) for i in ids) + 1, self.width_bucket)
        batch = _bucket(len(ids), 8)
        pad = self.model.bos_id if self.model.pad_id is None else self.model.pad_id
        arr = np.full((batch, width), pad, np.int32)
        for r, row in enumerate(ids):
            arr[r, width - len(row) - 1] = self.model.bos_id
            arr[r, width - len(row) :] = row
        start = time.perf_counter()
        tokens, lengths, ok = decode_batch(
            key,
            self.model.lm,
            self.model.params,
            jnp.asarray(arr),
            self.conditions[kind],
            num_particles=self.num_particles,
            max_tokens=self.max_tokens[kind],
            proposal=self.proposal,
            terminator_id=self.term_id,
        )
        tokens, lengths, ok = jax.device_get((tokens, lengths, ok))
        self.stats["model_seconds"] += time.perf_counter() - start
        self.stats["calls"] += 1
        self.stats["prompts"] += len(ids)
        self.stats["tokens"] += int(np.sum(lengths[: len(ids)]))
        self.stats["particle_steps"] += batch * self.num_particles * (self.max_tokens[kind] + 1)
        strings = self.model.token_strings
        return [
            "".join(strings[t] for t in tokens[r, : lengths[r]]) if ok[r] else None
            for r in range(len(ids))
        ]

    @staticmethod
    def _answers(values: Sequence[int | None], shape: tuple[int, ...]) -> Answers:
        valid = np.asarray([v is not None for v in values]).reshape(shape)
        value = np.asarray([0 if v is None else v for v in values], np.int32).reshape(shape)
        return Answers(value=jnp.asarray(value), valid=jnp.asarray(valid))

    @staticmethod
    def _int(text: str | None) -> int | None:
        try:
            return None if text is None else int(text)
        except ValueError:
            return None

    @staticmethod
    def _program(text: str | None) -> int | None:
        try:
            return None if text is None else safe_eval(text)
        except ProgrammerError:
            return None

    def solve(self, key, solver, prompt, problems: Problems, n: int, instruction: str = ""):
        """``answer_generate`` and ``custom`` are ``generate`` calls; an instruction is put
        before the prompt."""
        kind = "generate" if solver in ("answer_generate", "custom") else solver
        head = f"{instruction}\n" if instruction else ""
        texts = [head + prompt_text(kind, prompt, q) for _ in range(n) for q in problems.questions]
        if solver == "programmer":
            out = [self._program(t) for t in self.generate_texts(key, "expr", texts)]
        elif kind == "generate":
            out = [self._int(t) for t in self.generate_texts(key, "answer", texts)]
        else:
            raise ValueError(f"solver={solver!r}: expected 'generate' or 'programmer'")
        return self._answers(out, (n, len(problems)))

    def review(self, key, prompt, problems: Problems, answers: Answers, instruction: str = ""):
        value, valid = np.asarray(answers.value), np.asarray(answers.valid)
        idx = np.flatnonzero(valid)
        verdict = np.zeros(len(problems), bool)
        if idx.size:
            head = f"{instruction}\n" if instruction else ""
            texts = [
                head + prompt_text("review", prompt, problems.questions[i], int(value[i]))
                for i in idx
            ]
            verdict[idx] = [t == "yes" for t in self.generate_texts(key, "review", texts)]
        return jnp.asarray(verdict)

    def revise(
        self, key, prompt, problems: Problems, answers: Answers, feedback, instruction: str = ""
    ) -> Answers:
        head = f"{instruction}\n" if instruction else ""
        value, valid = np.asarray(answers.value).copy(), np.asarray(answers.valid).copy()
        idx = np.flatnonzero(~np.asarray(feedback))
        if idx.size:
            texts = [
                head
                + (
                    prompt_text("revise", prompt, problems.questions[i], int(value[i]))
                    if valid[i]
                    else prompt_text("generate", prompt, problems.questions[i])
                )
                for i in idx
            ]
            for i, t in zip(idx, self.generate_texts(key, "answer", texts), strict=True):
                v = self._int(t)
                value[i], valid[i] = (0, False) if v is None else (v, True)
        return Answers(value=jnp.asarray(value), valid=jnp.asarray(valid))

    def format(self, key, problems: Problems, answers: Answers) -> Answers:
        """Answers are in format by construction; an invalid one is asked for again."""
        return self.revise(key, "plain", problems, answers, np.asarray(answers.valid))

    def test(self, key, problems: Problems, answers: Answers, max_loops: int) -> Answers:
        for k in jax.random.split(key, max_loops):
            k_check, k_revise = jax.random.split(k)
            check = jax.tree.map(
                lambda x: x[0], self.solve(k_check, "programmer", "plain", problems, 1)
            )
            agree = ~check.valid | (answers.valid & (answers.value == check.value))
            answers = self.revise(k_revise, "plain", problems, answers, agree)
        return answers

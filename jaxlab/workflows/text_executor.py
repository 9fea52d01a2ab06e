"""Operators as text generation on a benchmark task (:mod:`jaxlab.workflows.formats`).

A :class:`TextExecutor` runs every operator as one batched call of an injected generator
``(prompts, seed) -> (texts, usage)`` (``jaxlab.commands.workflows.batch_generator`` builds one
from a jaxlab run or a Hugging Face directory; tests script it). Answers stay in the
interpreter's integer form: each distinct extracted answer text gets an id in the executor's
table, so the plurality vote counts equal texts. Extraction follows the format: the last number
(GSM8K), the last ``\\boxed{}`` (MATH), the code (HumanEval, MBPP: a fenced block if there is
one), the first line (HotpotQA).

* ``programmer`` evaluates the first line of its reply with the whitelisting interpreter of
  :mod:`jaxlab.workflows.programmer` (never ``eval``).
* ``review`` asks for ``yes``/``no``; ``revise`` rewrites rejected answers with the old answer
  in the prompt; ``format`` asks rejected-format answers again for only the final answer.
* ``md_ensemble``'s ``choose`` is AFlow's MdEnsemble vote: ``choose_votes`` prompts per
  problem, each listing the candidates as letters in its own shuffled order, all in one batched
  call; the letter each reply names is mapped back to its candidate and the answer picked most
  often wins (ties: the earliest candidate). A reply naming no listed letter is counted in
  ``stats["unparsed_choices"]`` and casts no vote; with no vote at all the first candidate
  stays.
* ``test``, on code formats, runs each answer against the item's tests in the sandbox and
  revises failures with the sandbox's verdict, at most ``max_loops`` times. Without a sandbox
  it raises :class:`~jaxlab.workflows.sandbox.SandboxUnavailable`: code never runs
  in-process. On the other formats there are no unit tests and ``test`` keeps the answers.

:meth:`TextExecutor.problems` gives the interpreter's problem batch, whose ``answers`` are the
item indices; :meth:`TextExecutor.score` is the format's official per-item score, used by
:func:`~jaxlab.workflows.interpreter.evaluate` in place of exact match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.workflows.formats import TaskSet, last_boxed, last_number
from jaxlab.workflows.interpreter import Answers
from jaxlab.workflows.program import PROMPTS
from jaxlab.workflows.programmer import ProgrammerError, safe_eval
from jaxlab.workflows.sandbox import SandboxUnavailable
from jaxlab.workflows.tasks import Problems

BatchGenerator = Callable[[list[str], int], Any]
CODE_FORMATS = ("humaneval", "mbpp")
_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)
_LETTERS = "ABCDEFGHI"  # one per candidate, MAX_ENSEMBLE at most
_HEADS = {
    "generate": "Answer the question.",
    "answer_generate": "Think step by step, then give the final answer on the last line.",
    "custom": "",
    "programmer": "Write the computation as one arithmetic expression.",
}


def _seed(key) -> int:
    return int(jax.random.randint(key, (), 0, 2**31 - 1))


class TextExecutor:
    """The operators as text generation on ``task`` (module docstring).

    Attributes:
        choose_votes: shuffled orders voted over by ``md_ensemble``'s choice (AFlow's
            ``vote_count``).
        stats: generator calls, prompts, generated tokens, replies to a choice that named no
            candidate, so far.
    """

    def __init__(
        self, generate: BatchGenerator, task: TaskSet, sandbox: Any = None, *, choose_votes: int = 5
    ):
        if not isinstance(choose_votes, int) or isinstance(choose_votes, bool) or choose_votes < 1:
            raise ValueError(f"choose_votes={choose_votes!r}: expected an int >= 1")
        self.generate, self.task, self.sandbox = generate, task, sandbox
        self.choose_votes = choose_votes
        self.texts: list[str] = [""]  # id 0: no answer
        self.ids: dict[str, int] = {"": 0}
        self.stats = {"calls": 0, "prompts": 0, "tokens": 0, "unparsed_choices": 0}

    def problems(self, indices: Sequence[int] | np.ndarray | None = None) -> Problems:
        """The problem batch of the items ``indices`` (all by default); ``answers`` holds the
        item indices."""
        idx = np.arange(len(self.task)) if indices is None else np.asarray(indices)
        return Problems(
            tuple(self.task.questions[i] for i in idx),
            idx.astype(np.int32),
            ("",) * len(idx),
        )

    def _call(self, key, prompts: list[str]) -> list[str]:
        reply = self.generate(prompts, _seed(key))
        texts, usage = reply if isinstance(reply, tuple) else (reply, {})
        self.stats["calls"] += 1
        self.stats["prompts"] += len(prompts)
        self.stats["tokens"] += int(
            usage.get("generated_tokens", sum(len(t.encode()) for t in texts))
        )
        return [t if isinstance(t, str) else "" for t in texts]

    def extract(self, text: str) -> str:
        fmt = self.task.format
        if fmt == "gsm8k":
            n = last_number(text)
            return "" if n is None else (str(int(n)) if n == int(n) else str(n))
        if fmt == "math":
            boxed = last_boxed(text)
            return "" if boxed is None else f"\\boxed{{{boxed}}}"
        if fmt in CODE_FORMATS:
            m = _FENCE.search(text)
            return (m.group(1) if m else text).strip("\n")
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        return lines[0] if lines else ""

    def _intern(self, text: str) -> int:
        if text not in self.ids:
            self.ids[text] = len(self.texts)
            self.texts.append(text)
        return self.ids[text]

    def _answers(self, texts: Sequence[str], shape: tuple[int, ...]) -> Answers:
        ids = np.asarray([self._intern(self.extract(t)) for t in texts], np.int32).reshape(shape)
        return Answers(value=jnp.asarray(ids), valid=jnp.asarray(ids != 0))

    def text(self, value: Any) -> str:
        """The answer text of an id."""
        return self.texts[int(value)]

    def _prompt(self, head: str, prompt: str, question: str, instruction: str) -> str:
        parts = [instruction, PROMPTS[prompt].strip(), head, f"Question: {question}", "Answer:"]
        return "\n".join(p for p in parts if p)

    def solve(self, key, solver, prompt, problems: Problems, n: int, instruction: str = ""):
        head = _HEADS[solver]
        prompts = [
            self._prompt(head, prompt, q, instruction) for _ in range(n) for q in problems.questions
        ]
        texts = self._call(key, prompts)
        if solver == "programmer":
            texts = [self._program(t) for t in texts]
        return self._answers(texts, (n, len(problems)))

    @staticmethod
    def _program(text: str) -> str:
        """The programmer's reply: its first line as an arithmetic expression, evaluated by the
        whitelisting interpreter (:func:`~jaxlab.workflows.programmer.safe_eval`); the reply
        unchanged where it is not one."""
        line = text.strip().splitlines()[0] if text.strip() else ""
        try:
            return str(safe_eval(line))
        except ProgrammerError:
            return text

    def review(self, key, prompt, problems: Problems, answers: Answers, instruction: str = ""):
        value, valid = np.asarray(answers.value), np.asarray(answers.valid)
        idx = np.flatnonzero(valid)
        verdict = np.zeros(len(problems), bool)
        if idx.size:
            head = "Is the proposed answer correct? Reply yes or no."
            prompts = [
                self._prompt(head, prompt, problems.questions[i], instruction)
                + f" {self.text(value[i])}\nCorrect:"
                for i in idx
            ]
            verdict[idx] = [t.strip().lower().startswith("yes") for t in self._call(key, prompts)]
        return jnp.asarray(verdict)

    def revise(
        self, key, prompt, problems: Problems, answers: Answers, feedback, instruction: str = ""
    ) -> Answers:
        value = np.asarray(answers.value).copy()
        idx = np.flatnonzero(~np.asarray(feedback))
        if idx.size:
            head = "A previous answer was judged wrong. Write a better one."
            prompts = [
                self._prompt(head, prompt, problems.questions[i], instruction)
                + f"\nPrevious answer: {self.text(value[i])}\nNew answer:"
                for i in idx
            ]
            for i, t in zip(idx, self._call(key, prompts), strict=True):
                value[i] = self._intern(self.extract(t))
        return Answers(value=jnp.asarray(value), valid=jnp.asarray(value != 0))

    def format(self, key, problems: Problems, answers: Answers) -> Answers:
        head = "Give only the final answer, in the expected format."
        return self.revise(key, "plain", problems, answers, np.asarray(answers.valid), head)

    def choose(self, key, problems: Problems, candidates: Answers) -> Answers:
        """``[n, P]`` candidates -> ``[P]``: the majority of the model's picks over
        ``choose_votes`` shuffled orders (module docstring)."""
        value = np.asarray(candidates.value)  # [n, P]
        n, num = value.shape
        rng = np.random.default_rng(_seed(key))
        orders = np.argsort(rng.random((self.choose_votes, num, n)), axis=-1)  # [votes, P, n]
        prompts = [
            self._choice_prompt(problems.questions[j], [self.text(value[c, j]) for c in order])
            for per_vote in orders
            for j, order in enumerate(per_vote)
        ]
        picks = np.asarray([self._letter(t, n) for t in self._call(key, prompts)])
        picks = picks.reshape(self.choose_votes, num)
        self.stats["unparsed_choices"] += int(np.sum(picks < 0))
        chosen = value[0].copy()
        for j in range(num):
            voted = [value[orders[v, j, c], j] for v, c in enumerate(picks[:, j]) if c >= 0]
            if voted:
                ids, counts = np.unique(voted, return_counts=True)
                best = set(ids[counts == counts.max()].tolist())
                chosen[j] = next(x for x in value[:, j] if int(x) in best)
        return Answers(value=jnp.asarray(chosen), valid=jnp.asarray(chosen != 0))

    @staticmethod
    def _choice_prompt(question: str, texts: Sequence[str]) -> str:
        listed = "\n".join(f"{_LETTERS[c]}: {t}" for c, t in enumerate(texts))
        return f"Question: {question}\nCandidate answers:\n{listed}\nThe best is letter:"

    @staticmethod
    def _letter(text: str, n: int) -> int:
        """The listed position ``text`` names: its leading letter, else its last standalone
        letter among the ``n`` listed (``-1``: none)."""
        letters = _LETTERS[:n]
        lead = re.match(rf"\W*([{letters}])\b", text)
        found = [lead.group(1)] if lead else re.findall(rf"\b([{letters}])\b", text)[-1:]
        return _LETTERS.index(found[0]) if found else -1

    def test(self, key, problems: Problems, answers: Answers, max_loops: int) -> Answers:
        if self.task.format not in CODE_FORMATS:
            return answers
        if self.sandbox is None:
            raise SandboxUnavailable(
                "the Test operator is refused: no sandbox was given for a code task; code is "
                "never run in-process"
            )
        for k in jax.random.split(key, max_loops):
            passed = np.asarray(self.score(answers, problems)) == 1.0
            if passed.all():
                break
            answers = self.revise(k, "plain", problems, answers, passed)
        return answers

    def score(self, answers: Answers, problems: Problems) -> np.ndarray:
        """``[P]`` official score of each answer (0 where there is none)."""
        value, valid = np.asarray(answers.value), np.asarray(answers.valid)
        return np.asarray(
            [
                self.task.score(self.text(v), int(i), self.sandbox) if ok else 0.0
                for v, ok, i in zip(value, valid, problems.answers, strict=True)
            ]
        )

    def failure(self, answers: Answers, problems: Problems, j: int) -> dict:
        """One failed case for the optimizer's prompt: question, answer text, reference."""
        ok = bool(np.asarray(answers.valid)[j])
        i = int(problems.answers[j])
        return {
            "question": problems.questions[j][:500],
            "answer": self.text(np.asarray(answers.value)[j])[:300] if ok else None,
            "expected": self.task.reference(i)[:300],
        }

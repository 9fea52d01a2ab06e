"""The executor interface and the interpreter that runs a workflow over a batch of problems.

An *executor* implements the operators on a whole batch at once (one model call serves every
problem, and for ``sc_ensemble`` every sample): the stand-in
(:mod:`jaxlab.workflows.standin`) and the language-model executor
(:mod:`jaxlab.workflows.lm_executor`) are the two provided. The interpreter walks the steps of a
:class:`~jaxlab.workflows.program.Workflow` on the host (a workflow is a short program; the
arrays inside each operator are batched, jit-compiled JAX) with one PRNG key per step.

``sc_ensemble`` is the exact plurality vote of :func:`majority`, the same for every executor.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Int, PRNGKeyArray

from jaxlab.workflows.program import PROMPTS, Workflow, WorkflowError, validate
from jaxlab.workflows.tasks import Problems


@struct.dataclass
class Answers:
    """Candidate answers, one per problem (and per sample: leading axes are free).

    Attributes:
        value: ``[..., P]`` int32 value (meaningless where ``valid`` is false).
        valid: ``[..., P]`` the answer is in the answer format (an integer).
    """

    value: Int[Array, "... problems"]
    valid: Bool[Array, "... problems"]


@runtime_checkable
class Executor(Protocol):
    """The operators, batched over problems. Every method takes a key first."""

    def solve(
        self, key: PRNGKeyArray, solver: str, prompt: str, problems: Problems, n: int
    ) -> Answers:
        """``n`` independent answers per problem from ``generate`` or ``programmer``:
        ``[n, P]``."""
        ...

    def review(
        self, key: PRNGKeyArray, prompt: str, problems: Problems, answers: Answers
    ) -> Bool[Array, " problems"]:
        """Feedback: ``True`` where the reviewer judges the answer correct."""
        ...

    def revise(
        self,
        key: PRNGKeyArray,
        prompt: str,
        problems: Problems,
        answers: Answers,
        feedback: Bool[Array, " problems"],
    ) -> Answers:
        """A new answer where ``feedback`` is false, the old one elsewhere."""
        ...

    def format(self, key: PRNGKeyArray, problems: Problems, answers: Answers) -> Answers:
        """Brings answers into the answer format (values unchanged)."""
        ...

    # Optional: ``choose(key, problems, candidates [n, P]) -> Answers [P]`` (MdEnsemble: the
    # model picks the best candidate, in ``choose_votes`` calls per problem, default 1);
    # ``solve``/``review``/``revise`` take an ``instruction`` keyword where a call has one. An
    # executor without them refuses those operators.

    def test(
        self, key: PRNGKeyArray, problems: Problems, answers: Answers, max_loops: int
    ) -> Answers:
        """Checks each answer against an independent programmer run; revises on disagreement,
        at most ``max_loops`` times."""
        ...


@jax.jit
def majority(answers: Answers) -> Answers:
    """Exact plurality vote over the leading (sample) axis: ``[n, P] -> [P]``.

    Only valid answers vote; ties go to the candidate that appears first; a problem with no
    valid candidate gets an invalid answer. For two outcomes, correct with probability ``p``
    each, the vote of ``n`` (odd) is correct with probability
    ``sum_{k > n/2} C(n, k) p^k (1-p)^(n-k)`` (:func:`majority_accuracy`).
    """
    v, ok = answers.value, answers.valid
    same = (v[:, None, :] == v[None, :, :]) & ok[:, None, :] & ok[None, :, :]  # [n, n, P]
    votes = jnp.sum(same, axis=1)  # [n, P]
    best = jnp.argmax(votes, axis=0)  # first maximum
    value = jnp.take_along_axis(v, best[None, :], axis=0)[0]
    return Answers(value=value, valid=jnp.any(ok, axis=0))


def majority_accuracy(p: float, n: int) -> float:
    """Closed form of the binary plurality vote (odd ``n``): ``sum_{k > n/2} C(n,k) p^k q^(n-k)``."""
    from math import comb

    if n % 2 == 0:
        raise ValueError(f"n={n}: expected an odd number of voters")
    return float(sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1)))


def _select(mask, new: Answers, old: Answers) -> Answers:
    m = jnp.asarray(mask)
    return jax.tree.map(lambda a, b: jnp.where(m, a, b), new, old)


def _kw(a: dict) -> dict:
    """The custom instruction of a call, passed only where given (so executors that predate
    instructions, and the draws of calls without one, are unchanged)."""
    return {"instruction": a["instruction"]} if "instruction" in a else {}


class _Run:
    """One interpretation: answers, feedback, and the cost tally (calls and byte tokens per
    problem, counted only where a call is made for that problem)."""

    def __init__(self, executor: Executor, problems: Problems):
        self.executor, self.problems = executor, problems
        self.answers: Answers | None = None
        self.feedback = None
        p = len(problems)
        self.calls = np.zeros(p, np.int64)
        self.prompt_tokens = np.zeros(p, np.int64)
        self.q_len = np.asarray([len(q.encode()) for q in problems.questions], np.int64)

    def charge(self, mask, calls: int, a: dict) -> None:
        extra = len(PROMPTS.get(a.get("prompt", "plain"), "")) + len(a.get("instruction", ""))
        m = np.asarray(mask, bool)
        self.calls += calls * m
        self.prompt_tokens += calls * m * (self.q_len + extra)

    def block(self, key: PRNGKeyArray, steps, mask) -> None:
        keys = jax.random.split(key, len(steps))
        for i, (step, k) in enumerate(zip(steps, keys, strict=True)):
            self.step(i, step, k, mask)

    def step(self, i: int, step, k: PRNGKeyArray, mask) -> None:
        ex, problems, a = self.executor, self.problems, dict(step.args)
        old = self.answers
        if step.op in ("generate", "programmer", "answer_generate", "custom"):
            solver = step.op
            prompt = a.get("prompt", "plain")
            new = jax.tree.map(lambda x: x[0], ex.solve(k, solver, prompt, problems, 1, **_kw(a)))
            self.charge(mask, 1, a)
        elif step.op == "sc_ensemble":
            new = majority(ex.solve(k, a["solver"], a["prompt"], problems, a["n"], **_kw(a)))
            self.charge(mask, a["n"], a)
        elif step.op == "md_ensemble":
            k_solve, k_choose = jax.random.split(k)
            cands = ex.solve(k_solve, a["solver"], a["prompt"], problems, a["n"], **_kw(a))
            new = ex.choose(k_choose, problems, cands)
            self.charge(mask, a["n"] + getattr(ex, "choose_votes", 1), a)
        elif step.op == "review":
            fb = ex.review(k, a["prompt"], problems, old, **_kw(a))
            self.feedback = fb if self.feedback is None else jnp.where(mask, fb, self.feedback)
            self.charge(mask, 1, a)
            return
        elif step.op == "revise":
            new = ex.revise(k, a["prompt"], problems, old, self.feedback, **_kw(a))
            self.charge(np.asarray(mask) & ~np.asarray(self.feedback), 1, a)
        elif step.op == "format":
            new = ex.format(k, problems, old)
        elif step.op == "test":
            new = ex.test(k, problems, old, a["max_loops"])
            self.charge(mask, 2 * a["max_loops"], a)
        elif step.op == "if":
            cond = ~np.asarray(old.valid) if a["cond"] == "invalid" else ~np.asarray(self.feedback)
            self.block(k, a["body"], np.asarray(mask) & cond)
            return
        elif step.op == "loop":
            active = np.asarray(mask)
            for k_iter in jax.random.split(k, a["n"]):
                k_review, k_revise = jax.random.split(k_iter)
                self.step(0, a["body"][0], k_review, active)
                active = active & ~np.asarray(self.feedback)
                self.step(1, a["body"][1], k_revise, active)
            return
        else:  # validate() rules this out; kept so a new operator cannot be skipped silently
            raise WorkflowError(f"step {i}: operator {step.op!r} has no interpreter rule")
        self.answers = new if old is None or np.all(mask) else _select(mask, new, old)


def run_workflow(
    key: PRNGKeyArray,
    workflow: Workflow,
    executor: Executor,
    problems: Problems,
    *,
    cost: dict | None = None,
) -> Answers:
    """Interprets ``workflow`` on every problem at once: the final ``[P]`` answers.

    An ``if`` body and the iterations of a ``loop`` run batched over every problem and are kept
    only where the condition holds (and charged only there). ``cost``, if given, receives
    ``calls`` and ``prompt_tokens`` summed over problems (prompt tokens: bytes of the question,
    template and instruction of each call; what a byte-level model reads).
    """
    validate(workflow)
    run = _Run(executor, problems)
    run.block(key, workflow.steps, np.ones(len(problems), bool))
    if cost is not None:
        cost["calls"] = cost.get("calls", 0) + int(run.calls.sum())
        cost["prompt_tokens"] = cost.get("prompt_tokens", 0) + int(run.prompt_tokens.sum())
    return run.answers


def accuracy(answers: Answers, problems: Problems) -> float:
    """Fraction of problems whose answer is valid and exactly right."""
    right = np.asarray(answers.valid) & (np.asarray(answers.value) == problems.answers)
    return float(np.mean(right))


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Scores of ``runs`` independent executions (AFlow's ``validation_rounds``) and the failure
    log of the first run (what AFlow's optimizer reads: counts by kind and a few examples).

    Attributes:
        scores: accuracy of each run.
        cost: ``{"calls", "prompt_tokens", "generated_tokens"}`` per problem and run (means over
            the runs and problems: what one workflow execution costs on one problem).
        seconds: wall time of the evaluation (measured; kept out of reproducible records).
        failures: ``{"out_of_format": int, "wrong_value": int, "examples": [{question, answer,
            expected}, ...]}`` (at most ``NUM_FAILURE_EXAMPLES`` examples; ``answer`` is
            ``None`` when out of format).
    """

    scores: tuple[float, ...]
    failures: dict = dataclasses.field(default_factory=dict)
    cost: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores))


NUM_FAILURE_EXAMPLES = 3


def failure_log(answers: Answers, problems: Problems, rng: np.random.Generator) -> dict:
    """Counts of out-of-format and wrong answers and up to 3 random failed examples."""
    valid, value = np.asarray(answers.valid), np.asarray(answers.value)
    wrong = valid & (value != problems.answers)
    failed = np.flatnonzero(~valid | wrong)
    picks = rng.choice(failed, size=min(NUM_FAILURE_EXAMPLES, failed.size), replace=False)
    return {
        "out_of_format": int(np.sum(~valid)),
        "wrong_value": int(np.sum(wrong)),
        "examples": [
            {
                "question": problems.questions[i],
                "answer": int(value[i]) if valid[i] else None,
                "expected": int(problems.answers[i]),
            }
            for i in sorted(int(j) for j in picks)
        ],
    }


def scored_failure_log(answers, problems, scored, executor, rng) -> dict:
    """:func:`failure_log` for an executor with an official per-item ``score`` (text tasks):
    failed means a score below 1; the examples come from ``executor.failure``."""
    valid = np.asarray(answers.valid)
    failed = np.flatnonzero(np.asarray(scored) < 1.0)
    picks = rng.choice(failed, size=min(NUM_FAILURE_EXAMPLES, failed.size), replace=False)
    return {
        "out_of_format": int(np.sum(~valid)),
        "wrong_value": int(np.sum(valid & (np.asarray(scored) < 1.0))),
        "examples": [executor.failure(answers, problems, int(j)) for j in sorted(picks)],
    }


def evaluate(
    key: PRNGKeyArray, workflow: Workflow, executor: Executor, problems: Problems, runs: int
) -> Evaluation:
    """Mean accuracy over ``runs`` executions with independent keys (AFlow's evaluation; an
    executor with a ``score(answers, problems) -> [P]`` method scores instead, e.g. F1), the
    failure log of the first run, the mean cost per problem (generated tokens: what the
    executor's ``stats["tokens"]`` counted, else its ``tokens_per_call`` per call) and the wall
    time."""
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs={runs!r}: expected an int >= 1")
    keys = jax.random.split(key, runs)
    scores, failures, tally = [], {}, {}
    stats = getattr(executor, "stats", None)
    tokens_before = stats.get("tokens", 0) if isinstance(stats, dict) else None
    start = time.perf_counter()
    for i, k in enumerate(keys):
        answers = run_workflow(k, workflow, executor, problems, cost=tally)
        scored = executor.score(answers, problems) if hasattr(executor, "score") else None
        scores.append(accuracy(answers, problems) if scored is None else float(np.mean(scored)))
        if i == 0:
            seed = np.asarray(jax.random.key_data(k)).ravel().tolist()
            rng = np.random.default_rng(seed)
            failures = (
                failure_log(answers, problems, rng)
                if scored is None
                else scored_failure_log(answers, problems, scored, executor, rng)
            )
    per = runs * len(problems)
    cost = {
        "calls": tally["calls"] / per,
        "prompt_tokens": tally["prompt_tokens"] / per,
        "generated_tokens": (
            stats["tokens"] - tokens_before
            if tokens_before is not None
            else tally["calls"] * getattr(executor, "tokens_per_call", 0)
        )
        / per,
    }
    return Evaluation(tuple(scores), failures, cost, time.perf_counter() - start)

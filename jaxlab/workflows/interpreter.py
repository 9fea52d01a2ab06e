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
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Int, PRNGKeyArray

from jaxlab.workflows.program import Workflow, WorkflowError, validate
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


def run_workflow(
    key: PRNGKeyArray, workflow: Workflow, executor: Executor, problems: Problems
) -> Answers:
    """Interprets ``workflow`` on every problem at once: the final ``[P]`` answers."""
    validate(workflow)
    keys = jax.random.split(key, len(workflow.steps))
    answers, feedback = None, None
    for i, (step, k) in enumerate(zip(workflow.steps, keys, strict=True)):
        a = dict(step.args)
        if step.op in ("generate", "programmer"):
            answers = jax.tree.map(
                lambda x: x[0], executor.solve(k, step.op, a["prompt"], problems, 1)
            )
        elif step.op == "sc_ensemble":
            answers = majority(executor.solve(k, a["solver"], a["prompt"], problems, a["n"]))
        elif step.op == "review":
            feedback = executor.review(k, a["prompt"], problems, answers)
        elif step.op == "revise":
            answers = executor.revise(k, a["prompt"], problems, answers, feedback)
        elif step.op == "format":
            answers = executor.format(k, problems, answers)
        elif step.op == "test":
            answers = executor.test(k, problems, answers, a["max_loops"])
        else:  # validate() rules this out; kept so a new operator cannot be skipped silently
            raise WorkflowError(f"step {i}: operator {step.op!r} has no interpreter rule")
    return answers


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
        failures: ``{"out_of_format": int, "wrong_value": int, "examples": [{question, answer,
            expected}, ...]}`` (at most ``NUM_FAILURE_EXAMPLES`` examples; ``answer`` is
            ``None`` when out of format).
    """

    scores: tuple[float, ...]
    failures: dict = dataclasses.field(default_factory=dict)

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


def evaluate(
    key: PRNGKeyArray, workflow: Workflow, executor: Executor, problems: Problems, runs: int
) -> Evaluation:
    """Mean accuracy over ``runs`` executions with independent keys (AFlow's evaluation), and
    the failure log of the first run."""
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs={runs!r}: expected an int >= 1")
    keys = jax.random.split(key, runs)
    scores, failures = [], {}
    for i, k in enumerate(keys):
        answers = run_workflow(k, workflow, executor, problems)
        scores.append(accuracy(answers, problems))
        if i == 0:
            seed = np.asarray(jax.random.key_data(k)).ravel().tolist()
            failures = failure_log(answers, problems, np.random.default_rng(seed))
    return Evaluation(tuple(scores), failures)

"""A seeded stand-in executor with known per-operator accuracies (no model).

An offline design for testing AFlow's search: each operator call is a Bernoulli draw against
the true answer, so a workflow's expected accuracy has a closed form and the search can be
checked against it.

* ``generate``/``programmer``: the value is right with probability ``p_generate`` /
  ``p_programmer`` (plus the prompt's bonus, clipped to ``[0, 1]``); a wrong value is
  ``truth + d`` with ``d`` uniform in ``1 … num_wrong`` (``num_wrong = 1``: the binary case, in
  which the plurality of ``n`` votes is right with probability
  :func:`~jaxlab.workflows.interpreter.majority_accuracy`). Independently, the answer is out of
  format with probability ``unformatted_generate`` / ``unformatted_programmer`` (the programmer
  prints prose or a float).
* ``review`` judges correctness rightly with probability ``p_review`` (an unformatted answer is
  always judged wrong); ``revise`` rewrites a rejected answer, right with probability
  ``p_revise`` and always in format.
* ``format`` puts an out-of-format answer into format with probability ``p_format``.
* ``test`` runs an independent programmer check and revises where the check (in format)
  disagrees, up to ``max_loops`` times.

All draws are jit-compiled JAX over the batch of problems, keyed explicitly.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.workflows.interpreter import Answers
from jaxlab.workflows.program import PROMPTS
from jaxlab.workflows.tasks import Problems


@dataclasses.dataclass(frozen=True)
class StandInParams:
    """Per-operator accuracies of the stand-in (module docstring)."""

    p_generate: float = 0.6
    p_programmer: float = 0.9
    unformatted_generate: float = 0.0
    unformatted_programmer: float = 0.3
    p_review: float = 0.8
    p_revise: float = 0.7
    p_format: float = 0.95
    num_wrong: int = 1
    prompt_bonus: tuple[tuple[str, float], ...] = (
        ("careful", 0.03),
        ("plain", 0.0),
        ("step_by_step", 0.05),
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.startswith(("p_", "unformatted_")) and not 0.0 <= value <= 1.0:
                raise ValueError(f"StandInParams.{f.name}={value!r}: expected a float in [0, 1]")
        if not isinstance(self.num_wrong, int) or self.num_wrong < 1:
            raise ValueError(f"StandInParams.num_wrong={self.num_wrong!r}: expected an int >= 1")
        unknown = {name for name, _ in self.prompt_bonus} - set(PROMPTS)
        if unknown:
            raise ValueError(f"StandInParams.prompt_bonus: unknown prompts {sorted(unknown)}")


def _draw(
    key: PRNGKeyArray,
    truth: Int[Array, " problems"],
    p: float | Float[Array, ""],
    unformatted: float | Float[Array, ""],
    n: int,
    num_wrong: int,
) -> Answers:
    k_right, k_wrong, k_fmt = jax.random.split(key, 3)
    shape = (n, truth.shape[0])
    right = jax.random.uniform(k_right, shape) < p
    offset = jax.random.randint(k_wrong, shape, 1, num_wrong + 1)
    value = jnp.where(right, truth[None, :], truth[None, :] + offset)
    return Answers(value=value, valid=jax.random.uniform(k_fmt, shape) >= unformatted)


@functools.partial(jax.jit, static_argnames=("n", "num_wrong"))
def solve_draw(key, truth, p, unformatted, *, n: int, num_wrong: int) -> Answers:
    """``[n, P]`` independent solver answers."""
    return _draw(key, truth, p, unformatted, n, num_wrong)


@jax.jit
def review_draw(key, truth, answers: Answers, p_review) -> Bool[Array, " problems"]:
    """Judgement ``correct?``, right with probability ``p_review``; out of format -> wrong."""
    correct = answers.valid & (answers.value == truth)
    honest = jax.random.uniform(key, truth.shape) < p_review
    return answers.valid & jnp.where(honest, correct, ~correct)


@functools.partial(jax.jit, static_argnames=("num_wrong",))
def revise_draw(key, truth, answers: Answers, feedback, p_revise, *, num_wrong: int) -> Answers:
    """Rejected answers rewritten (right with probability ``p_revise``, in format)."""
    new = jax.tree.map(lambda x: x[0], _draw(key, truth, p_revise, 0.0, 1, num_wrong))
    return jax.tree.map(lambda a, b: jnp.where(feedback, a, b), answers, new)


@jax.jit
def format_draw(key, answers: Answers, p_format) -> Answers:
    """Out-of-format answers fixed with probability ``p_format``."""
    fixed = jax.random.uniform(key, answers.valid.shape) < p_format
    return answers.replace(valid=answers.valid | fixed)


@dataclasses.dataclass(frozen=True)
class StandInExecutor:
    """The stand-in as an :class:`~jaxlab.workflows.interpreter.Executor`.

    ``calls`` is not kept here (the executor is a value); :func:`operator_calls` counts them.
    """

    params: StandInParams = StandInParams()

    def _p(self, solver: str, prompt: str) -> tuple[float, float]:
        bonus = dict(self.params.prompt_bonus).get(prompt, 0.0)
        if solver == "generate":
            p, unf = self.params.p_generate, self.params.unformatted_generate
        elif solver == "programmer":
            p, unf = self.params.p_programmer, self.params.unformatted_programmer
        else:
            raise ValueError(f"solver={solver!r}: expected 'generate' or 'programmer'")
        return min(1.0, max(0.0, p + bonus)), unf

    def solve(self, key, solver, prompt, problems: Problems, n: int) -> Answers:
        p, unf = self._p(solver, prompt)
        truth = jnp.asarray(problems.answers)
        return solve_draw(key, truth, p, unf, n=n, num_wrong=self.params.num_wrong)

    def review(self, key, prompt, problems: Problems, answers: Answers):
        bonus = dict(self.params.prompt_bonus).get(prompt, 0.0)
        p = min(1.0, max(0.0, self.params.p_review + bonus))
        return review_draw(key, jnp.asarray(problems.answers), answers, p)

    def revise(self, key, prompt, problems: Problems, answers: Answers, feedback):
        bonus = dict(self.params.prompt_bonus).get(prompt, 0.0)
        p = min(1.0, max(0.0, self.params.p_revise + bonus))
        truth = jnp.asarray(problems.answers)
        return revise_draw(key, truth, answers, feedback, p, num_wrong=self.params.num_wrong)

    def format(self, key, problems: Problems, answers: Answers) -> Answers:
        return format_draw(key, answers, self.params.p_format)

    def test(self, key, problems: Problems, answers: Answers, max_loops: int) -> Answers:
        for k in jax.random.split(key, max_loops):
            k_check, k_revise = jax.random.split(k)
            check = jax.tree.map(
                lambda x: x[0], self.solve(k_check, "programmer", "plain", problems, 1)
            )
            agree = ~check.valid | (answers.valid & (answers.value == check.value))
            answers = self.revise(k_revise, "plain", problems, answers, agree)
        return answers

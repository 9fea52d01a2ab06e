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

* ``answer_generate`` and ``custom`` are solvers with their own accuracies; an ``instruction``
  (on any call) adds the bonus of every keyword of ``instruction_bonus`` it contains.
* ``md_ensemble``'s pick (``choose``) takes a right candidate, where there is one, with
  probability ``p_choose``, else a uniformly random candidate.

The accuracies live in config files (``configs/standin_*.json`` in this package, or any JSON
file of the same keys: :func:`load_params`): ``arithmetic`` is the offline default (equal to
the dataclass defaults), ``hard`` a landscape whose optimum needs a custom instruction (a
keyword no grammar edit writes), so random edits cannot reach it.

All draws are jit-compiled JAX over the batch of problems, keyed explicitly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.workflows.interpreter import Answers
from jaxlab.workflows.program import PROMPTS
from jaxlab.workflows.tasks import Problems

CONFIG_DIR = Path(__file__).parent / "configs"


def _pairs(items) -> tuple[tuple[str, float], ...]:
    return tuple((str(k), float(v)) for k, v in items)


_D = json.loads((CONFIG_DIR / "standin_arithmetic.json").read_text())


@dataclasses.dataclass(frozen=True)
class StandInParams:
    """Per-operator accuracies of the stand-in (module docstring); the defaults are the
    ``arithmetic`` config."""

    p_generate: float = _D["p_generate"]
    p_programmer: float = _D["p_programmer"]
    unformatted_generate: float = _D["unformatted_generate"]
    unformatted_programmer: float = _D["unformatted_programmer"]
    p_review: float = _D["p_review"]
    p_revise: float = _D["p_revise"]
    p_format: float = _D["p_format"]
    num_wrong: int = _D["num_wrong"]
    prompt_bonus: tuple[tuple[str, float], ...] = _pairs(_D["prompt_bonus"])
    p_answer_generate: float = _D["p_answer_generate"]
    unformatted_answer_generate: float = _D["unformatted_answer_generate"]
    p_custom: float = _D["p_custom"]
    unformatted_custom: float = _D["unformatted_custom"]
    p_choose: float = _D["p_choose"]
    instruction_bonus: tuple[tuple[str, float], ...] = _pairs(_D["instruction_bonus"])
    tokens_per_call: int = _D["tokens_per_call"]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.startswith(("p_", "unformatted_")) and not 0.0 <= value <= 1.0:
                raise ValueError(f"StandInParams.{f.name}={value!r}: expected a float in [0, 1]")
        if not isinstance(self.num_wrong, int) or self.num_wrong < 1:
            raise ValueError(f"StandInParams.num_wrong={self.num_wrong!r}: expected an int >= 1")
        if not isinstance(self.tokens_per_call, int) or self.tokens_per_call < 0:
            raise ValueError(
                f"StandInParams.tokens_per_call={self.tokens_per_call!r}: expected an int >= 0"
            )
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

    The executor is a value: the interpreter counts the calls it makes.
    """

    params: StandInParams = StandInParams()

    @property
    def tokens_per_call(self) -> int:
        return self.params.tokens_per_call

    def _bonus(self, prompt: str, instruction: str) -> float:
        words = instruction.lower()
        extra = sum(b for word, b in self.params.instruction_bonus if word.lower() in words)
        return dict(self.params.prompt_bonus).get(prompt, 0.0) + (extra if instruction else 0.0)

    def _p(self, solver: str, prompt: str, instruction: str = "") -> tuple[float, float]:
        bonus = self._bonus(prompt, instruction)
        if solver not in ("generate", "programmer", "answer_generate", "custom"):
            raise ValueError(
                f"solver={solver!r}: expected generate, programmer, answer_generate or custom"
            )
        p = getattr(self.params, f"p_{solver}")
        unf = getattr(self.params, f"unformatted_{solver}")
        return min(1.0, max(0.0, p + bonus)), unf

    def solve(
        self, key, solver, prompt, problems: Problems, n: int, instruction: str = ""
    ) -> Answers:
        p, unf = self._p(solver, prompt, instruction)
        truth = jnp.asarray(problems.answers)
        return solve_draw(key, truth, p, unf, n=n, num_wrong=self.params.num_wrong)

    def review(self, key, prompt, problems: Problems, answers: Answers, instruction: str = ""):
        bonus = self._bonus(prompt, instruction)
        p = min(1.0, max(0.0, self.params.p_review + bonus))
        return review_draw(key, jnp.asarray(problems.answers), answers, p)

    def revise(
        self, key, prompt, problems: Problems, answers: Answers, feedback, instruction: str = ""
    ):
        bonus = self._bonus(prompt, instruction)
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

    def choose(self, key, problems: Problems, candidates: Answers) -> Answers:
        """MdEnsemble's pick among ``[n, P]`` candidates (module docstring)."""
        return choose_draw(key, jnp.asarray(problems.answers), candidates, self.params.p_choose)


@jax.jit
def choose_draw(key, truth, candidates: Answers, p_choose) -> Answers:
    """A right candidate with probability ``p_choose`` where one exists, else a random one."""
    k_pick, k_any = jax.random.split(key)
    right = candidates.valid & (candidates.value == truth[None, :])  # [n, P]
    first_right = jnp.argmax(right, axis=0)
    any_idx = jax.random.randint(k_any, truth.shape, 0, candidates.value.shape[0])
    good = jnp.any(right, axis=0) & (jax.random.uniform(k_pick, truth.shape) < p_choose)
    idx = jnp.where(good, first_right, any_idx)
    return jax.tree.map(lambda x: jnp.take_along_axis(x, idx[None, :], axis=0)[0], candidates)


def load_params(name_or_path: str | Path) -> StandInParams:
    """Stand-in accuracies from ``configs/standin_<name>.json`` or a JSON file of the same keys.

    Raises:
        ValueError: naming the file and the unknown key or bad value.
    """
    path = CONFIG_DIR / f"standin_{name_or_path}.json"
    if not path.exists():
        path = Path(name_or_path)
    if not path.is_file():
        known = sorted(p.stem.removeprefix("standin_") for p in CONFIG_DIR.glob("standin_*.json"))
        raise ValueError(
            f"stand-in config {str(name_or_path)!r}: expected one of {known} or a file"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg})") from None
    fields = {f.name for f in dataclasses.fields(StandInParams)}
    unknown = sorted(set(data) - fields) if isinstance(data, dict) else ["<not an object>"]
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; expected some of {sorted(fields)}")
    for key in ("prompt_bonus", "instruction_bonus"):
        if key in data:
            data[key] = _pairs(data[key])
    try:
        return StandInParams(**data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None

"""Workflows as data: a straight-line program over operators, printed as readable code.

AFlow (Zhang et al., ICLR 2025) represents a workflow as Python code that calls an LLM through
operators. Here a workflow is a frozen value, never a string to ``exec``: a tuple of
:class:`Step` s interpreted by :func:`jaxlab.workflows.interpreter.run_workflow`. The grammar is

    workflow := solver refinement*          (one solver, first)
    solver   := generate(prompt) | programmer(prompt) | sc_ensemble(solver, n, prompt)
    refine   := review(prompt) revise(prompt) | format() | test(max_loops)

``review`` writes the feedback that the ``revise`` right after it reads; every other step maps the
current answer to a new one. :meth:`Workflow.to_code` prints the program as the Python a reader
would write (the form AFlow's optimizer sees); :meth:`Workflow.to_json`/:meth:`from_json` store
it in the search state. :func:`validate` checks a workflow against :data:`OPERATORS` and raises
:class:`WorkflowError` naming the step and the offending operator or argument.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

PROMPTS: dict[str, str] = {
    "plain": "",
    "step_by_step": "Think step by step.\n",
    "careful": "Read the question carefully.\n",
}
"""Prompt templates by name: the text an LM executor puts before the question (the stand-in
executor turns the name into an accuracy bonus)."""

SOLVERS: tuple[str, ...] = ("generate", "programmer")
MAX_ENSEMBLE = 9
MAX_TEST_LOOPS = 3


def _prompt(value: Any) -> bool:
    return isinstance(value, str) and value in PROMPTS


def _ensemble_n(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_ENSEMBLE


def _loops(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TEST_LOOPS


OPERATORS: dict[str, dict[str, tuple[Any, str]]] = {
    "generate": {"prompt": (_prompt, f"one of {sorted(PROMPTS)}")},
    "programmer": {"prompt": (_prompt, f"one of {sorted(PROMPTS)}")},
    "sc_ensemble": {
        "solver": (lambda v: v in SOLVERS, f"one of {SOLVERS}"),
        "n": (_ensemble_n, f"an int in [2, {MAX_ENSEMBLE}]"),
        "prompt": (_prompt, f"one of {sorted(PROMPTS)}"),
    },
    "review": {"prompt": (_prompt, f"one of {sorted(PROMPTS)}")},
    "revise": {"prompt": (_prompt, f"one of {sorted(PROMPTS)}")},
    "format": {},
    "test": {"max_loops": (_loops, f"an int in [1, {MAX_TEST_LOOPS}]")},
}
"""Operator name -> {argument: (check, expected)}. AFlow's Custom/AnswerGenerate are
``generate``, ScEnsemble is ``sc_ensemble`` (an exact plurality vote), Programmer evaluates an
arithmetic expression (:mod:`jaxlab.workflows.programmer`), Test checks the answer against an
independent programmer run and revises on disagreement (at most ``max_loops`` times)."""

SOLVER_OPS = ("generate", "programmer", "sc_ensemble")


class WorkflowError(ValueError):
    """A workflow that does not follow the grammar; the message names the step and the item."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One operator call.

    Attributes:
        op: operator name (a key of :data:`OPERATORS`).
        args: ``((name, value), ...)`` sorted by name (hashable).
    """

    op: str
    args: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def make(op: str, **args: Any) -> Step:
        return Step(op, tuple(sorted(args.items())))

    def arg(self, name: str) -> Any:
        return dict(self.args)[name]

    def replace(self, **args: Any) -> Step:
        return Step.make(self.op, **{**dict(self.args), **args})


@dataclasses.dataclass(frozen=True)
class Workflow:
    """A program: ``steps[0]`` is the solver, the rest refine its answer (module docstring)."""

    steps: tuple[Step, ...]

    def to_code(self, name: str = "workflow") -> str:
        """The program as readable Python (what AFlow's optimizer reads and writes)."""
        lines = [f"def {name}(problem):"]
        for step in self.steps:
            lines.extend("    " + line for line in _step_code(step))
        lines.append("    return answer")
        return "\n".join(lines) + "\n"

    def to_json(self) -> list[dict[str, Any]]:
        return [{"op": s.op, "args": dict(s.args)} for s in self.steps]

    @staticmethod
    def from_json(items: Any) -> Workflow:
        """Builds and validates a workflow from :meth:`to_json` output."""
        if not isinstance(items, list):
            raise WorkflowError(f"workflow={items!r}: expected a list of steps")
        steps = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or "op" not in item:
                raise WorkflowError(f"step {i}: {item!r}: expected {{'op': ..., 'args': {{...}}}}")
            steps.append(Step.make(item["op"], **dict(item.get("args", {}))))
        return validate(Workflow(tuple(steps)))

    def key(self) -> str:
        """Canonical text, equal for equal programs (duplicate detection)."""
        return json.dumps(self.to_json(), sort_keys=True)

    def num_calls(self) -> int:
        """Model calls per problem if every operator is one call (``test`` counts its worst case:
        one check and one revision per loop)."""
        calls = 0
        for s in self.steps:
            if s.op == "sc_ensemble":
                calls += s.arg("n")
            elif s.op == "test":
                calls += 2 * s.arg("max_loops")
            elif s.op != "format":
                calls += 1
        return calls


def _step_code(step: Step) -> list[str]:
    a = dict(step.args)
    if step.op in ("generate", "programmer"):
        return [f'answer = {step.op}(problem, prompt="{a["prompt"]}")']
    if step.op == "sc_ensemble":
        call = f'{a["solver"]}(problem, prompt="{a["prompt"]}")'
        return [f"answer = sc_ensemble([{call} for _ in range({a['n']})])"]
    if step.op == "review":
        return [f'feedback = review(problem, answer, prompt="{a["prompt"]}")']
    if step.op == "revise":
        return [f'answer = revise(problem, answer, feedback, prompt="{a["prompt"]}")']
    if step.op == "format":
        return ["answer = format(problem, answer)"]
    if step.op == "test":
        return [f"answer = test(problem, answer, max_loops={a['max_loops']})"]
    raise WorkflowError(f"operator {step.op!r}: expected one of {sorted(OPERATORS)}")


def validate(workflow: Workflow) -> Workflow:
    """Checks operators, arguments and the grammar; returns the workflow unchanged.

    Raises:
        WorkflowError: naming the step index and the unknown operator, argument or value.
    """
    if not isinstance(workflow, Workflow) or not workflow.steps:
        raise WorkflowError(f"workflow={workflow!r}: expected a Workflow with at least one step")
    for i, step in enumerate(workflow.steps):
        if step.op not in OPERATORS:
            raise WorkflowError(
                f"step {i}: unknown operator {step.op!r}; expected one of {sorted(OPERATORS)}"
            )
        spec = OPERATORS[step.op]
        names = [n for n, _ in step.args]
        if sorted(names) != sorted(spec):
            raise WorkflowError(
                f"step {i} ({step.op}): arguments {sorted(names)}, expected {sorted(spec)}"
            )
        for name, value in step.args:
            check, expected = spec[name]
            if not check(value):
                raise WorkflowError(f"step {i} ({step.op}): {name}={value!r}, expected {expected}")
        if (i == 0) != (step.op in SOLVER_OPS):
            raise WorkflowError(
                f"step {i} ({step.op}): the first step, and only it, must be a solver {SOLVER_OPS}"
            )
        if step.op == "revise" and workflow.steps[i - 1].op != "review":
            raise WorkflowError(f"step {i} (revise): must directly follow a review step")
    return workflow


def initial_workflow() -> Workflow:
    """AFlow's starting point: a single ``generate`` call."""
    return validate(Workflow((Step.make("generate", prompt="plain"),)))

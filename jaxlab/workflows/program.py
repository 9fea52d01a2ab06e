"""Workflows as data: a program over operators with bounded control flow, printed as code.

AFlow (Zhang et al., ICLR 2025) represents a workflow as Python code that calls an LLM through
operators. Here a workflow is a frozen value, never a string to ``exec``: a tuple of
:class:`Step` s interpreted by :func:`jaxlab.workflows.interpreter.run_workflow`. The grammar is

    workflow := solver statement*           (one solver, first)
    solver   := generate | answer_generate | custom | programmer
              | sc_ensemble(solver, n) | md_ensemble(solver, n)
    stmt     := review revise | format | test(max_loops) | solver
              | if(cond, [stmt...]) | loop(n, [review, revise])
    cond     := "invalid" (the answer is out of format) | "rejected" (the last review said no)

These are the operators of the paper: Custom (a free ``instruction``), AnswerGenerate
(``answer_generate``: reason, then answer; ``generate`` is the plain call), ScEnsemble
(``sc_ensemble``: an exact plurality vote), MdEnsemble (``md_ensemble``: the model picks the best
of the candidates, shown in shuffled order, and the picks are voted), Review, Revise,
Programmer (an arithmetic expression run by a whitelisting interpreter), Format and Test. Every
model call takes an optional ``instruction`` (text put before the question). ``if`` runs its body
only where its condition holds; ``loop`` repeats review->revise up to ``n`` times, stopping for a
problem once the review accepts its answer.

:meth:`Workflow.to_code` prints the program as the Python a reader would write (the form AFlow's
optimizer reads and writes; :mod:`jaxlab.workflows.parse` reads it back without running it);
:meth:`Workflow.to_json`/:meth:`from_json` store it in the search state. :func:`validate` checks
a workflow against :data:`OPERATORS` and raises :class:`WorkflowError` naming the step and the
offending operator or argument.
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

SOLVERS: tuple[str, ...] = ("generate", "programmer", "answer_generate")
"""Solvers an ensemble may sample."""
MAX_ENSEMBLE = 9
MAX_TEST_LOOPS = 3
MAX_LOOP = 3
MAX_INSTRUCTION = 300
CONDITIONS: tuple[str, ...] = ("invalid", "rejected")


def _prompt(value: Any) -> bool:
    return isinstance(value, str) and value in PROMPTS


def _ensemble_n(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_ENSEMBLE


def _loops(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TEST_LOOPS


def _loop_n(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LOOP


def _instruction(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_INSTRUCTION
        and value.strip() == value
        and value.isprintable()
    )


_PROMPT = (_prompt, f"one of {sorted(PROMPTS)}")
_INSTRUCTION = (
    _instruction,
    f"printable text of 1 to {MAX_INSTRUCTION} characters, no edge spaces",
)
_ENSEMBLE = {
    "solver": (lambda v: v in SOLVERS, f"one of {SOLVERS}"),
    "n": (_ensemble_n, f"an int in [2, {MAX_ENSEMBLE}]"),
    "prompt": _PROMPT,
}

OPERATORS: dict[str, dict[str, tuple[Any, str]]] = {
    "generate": {"prompt": _PROMPT},
    "answer_generate": {"prompt": _PROMPT},
    "custom": {"instruction": _INSTRUCTION},
    "programmer": {"prompt": _PROMPT},
    "sc_ensemble": dict(_ENSEMBLE),
    "md_ensemble": dict(_ENSEMBLE),
    "review": {"prompt": _PROMPT},
    "revise": {"prompt": _PROMPT},
    "format": {},
    "test": {"max_loops": (_loops, f"an int in [1, {MAX_TEST_LOOPS}]")},
    "if": {"cond": (lambda v: v in CONDITIONS, f"one of {CONDITIONS}"), "body": (None, "steps")},
    "loop": {"n": (_loop_n, f"an int in [1, {MAX_LOOP}]"), "body": (None, "steps")},
}
"""Operator name -> {argument: (check, expected)} (the module docstring says what each does).
Test checks the answer (arithmetic: against an independent programmer run; code: runs the
problem's unit tests in :mod:`jaxlab.workflows.sandbox`) and revises on failure, at most
``max_loops`` times."""

OPTIONAL: dict[str, tuple[str, ...]] = {
    op: ("instruction",)
    for op in (
        "generate",
        "answer_generate",
        "programmer",
        "sc_ensemble",
        "md_ensemble",
        "review",
        "revise",
    )
}
"""Arguments an operator call may leave out (a custom instruction per call)."""

SOLVER_OPS = ("generate", "programmer", "sc_ensemble", "answer_generate", "custom", "md_ensemble")
CONTROL_OPS = ("if", "loop")


class WorkflowError(ValueError):
    """A workflow that does not follow the grammar; the message names the step and the item."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One operator call, or one ``if``/``loop`` whose ``body`` argument is a tuple of steps.

    Attributes:
        op: operator name (a key of :data:`OPERATORS`).
        args: ``((name, value), ...)`` sorted by name (hashable).
    """

    op: str
    args: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def make(op: str, **args: Any) -> Step:
        if "body" in args and isinstance(args["body"], list):
            args["body"] = tuple(args["body"])
        return Step(op, tuple(sorted(args.items())))

    def arg(self, name: str) -> Any:
        return dict(self.args)[name]

    def replace(self, **args: Any) -> Step:
        return Step.make(self.op, **{**dict(self.args), **args})

    def to_json(self) -> dict[str, Any]:
        args = {
            k: [s.to_json() for s in v] if k == "body" and isinstance(v, tuple) else v
            for k, v in self.args
        }
        return {"op": self.op, "args": args}


def _steps_from_json(items: Any, where: str) -> tuple[Step, ...]:
    if not isinstance(items, list):
        raise WorkflowError(f"{where}={items!r}: expected a list of steps")
    steps = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "op" not in item:
            raise WorkflowError(f"step {i}: {item!r}: expected {{'op': ..., 'args': {{...}}}}")
        args = dict(item.get("args", {}))
        if "body" in args:
            args["body"] = _steps_from_json(args["body"], f"step {i} body")
        steps.append(Step.make(item["op"], **args))
    return tuple(steps)


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
        return [s.to_json() for s in self.steps]

    @staticmethod
    def from_json(items: Any) -> Workflow:
        """Builds and validates a workflow from :meth:`to_json` output."""
        return validate(Workflow(_steps_from_json(items, "workflow")))

    def key(self) -> str:
        """Canonical text, equal for equal programs (duplicate detection)."""
        return json.dumps(self.to_json(), sort_keys=True)

    def num_calls(self) -> int:
        """Model calls per problem in the worst case (every ``if`` taken, every ``loop`` run
        to its bound; ``test`` counts one check and one revision per loop)."""
        return _calls(self.steps)


def _calls(steps: tuple[Step, ...]) -> int:
    calls = 0
    for s in steps:
        if s.op in ("sc_ensemble", "md_ensemble"):
            calls += s.arg("n") + (s.op == "md_ensemble")
        elif s.op == "test":
            calls += 2 * s.arg("max_loops")
        elif s.op == "if":
            calls += _calls(s.arg("body"))
        elif s.op == "loop":
            calls += s.arg("n") * _calls(s.arg("body"))
        elif s.op != "format":
            calls += 1
    return calls


def _kw(a: Mapping[str, Any]) -> str:
    """Keyword arguments ``prompt``/``instruction`` as code (JSON strings are Python literals)."""
    parts = [f'prompt="{a["prompt"]}"'] if "prompt" in a else []
    if "instruction" in a:
        parts.append(f"instruction={json.dumps(a['instruction'])}")
    return ", ".join(parts)


def _step_code(step: Step) -> list[str]:
    a = dict(step.args)
    if step.op in ("generate", "programmer", "answer_generate", "custom"):
        return [f"answer = {step.op}(problem, {_kw(a)})"]
    if step.op in ("sc_ensemble", "md_ensemble"):
        call = f"{a['solver']}(problem, {_kw(a)})"
        return [
            f"answer = {step.op}(problem, [{call} for _ in range({a['n']})])"
            if step.op == "md_ensemble"
            else f"answer = sc_ensemble([{call} for _ in range({a['n']})])"
        ]
    if step.op == "review":
        return [f"feedback = review(problem, answer, {_kw(a)})"]
    if step.op == "revise":
        return [f"answer = revise(problem, answer, feedback, {_kw(a)})"]
    if step.op == "format":
        return ["answer = format(problem, answer)"]
    if step.op == "test":
        return [f"answer = test(problem, answer, max_loops={a['max_loops']})"]
    if step.op == "if":
        head = "if not valid(answer):" if a["cond"] == "invalid" else "if not feedback:"
        return [head] + ["    " + line for s in a["body"] for line in _step_code(s)]
    if step.op == "loop":
        review, revise = a["body"]
        return [
            f"for _ in range({a['n']}):",
            *("    " + line for line in _step_code(review)),
            "    if feedback:",
            "        break",
            *("    " + line for line in _step_code(revise)),
        ]
    raise WorkflowError(f"operator {step.op!r}: expected one of {sorted(OPERATORS)}")


def _check_args(i: str, step: Step) -> None:
    spec = OPERATORS[step.op]
    names = [n for n, _ in step.args]
    optional = OPTIONAL.get(step.op, ())
    if sorted(n for n in names if n not in optional) != sorted(spec):
        raise WorkflowError(
            f"step {i} ({step.op}): arguments {sorted(names)}, expected {sorted(spec)}"
        )
    for name, value in step.args:
        check, expected = spec[name] if name in spec else _INSTRUCTION
        if name != "body" and not check(value):
            raise WorkflowError(f"step {i} ({step.op}): {name}={value!r}, expected {expected}")


def _check_block(steps: tuple[Step, ...], where: str, *, top: bool, reviewed: bool) -> bool:
    """Checks one block of steps; returns whether a review has run (``feedback`` exists)."""
    for i, step in enumerate(steps):
        name = f"{where}{i}"
        if step.op not in OPERATORS:
            raise WorkflowError(
                f"step {name}: unknown operator {step.op!r}; expected one of {sorted(OPERATORS)}"
            )
        _check_args(name, step)
        if top and (i == 0) != (step.op in SOLVER_OPS):
            raise WorkflowError(
                f"step {name} ({step.op}): the first step, and only it, must be a solver "
                f"{SOLVER_OPS}"
            )
        if step.op == "revise" and (i == 0 or steps[i - 1].op != "review"):
            raise WorkflowError(f"step {name} (revise): must directly follow a review step")
        if step.op in CONTROL_OPS:
            body = step.arg("body")
            if not top or not isinstance(body, tuple) or not body:
                raise WorkflowError(
                    f"step {name} ({step.op}): body must be a non-empty list of steps, not nested"
                )
            if step.op == "if" and step.arg("cond") == "rejected" and not reviewed:
                raise WorkflowError(f"step {name} (if): cond='rejected' needs a review before it")
            if step.op == "loop" and [s.op for s in body] != ["review", "revise"]:
                raise WorkflowError(f"step {name} (loop): body must be exactly review, revise")
            _check_block(body, f"{name}.", top=False, reviewed=reviewed)
        reviewed = reviewed or step.op in ("review", "loop")
    return reviewed


def validate(workflow: Workflow) -> Workflow:
    """Checks operators, arguments and the grammar; returns the workflow unchanged.

    Raises:
        WorkflowError: naming the step index and the unknown operator, argument or value.
    """
    if not isinstance(workflow, Workflow) or not workflow.steps:
        raise WorkflowError(f"workflow={workflow!r}: expected a Workflow with at least one step")
    _check_block(workflow.steps, "", top=True, reviewed=False)
    return workflow


def initial_workflow() -> Workflow:
    """AFlow's starting point: a single ``generate`` call."""
    return validate(Workflow((Step.make("generate", prompt="plain"),)))

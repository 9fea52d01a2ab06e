"""AFlow's optimizer as a language model: a prompt from the parent workflow, a generated program.

Each proposal builds one prompt (:func:`build_prompt`, templates in ``templates/`` of this
package) from the parent printed as code, its validation score, the scores of every round so far,
the experience of the parent's children (which modifications raised the score and which did
not, with the scores before and after) and ``k`` failed cases of the parent's evaluation. Any
*generator* answers it: a callable ``(prompt, seed) -> text`` or ``-> (text, usage)`` where
``usage`` holds ``prompt_tokens``/``generated_tokens`` (without it both are counted as bytes).
A scripted function serves the tests; ``jaxlab.commands.workflows`` builds one from a jaxlab run
or a Hugging Face directory through the decoding layer.

The reply is parsed (:func:`jaxlab.workflows.parse.parse_workflow`: never executed), validated
and checked against the programs already in the search tree. A reply that fails any of these is
returned as a :class:`Rejection` with its reason (``parse.REASONS`` or ``duplicate``); the search
counts it, logs it and asks again. The ``seed`` is drawn from the round's generator, so a
resumed search asks the same questions with the same seeds.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxlab.workflows.optimizer import Experience, Proposal
from jaxlab.workflows.parse import ParseError, parse_workflow
from jaxlab.workflows.program import MAX_ENSEMBLE, MAX_LOOP, MAX_TEST_LOOPS, PROMPTS, Workflow

TEMPLATES = Path(__file__).parent / "templates"
_MODIFICATION = re.compile(r"<modification>(.*?)</modification>", re.S)

Generator = Callable[[str, int], Any]


@dataclasses.dataclass(frozen=True)
class Rejection:
    """An optimizer reply that is not used.

    Attributes:
        reason: one of :data:`jaxlab.workflows.parse.REASONS` or ``duplicate``.
        detail: the first problem found (line and item).
        usage: ``{"calls", "prompt_tokens", "generated_tokens"}`` of the optimizer call.
    """

    reason: str
    detail: str
    usage: dict = dataclasses.field(default_factory=dict)


def template(name: str) -> str:
    """The text of ``templates/<name>.txt``."""
    return (TEMPLATES / f"{name}.txt").read_text(encoding="utf-8")


def _experience_text(experience: Sequence[Experience]) -> str:
    if not experience:
        return "(none yet: this workflow has not been modified before)"
    lines = []
    for label, keep in (("Helped", True), ("Did not help", False)):
        items = [e for e in experience if e.succeed == keep]
        for e in items:
            lines.append(f"{label}: {e.modification} ({e.before:.4f} -> {e.after:.4f})")
    return "\n".join(lines)


def _failures_text(failures: Mapping[str, Any], k: int) -> tuple[str, int]:
    examples = list(failures.get("examples", []))[:k]
    head = (
        f"{failures.get('out_of_format', 0)} answers out of format, "
        f"{failures.get('wrong_value', 0)} wrong."
    )
    lines = [head]
    for e in examples:
        got = "out of format" if e.get("answer") is None else repr(e.get("answer"))
        lines.append(f"- question: {e['question']}\n  answer: {got}; expected: {e['expected']!r}")
    return "\n".join(lines), len(examples)


def build_prompt(
    parent: Workflow,
    *,
    parent_round: int,
    parent_score: float,
    scores: Mapping[int, float],
    experience: Sequence[Experience],
    failures: Mapping[str, Any],
    k: int = 3,
    task: str = "arithmetic word",
) -> str:
    """The optimizer's prompt (module docstring); ``k`` failed cases at most."""
    operators = template("operators").format(
        prompts=", ".join(f'"{p}"' for p in PROMPTS),
        max_ensemble=MAX_ENSEMBLE,
        max_loops=MAX_TEST_LOOPS,
        max_loop=MAX_LOOP,
    )
    fails, shown = _failures_text(failures, k)
    return template("optimize").format(
        task=task,
        operators=operators.rstrip("\n"),
        round=parent_round,
        score=parent_score,
        code=parent.to_code(),
        scores="\n".join(f"{r}: {s:.4f}" for r, s in sorted(scores.items())),
        experience=_experience_text(experience),
        num_failures=shown,
        failures=fails,
    )


def _usage(prompt: str, reply: Any) -> tuple[str, dict]:
    usage = {}
    if isinstance(reply, tuple) and len(reply) == 2:
        reply, usage = reply
    text = reply if isinstance(reply, str) else ""
    return text, {
        "calls": 1,
        "prompt_tokens": int(usage.get("prompt_tokens", len(prompt.encode()))),
        "generated_tokens": int(usage.get("generated_tokens", len(text.encode()))),
    }


@dataclasses.dataclass(frozen=True)
class LMOptimizer:
    """The language-model optimizer (module docstring).

    Attributes:
        generate: ``(prompt, seed) -> text`` or ``(text, usage)``.
        k: failed cases shown per prompt.
        task: the task's name in the prompt.
        use_experience: show the parent's experience (``False``: the ablation).
    """

    generate: Generator
    k: int = 3
    task: str = "arithmetic word"
    use_experience: bool = True

    wants_history = True  # the search passes the round scores and the parent's round

    def propose(
        self,
        rng: np.random.Generator,
        parent: Workflow,
        *,
        parent_score: float,
        experience: Sequence[Experience],
        failures: Mapping[str, Any],
        is_duplicate: Callable[[Workflow], bool],
        scores: Mapping[int, float] | None = None,
        parent_round: int = 0,
    ) -> Proposal | Rejection:
        prompt = build_prompt(
            parent,
            parent_round=parent_round,
            parent_score=parent_score,
            scores=scores or {},
            experience=experience if self.use_experience else (),
            failures=failures,
            k=self.k,
            task=self.task,
        )
        text, usage = _usage(prompt, self.generate(prompt, int(rng.integers(2**31))))
        try:
            child = parse_workflow(text)
        except ParseError as e:
            return Rejection(e.reason, str(e), usage)
        if child == parent or is_duplicate(child):
            return Rejection("duplicate", "the program is already in the search tree", usage)
        found = _MODIFICATION.search(text)
        modification = " ".join(found.group(1).split())[:200] if found else "(not stated)"
        return Proposal(child, modification or "(not stated)", "lm", usage)

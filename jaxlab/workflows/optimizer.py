"""The optimizer interface and the grammar-of-edits optimizer.

AFlow's optimizer is an LLM that reads the parent workflow, its score and the *experience* of
the parent's children (each modification with its score before and after) and writes exactly
one modification; modifications already made are rejected (``check_modification``). An
:class:`Optimizer` here has the same contract, so an LM-driven optimizer can stand behind it:
``propose(rng, parent, ...)`` returns one :class:`Proposal` (or ``None`` when the parent has
no untried modification left).

:class:`EditOptimizer` draws one edit of the workflow grammar (:func:`edits`): swap the solver,
change or add/remove an ensemble, change a prompt template, wrap in review→revise, add or remove
format/test, change test loops. With experience, an edit's weight is
``exp(beta · gain(kind))`` where ``gain`` is the mean score change (percentage points) of the
parent's children made by edits of the same kind (``0`` for kinds not tried yet), so kinds that
failed from this parent are avoided and kinds that helped are refined; without experience every
edit has equal weight. Either way, candidates whose program is already in the search tree are
rejected (the duplicate check is the search's, not experience). With ``use_failures`` the parent's
failure log also steers the draw: the share of its failures that are out of format raises the
weight of ``format`` edits by ``exp(gamma · share)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from jaxlab.workflows.program import (
    MAX_ENSEMBLE,
    MAX_TEST_LOOPS,
    PROMPTS,
    Step,
    Workflow,
    WorkflowError,
    validate,
)

MAX_STEPS = 7


@dataclasses.dataclass(frozen=True)
class Experience:
    """One child of a parent: what changed and the scores before and after (AFlow's
    ``experience.json`` entry)."""

    modification: str
    kind: str
    before: float
    after: float

    @property
    def succeed(self) -> bool:
        return self.after > self.before


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A new workflow and the modification that made it; ``usage``: the optimizer's cost
    (``calls``, ``prompt_tokens``, ``generated_tokens``; empty for edits drawn without a
    model)."""

    workflow: Workflow
    modification: str
    kind: str
    usage: dict = dataclasses.field(default_factory=dict)


@runtime_checkable
class Optimizer(Protocol):
    def propose(
        self,
        rng: np.random.Generator,
        parent: Workflow,
        *,
        parent_score: float,
        experience: Sequence[Experience],
        failures: Mapping[str, Any],
        is_duplicate: Callable[[Workflow], bool],
    ) -> Proposal | None:
        """One modification of ``parent``; ``None`` when it has none left. An optimizer may
        also return a ``lm_optimizer.Rejection`` (counted by the search, which asks again), and
        with ``wants_history = True`` it is also passed ``scores`` ({round: score}) and
        ``parent_round``."""
        ...


def edits(workflow: Workflow) -> list[Proposal]:
    """Every single edit of ``workflow`` allowed by the grammar (deterministic order)."""
    steps = list(workflow.steps)
    head, rest = steps[0], steps[1:]
    out: list[Proposal] = []

    seen = {workflow.key()}

    def add(kind: str, text: str, new_steps: Sequence[Step]) -> None:
        new = Workflow(tuple(new_steps))
        try:  # e.g. removing the review that an ``if not feedback`` reads
            validate(new)
        except WorkflowError:
            return
        if len(new_steps) <= MAX_STEPS and new.key() not in seen:  # equal programs: one edit
            seen.add(new.key())
            out.append(Proposal(new, text, kind))

    # solver: swap generate <-> programmer, ensemble size (heads of the other operators, which
    # only a language-model optimizer writes, keep their solver: no edit of the grammar makes
    # or unmakes them)
    if head.op in ("generate", "programmer", "sc_ensemble"):
        solver = head.arg("solver") if head.op == "sc_ensemble" else head.op
        other = "programmer" if solver == "generate" else "generate"
        swapped = (
            head.replace(solver=other)
            if head.op == "sc_ensemble"
            else Step.make(other, prompt=head.arg("prompt"))
        )
        add("solver", f"replace {solver} with {other}", [swapped, *rest])
    if head.op == "sc_ensemble":
        n = head.arg("n")
        for m in (n - 2, n + 2):
            if 3 <= m <= MAX_ENSEMBLE:
                add("ensemble", f"sc_ensemble size {n} -> {m}", [head.replace(n=m), *rest])
        add(
            "ensemble",
            f"remove sc_ensemble of {n}",
            [Step.make(solver, prompt=head.arg("prompt")), *rest],
        )
    elif head.op in ("generate", "programmer"):
        add(
            "ensemble",
            f"wrap {solver} in sc_ensemble of 3",
            [Step.make("sc_ensemble", solver=solver, n=3, prompt=head.arg("prompt")), *rest],
        )
    # prompts of every step that has one
    for i, step in enumerate(steps):
        if "prompt" in dict(step.args):
            for name in PROMPTS:
                if name != step.arg("prompt"):
                    new = list(steps)
                    new[i] = step.replace(prompt=name)
                    add(
                        "prompt", f"step {i} ({step.op}) prompt {step.arg('prompt')} -> {name}", new
                    )
    # insertions after the solver
    for pos in range(1, len(steps) + 1):
        if pos < len(steps) and steps[pos].op == "revise":
            continue  # never split a review/revise pair
        pair = [Step.make("review", prompt="plain"), Step.make("revise", prompt="plain")]
        add("review_revise", f"add review->revise at step {pos}", steps[:pos] + pair + steps[pos:])
        add(
            "format", f"add format at step {pos}", steps[:pos] + [Step.make("format")] + steps[pos:]
        )
        add(
            "test",
            f"add test at step {pos}",
            steps[:pos] + [Step.make("test", max_loops=1)] + steps[pos:],
        )
    # removals and test loops
    for i, step in enumerate(steps):
        if step.op == "review" and i + 1 < len(steps) and steps[i + 1].op == "revise":
            add("review_revise", f"remove review->revise at step {i}", steps[:i] + steps[i + 2 :])
        elif step.op in ("format", "test") or (step.op == "review"):
            add(
                step.op if step.op != "review" else "review_revise",
                f"remove {step.op} at step {i}",
                steps[:i] + steps[i + 1 :],
            )
        if step.op == "test":
            for m in (step.arg("max_loops") - 1, step.arg("max_loops") + 1):
                if 1 <= m <= MAX_TEST_LOOPS:
                    new = list(steps)
                    new[i] = step.replace(max_loops=m)
                    add("test", f"test at step {i} max_loops {step.arg('max_loops')} -> {m}", new)
    return out


@dataclasses.dataclass(frozen=True)
class EditOptimizer:
    """One grammar edit per round (module docstring).

    Attributes:
        use_experience: weight edit kinds by the parent's children's score changes.
        beta: weight per percentage point of mean gain.
        use_failures: read the parent's failure log (module docstring).
        gamma: log-weight of ``format`` edits per unit share of out-of-format failures.
    """

    use_experience: bool = True
    beta: float = 0.3
    use_failures: bool = True
    gamma: float = 3.0

    def propose(
        self,
        rng: np.random.Generator,
        parent: Workflow,
        *,
        parent_score: float,
        experience: Sequence[Experience],
        failures: Mapping[str, Any],
        is_duplicate: Callable[[Workflow], bool],
    ) -> Proposal | None:
        del parent_score
        options = [p for p in edits(parent) if not is_duplicate(p.workflow)]
        if not options:
            return None
        logits = np.zeros(len(options))
        if self.use_experience and experience:
            gains: dict[str, list[float]] = {}
            for e in experience:
                gains.setdefault(e.kind, []).append(100.0 * (e.after - e.before))
            logits = np.asarray([self.beta * np.mean(gains.get(p.kind, [0.0])) for p in options])
        if self.use_failures and failures:
            # the failure log: out-of-format failures call for format edits (AFlow's optimizer
            # reads the parent's failed cases)
            total = failures.get("out_of_format", 0) + failures.get("wrong_value", 0)
            share = failures.get("out_of_format", 0) / max(total, 1)
            logits = logits + np.asarray(
                [self.gamma * share if p.kind == "format" else 0.0 for p in options]
            )
        w = np.exp(logits - logits.max())
        return options[int(rng.choice(len(options), p=w / w.sum()))]

"""AFlow's Monte Carlo tree search over workflows, with its whole state on disk after each round.

One round (paper §4, Algorithm 1):

1. **Select** a parent among round 1 and the best rounds
   (:func:`jaxlab.workflows.selection.select_round`: uniform/softmax mixture).
2. **Expand**: the optimizer proposes one modification of the parent, using the experience of
   the parent's children; programs already in the tree are rejected.
3. **Evaluate** the child: mean accuracy over ``validation_runs`` executions on the validation
   split (AFlow: 5 in the paper).
4. **Back-propagate** the experience ``{modification, before, after}`` to the parent.
5. **Stop** after ``max_rounds`` rounds or when the top-3 mean has not changed for 5 rounds
   (:func:`jaxlab.workflows.selection.converged`).

Round ``r`` draws its randomness from ``(seed, r)`` only (a NumPy generator for selection and
expansion, a JAX key for evaluation), and the state (every round's workflow, parent,
modification, scores, selection probabilities; the experience) is written to
``run_dir/state.json`` atomically after each round. Restarting with the same run directory and
settings therefore continues exactly where it stopped, and an interrupted search ends with the
same state as an uninterrupted one. If a round fails (a bad workflow, a failing executor) the
error propagates and the file keeps the last completed round.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab.core import atomic, json_files
from jaxlab.workflows import selection
from jaxlab.workflows.interpreter import Executor, evaluate
from jaxlab.workflows.lm_optimizer import Rejection
from jaxlab.workflows.optimizer import Experience, Optimizer
from jaxlab.workflows.program import Workflow, WorkflowError, validate
from jaxlab.workflows.tasks import Problems

STATE_FILE = "state.json"
STATE_VERSION = 1


class SearchStateError(ValueError):
    """A state file that does not belong to this search (names the differing setting)."""


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Settings of the search (defaults: AFlow's).

    Attributes:
        max_rounds: round limit (round 1 evaluates the initial workflow).
        validation_runs: executions averaged per evaluation.
        sample: candidates for selection (round 1 + ``sample - 1`` best).
        alpha, lam: selection softmax temperature and uniform share.
        top_k, consecutive, z: convergence rule.
        check_convergence: stop early on convergence.
        seed: seed of every random choice.
        max_expansion_tries: parents drawn in a round before giving up (all edits tried).
    """

    max_rounds: int = 20
    validation_runs: int = 3
    sample: int = selection.SAMPLE
    alpha: float = selection.ALPHA
    lam: float = selection.LAMBDA
    top_k: int = selection.TOP_K
    consecutive: int = selection.CONSECUTIVE
    z: float = 0.0
    check_convergence: bool = True
    seed: int = 0
    max_expansion_tries: int = 20

    def __post_init__(self) -> None:
        for name in ("max_rounds", "validation_runs", "sample", "top_k", "consecutive"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SearchConfig.{name}={value!r}: expected an int >= 1")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"SearchConfig.lam={self.lam!r}: expected a float in [0, 1]")

    def fingerprint(self) -> dict[str, Any]:
        """Settings that must match to resume (``max_rounds`` may grow)."""
        d = dataclasses.asdict(self)
        d.pop("max_rounds")
        return d


@dataclasses.dataclass
class SearchState:
    """Everything the search knows; JSON-serialisable (:meth:`to_json`)."""

    settings: dict[str, Any]
    rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    experience: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    stopped: str | None = None
    rejected: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    timing: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def rejection_counts(self) -> dict[str, int]:
        """Optimizer replies not used, by reason (``parse.REASONS`` and ``duplicate``)."""
        counts: dict[str, int] = {}
        for r in self.rejected:
            counts[r["reason"]] = counts.get(r["reason"], 0) + 1
        return dict(sorted(counts.items()))

    def optimizer_usage(self) -> dict[str, int]:
        """The optimizer's calls and tokens over the whole search (used and rejected replies)."""
        total = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0}
        for r in self.rounds:
            for k, v in r.get("optimizer_cost", {}).items():
                total[k] += v
        for r in self.rejected:
            if r.get("after_last_round"):
                for k, v in r.get("usage", {}).items():
                    total[k] += v
        return total

    def front(self) -> list[dict[str, Any]]:
        """The rounds on the score/cost front: no other round scores at least as high with
        fewer model calls per problem (or higher with as few), in order of cost."""

        def calls(r):
            return r.get("cost", {}).get("calls", 0.0)

        out = [
            r
            for r in self.rounds
            if not any(
                (o["score"] >= r["score"] and calls(o) < calls(r))
                or (o["score"] > r["score"] and calls(o) <= calls(r))
                for o in self.rounds
            )
        ]
        return sorted(out, key=lambda r: (calls(r), -r["score"], r["round"]))

    def scores(self) -> dict[int, float]:
        return {r["round"]: r["score"] for r in self.rounds}

    def best(self) -> dict[str, Any]:
        return max(self.rounds, key=lambda r: (r["score"], -r["round"]))

    def workflow(self, round_: int) -> Workflow:
        return Workflow.from_json(self.rounds[round_ - 1]["workflow"])

    def to_json(self) -> dict[str, Any]:
        """The reproducible record (equal for an interrupted and resumed search and an
        uninterrupted one): everything but the measured wall times of ``timing``."""
        return {
            "version": STATE_VERSION,
            "settings": self.settings,
            "rounds": self.rounds,
            "experience": self.experience,
            "stopped": self.stopped,
            "rejected": self.rejected,
        }


def save_state(run_dir: str | Path, state: SearchState) -> None:
    """Atomic write of ``run_dir/state.json`` (a crash never leaves a partial file)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json_files.dumps(
        {**state.to_json(), "timing": state.timing},
        where=str(run_dir / STATE_FILE),
        indent=1,
        sort_keys=True,
    )
    atomic.write_text(run_dir / STATE_FILE, text)


def load_state(run_dir: str | Path) -> SearchState | None:
    """The saved state, or ``None`` if the directory has none."""
    path = Path(run_dir) / STATE_FILE
    if not path.exists():
        return None
    hint = f"the saved search is damaged: move {path} aside to start over in {path.parent}"
    try:
        data = json_files.read_json(path, keys=("version",), hint=hint)
        if data["version"] != STATE_VERSION:
            raise SearchStateError(f"{path}: version={data['version']!r}, expected {STATE_VERSION}")
        data = json_files.read_json(path, keys=tuple(_STATE_KEYS), hint=hint)
    except json_files.RunFileError as e:
        raise SearchStateError(str(e)) from None
    for key, kind in _STATE_KEYS.items():
        if not isinstance(data[key], kind):
            raise SearchStateError(
                f"{path}: key {key!r} holds {type(data[key]).__name__}, expected "
                + " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            )
    for i, r in enumerate(data["rounds"]):
        missing = [k for k in _ROUND_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise SearchStateError(f"{path}: rounds[{i}] lacks key {missing[0]!r}")
    extra = {k: data[k] for k in ("rejected", "timing") if isinstance(data.get(k), list | dict)}
    return SearchState(
        data["settings"], data["rounds"], data["experience"], data["stopped"], **extra
    )


#: The keys of ``state.json`` and their JSON types, and the keys every round record needs.
_STATE_KEYS = {
    "version": int,
    "settings": dict,
    "rounds": list,
    "experience": dict,
    "stopped": (str, type(None)),
}
_ROUND_KEYS = ("round", "parent", "modification", "kind", "workflow", "score", "std", "failures")


def _round_rng(seed: int, round_: int) -> tuple[np.random.Generator, jax.Array]:
    return np.random.default_rng([seed, round_]), jax.random.fold_in(jax.random.key(seed), round_)


def _open_state(
    initial: Workflow,
    problems: Problems,
    config: SearchConfig,
    run_dir: str | Path | None,
    describe: dict[str, Any] | None,
) -> SearchState:
    """The saved state of ``run_dir`` if its settings match these, else a new state."""
    settings = {
        "config": config.fingerprint(),
        "initial": initial.to_json(),
        "num_problems": len(problems),
        **(describe or {}),
    }
    settings = json.loads(json.dumps(settings))
    state = load_state(run_dir) if run_dir is not None else None
    if state is None:
        state = SearchState(settings)
    elif state.settings != settings:
        diff = sorted(
            k
            for k in set(settings) | set(state.settings)
            if settings.get(k) != state.settings.get(k)
        )
        raise SearchStateError(
            f"{Path(run_dir) / STATE_FILE} belongs to a search with other settings ({', '.join(diff)}): "
            f"saved {[state.settings.get(k) for k in diff]}, now {[settings.get(k) for k in diff]}"
        )
    return state


def _round_record(round_, workflow, evaluation, parent, proposal, probs, usages) -> dict[str, Any]:
    """The JSON record of one evaluated round (round 1 has no parent and no proposal)."""
    return {
        "round": round_,
        "parent": parent,
        "modification": proposal.modification if proposal else "initial workflow",
        "kind": proposal.kind if proposal else "initial",
        "workflow": workflow.to_json(),
        "scores": list(evaluation.scores),
        "score": evaluation.mean,
        "std": float(np.std(evaluation.scores)),
        "failures": evaluation.failures,
        "selection": {str(k): v for k, v in (probs or {}).items()},
        "cost": evaluation.cost,
        "optimizer_cost": _sum_usage(usages),
    }


def _sum_usage(usages) -> dict[str, int]:
    total = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0}
    for u in usages:
        for k in total:
            total[k] += int(u.get(k, 0))
    return total


def _add_experience(state: SearchState, parent: int, rec: dict[str, Any]) -> None:
    """Adds the round ``rec`` (a modification of ``parent``) to the parent's experience."""
    before = state.rounds[parent - 1]["score"]
    state.experience.setdefault(str(parent), []).append(
        {
            "modification": rec["modification"],
            "kind": rec["kind"],
            "before": before,
            "after": rec["score"],
            "succeed": rec["score"] > before,
        }
    )


def _converged_round(state: SearchState, config: SearchConfig) -> int | None:
    """The round at which the top-k scores converged (``selection.converged``), if any."""
    return selection.converged(
        [r["score"] for r in state.rounds],
        [r["std"] for r in state.rounds],
        top_k=config.top_k,
        z=config.z,
        consecutive=config.consecutive,
    )


def _expand(rng, state: SearchState, optimizer: Optimizer, config: SearchConfig, seen: set):
    """Selects a parent and asks for a new modification, up to ``max_expansion_tries`` times;
    also returns the rejected replies and every optimizer call's usage."""
    proposal, parent, probs = None, None, None
    rejected, usages = [], []
    history = getattr(optimizer, "wants_history", False)
    for _ in range(config.max_expansion_tries):
        parent, probs = selection.select_round(
            rng, state.scores(), sample=config.sample, alpha=config.alpha, lam=config.lam
        )
        experience = [
            Experience(e["modification"], e["kind"], e["before"], e["after"])
            for e in state.experience.get(str(parent), [])
        ]
        extra = {"scores": state.scores(), "parent_round": parent} if history else {}
        proposal = optimizer.propose(
            rng,
            state.workflow(parent),
            parent_score=state.rounds[parent - 1]["score"],
            experience=experience,
            failures=state.rounds[parent - 1]["failures"],
            is_duplicate=lambda w: w.key() in seen,
            **extra,
        )
        if proposal is not None and getattr(proposal, "usage", None):
            usages.append(proposal.usage)
        if isinstance(proposal, Rejection):
            rejected.append(
                {
                    "reason": proposal.reason,
                    "detail": proposal.detail[:300],
                    "parent": parent,
                    "usage": _sum_usage([proposal.usage]),
                }
            )
            proposal = None
            continue
        if proposal is not None:
            break
    return proposal, parent, probs, rejected, usages


def run_search(
    initial: Workflow,
    executor: Executor,
    problems: Problems,
    optimizer: Optimizer,
    config: SearchConfig,
    *,
    run_dir: str | Path | None = None,
    describe: dict[str, Any] | None = None,
    on_round: Callable[[dict[str, Any], SearchState], None] | None = None,
) -> SearchState:
    """Runs (or resumes) the search; returns the final state.

    Args:
        initial: round 1's workflow.
        executor: runs the operators.
        problems: the validation split.
        optimizer: proposes one modification per round.
        config: search settings.
        run_dir: where ``state.json`` lives; an existing state with the same settings resumes.
        describe: extra settings that must match on resume (executor, task, optimizer).
        on_round: called with each new round record and the state (after saving).

    Raises:
        SearchStateError: the run directory holds a search with other settings.
        WorkflowError: the initial or a proposed workflow breaks the grammar.
    """
    state = _open_state(initial, problems, config, run_dir, describe)
    state.stopped = None
    # the replies of a round that ended the search are asked again (same seeds) on a rerun
    state.rejected = [r for r in state.rejected if not r.get("after_last_round")]
    seen = {Workflow.from_json(r["workflow"]).key() for r in state.rounds}

    def record(round_, workflow, evaluation, parent, proposal, probs, usages=(), rejected=()):
        rec = _round_record(round_, workflow, evaluation, parent, proposal, probs, usages)
        state.rejected.extend({"round": round_, **r} for r in rejected)
        state.timing[str(round_)] = {
            "evaluation_s": evaluation.seconds,
            "round_s": time.perf_counter() - started,
        }
        state.rounds.append(rec)
        seen.add(workflow.key())
        if parent is not None:
            _add_experience(state, parent, rec)
        if run_dir is not None:
            save_state(run_dir, state)
        if on_round is not None:
            on_round(rec, state)

    started = time.perf_counter()
    if not state.rounds:
        validate(initial)
        _, key = _round_rng(config.seed, 1)
        record(
            1,
            initial,
            evaluate(key, initial, executor, problems, config.validation_runs),
            None,
            None,
            None,
        )

    while len(state.rounds) < config.max_rounds:
        fired = _converged_round(state, config) if config.check_convergence else None
        if fired is not None:
            state.stopped = f"converged at round {fired}"
            break
        round_ = len(state.rounds) + 1
        started = time.perf_counter()
        rng, key = _round_rng(config.seed, round_)
        proposal, parent, probs, rejected, usages = _expand(rng, state, optimizer, config, seen)
        if proposal is None:
            state.rejected.extend(
                {"round": round_, "after_last_round": True, **r} for r in rejected
            )
            state.stopped = f"no new modification after {config.max_expansion_tries} draws"
            break
        try:
            child = validate(proposal.workflow)
        except WorkflowError as e:
            raise WorkflowError(f"round {round_} ({proposal.modification}): {e}") from None
        evaluation = evaluate(key, child, executor, problems, config.validation_runs)
        record(round_, child, evaluation, parent, proposal, probs, usages, rejected)
    if state.stopped is None:
        state.stopped = f"round limit {config.max_rounds}"
    if run_dir is not None:
        save_state(run_dir, state)
    return state

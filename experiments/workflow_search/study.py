"""Does the experience log help AFlow's search, and does the hard stand-in resist edits?

For each stand-in config (``arithmetic``, ``hard``) and seed, three optimizers search 20 rounds
(no early stop) on the validation part (1:4 split of ``--problems`` generated problems):

- ``experience``: grammar edits weighted by the parent's experience and failure log;
- ``no_experience``: the same without the experience (failure log kept);
- ``random``: uniform grammar edits.

The best validation workflow is scored on the test part. One JSON line per search, then one
summary line per (config, arm) and the paired comparisons (fraction of seeds where an arm's
test score beats another's). The ``hard`` config's optimum needs a custom instruction with the
keyword ``units``, which no grammar edit writes: the ``reference`` lines score that workflow.

    python -m experiments.workflow_search.study --seeds 8 > experiments/workflow_search/results.jsonl

It also writes the markdown tables to ``--table`` (default ``results.md`` beside this file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

from jaxlab.workflows import interpreter, search, tasks
from jaxlab.workflows.optimizer import EditOptimizer
from jaxlab.workflows.parse import parse_workflow
from jaxlab.workflows.program import initial_workflow
from jaxlab.workflows.standin import StandInExecutor, load_params

ARMS = {
    "experience": EditOptimizer(use_experience=True, use_failures=True),
    "no_experience": EditOptimizer(use_experience=False, use_failures=True),
    "random": EditOptimizer(use_experience=False, use_failures=False),
}
REFERENCE = """def workflow(problem):
    answer = md_ensemble(problem, [answer_generate(problem, prompt="step_by_step", instruction="Check the units of every quantity.") for _ in range(5)])
    if not valid(answer):
        answer = format(problem, answer)
    return answer
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--table", default=str(Path(__file__).parent / "results.md"))
    args = ap.parse_args(argv)
    results: dict[tuple[str, str], list[float]] = {}
    for config in ("arithmetic", "hard"):
        executor = StandInExecutor(load_params(config))
        for seed in range(args.seeds):
            val, test = tasks.split(tasks.make_problems(seed, args.problems), seed)
            ref = interpreter.evaluate(
                jax.random.key(seed + 1), parse_workflow(REFERENCE), executor, test, 3
            )
            line = {"config": config, "seed": seed, "arm": "reference", "test": ref.mean}
            print(json.dumps(line), flush=True)
            for arm, optimizer in ARMS.items():
                cfg = search.SearchConfig(
                    seed=seed, max_rounds=args.rounds, check_convergence=False
                )
                state = search.run_search(initial_workflow(), executor, val, optimizer, cfg)
                best = state.best()
                workflow = state.workflow(best["round"])
                score = interpreter.evaluate(
                    jax.random.key(seed + 1), workflow, executor, test, 3
                ).mean
                results.setdefault((config, arm), []).append(score)
                line = {
                    "config": config,
                    "seed": seed,
                    "arm": arm,
                    "best_val": best["score"],
                    "test": score,
                    "calls": best["cost"]["calls"],
                    "best_round": best["round"],
                }
                print(json.dumps(line), flush=True)
            results.setdefault((config, "reference"), []).append(ref.mean)
    for (config, arm), scores in sorted(results.items()):
        summary = {
            "summary": True,
            "config": config,
            "arm": arm,
            "test_mean": float(np.mean(scores)),
            "test_std": float(np.std(scores)),
        }
        print(json.dumps(summary))
    rows = [
        f"Test accuracy of the best validation workflow, {args.seeds} seeds, {args.rounds} rounds, "
        f"{args.problems} problems (1:4 split).",
        "",
        "| config | arm | test mean | test std |",
        "| --- | --- | --- | --- |",
    ]
    for (config, arm), scores in sorted(results.items()):
        rows.append(f"| {config} | {arm} | {np.mean(scores):.4f} | {np.std(scores):.4f} |")
    rows += ["", "| config | arm | beats | fraction of seeds (ties) | mean difference |"]
    rows.append("| --- | --- | --- | --- | --- |")
    for config in ("arithmetic", "hard"):
        for a, b in (
            ("experience", "no_experience"),
            ("experience", "random"),
            ("no_experience", "random"),
        ):
            x, y = np.asarray(results[(config, a)]), np.asarray(results[(config, b)])
            line = {
                "paired": True,
                "config": config,
                "better": a,
                "than": b,
                "fraction_of_seeds": float(np.mean(x > y)),
                "ties": float(np.mean(x == y)),
                "mean_difference": float(np.mean(x - y)),
            }
            print(json.dumps(line))
            rows.append(
                f"| {config} | {a} | {b} | {line['fraction_of_seeds']:.3f} "
                f"({line['ties']:.3f}) | {line['mean_difference']:+.4f} |"
            )
    Path(args.table).write_text("\n".join(rows) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

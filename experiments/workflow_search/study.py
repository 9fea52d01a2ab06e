"""Does the experience log help AFlow's search, and does the hard stand-in resist edits?

For each stand-in config (``arithmetic``, ``hard``) and seed, three optimizers search 20 rounds
(no early stop) on the validation part (1:4 split of ``--problems`` generated problems):

- ``experience``: grammar edits weighted by the parent's experience and failure log;
- ``no_experience``: the same without the experience (failure log kept);
- ``random``: uniform grammar edits.

With ``--lm-arm`` a fourth arm joins (``--arms`` picks a subset):

- ``lm_constrained``: the LM optimizer (:class:`~jaxlab.workflows.lm_optimizer.LMOptimizer`)
  on a small byte decoder trained for ``--lm-steps`` steps (the ``lm-tiny`` recipe's pieces and
  the shared loop) on reply texts of random edit chains from the initial workflow (no prompt:
  a prior over programs, not an instruction follower), decoded by SMC under the workflow
  grammar (:func:`jaxlab.commands.workflows.constrained_generator`), so every reply parses.
  Its prompt keeps its last ``max_len - max_new_tokens - 1`` bytes (the reply instructions,
  not the parent's code).

The best validation workflow is scored on the test part. One JSON line per search, then one
summary line per (config, arm) and the paired comparisons (fraction of seeds where an arm's
test score beats another's). The ``hard`` config's optimum needs a custom instruction with the
keyword ``units``, which no grammar edit writes: the ``reference`` lines score that workflow.

    python -m experiments.workflow_search.study --seeds 8 > experiments/workflow_search/results.jsonl
    python -m experiments.workflow_search.study --seeds 3 --lm-arm --arms random,lm_constrained \
        --table experiments/workflow_search/results_lm.md > experiments/workflow_search/results_lm.jsonl

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
from jaxlab.workflows.lm_optimizer import LMOptimizer
from jaxlab.workflows.optimizer import EditOptimizer, edits
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


def program_texts(n: int, seed: int) -> list[str]:
    """``n`` optimizer replies (modification and program) of random edit chains of 1 to 5
    edits from the initial workflow."""
    rng = np.random.default_rng(seed)
    docs = []
    while len(docs) < n:
        workflow = initial_workflow()
        for _ in range(int(rng.integers(1, 6))):
            options = edits(workflow)
            proposal = options[int(rng.integers(len(options)))]
            workflow = proposal.workflow
        code = workflow.to_code()
        docs.append(
            f"<modification>{proposal.modification}</modification>\n<graph>\n{code}</graph>"
        )
    return docs


def train_program_lm(run_dir: Path, steps: int) -> None:
    """A byte decoder (``lm-tiny`` run) trained on :func:`program_texts`."""
    import dataclasses

    from jaxlab.core import loop
    from jaxlab.core import run as run_lib
    from jaxlab.lm import training
    from jaxlab.lm.data import ByteLMDataConfig, split_windows, train_dataset
    from jaxlab.lm.model import DecoderConfig
    from jaxlab.recipes import lm_tiny

    cfg = lm_tiny.LmTinyConfig(
        model=DecoderConfig(d_model=64, n_layers=2, n_heads=2, head_dim=32, d_ff=192, max_len=640),
        data=ByteLMDataConfig(seq_len=256, batch_size=16),
        optim=dataclasses.replace(training.OPTIM, warmup_steps=50),
        loop=loop.LoopConfig(
            total_steps=steps,
            steps_per_call=10,
            log_every=steps,
            eval_every=steps,
            checkpoint_every=steps,
            progress=False,
        ),
    )
    train_w, _ = split_windows(cfg.data, program_texts(4000, 12345))
    parts = run_lib.build(lm_tiny.RECIPE, cfg, jax.devices()[:1])
    parts = dataclasses.replace(
        parts,
        data=lambda: iter(train_dataset(train_w, batch_size=cfg.data.batch_size, seed=0)),
        evaluate=None,
    )
    result = loop.run(lm_tiny.RECIPE, cfg, run_dir, parts=parts)
    line = {"train_program_lm": True, "steps": result.step}
    line["loss"] = float(result.metrics.get("loss", np.nan))
    print(json.dumps(line), flush=True)


def lm_arm(run_dir: Path, steps: int, particles: int) -> LMOptimizer:
    """The ``lm_constrained`` optimizer (module docstring); trains the run if it is absent."""
    from jaxlab.commands.workflows import constrained_generator, open_decoder_run

    if not (run_dir / "config.yaml").exists():
        train_program_lm(run_dir, steps)
    model, params = open_decoder_run("lm-tiny", run_dir)
    generate = constrained_generator(model, params, max_new_tokens=320, num_particles=particles)
    return LMOptimizer(generate)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--table", default=str(Path(__file__).parent / "results.md"))
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of the arms")
    ap.add_argument("--lm-arm", action="store_true", help="add the lm_constrained arm")
    ap.add_argument("--lm-run-dir", default="/tmp/workflow_search_program_lm")
    ap.add_argument("--lm-steps", type=int, default=300)
    ap.add_argument("--lm-particles", type=int, default=4)
    args = ap.parse_args(argv)
    arms = {a: ARMS[a] for a in args.arms.split(",") if a in ARMS}
    if args.lm_arm:
        arms["lm_constrained"] = lm_arm(Path(args.lm_run_dir), args.lm_steps, args.lm_particles)
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
            for arm, optimizer in arms.items():
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
                    "rejections": state.rejection_counts(),
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
            ("lm_constrained", "random"),
            ("lm_constrained", "experience"),
        ):
            if (config, a) not in results or (config, b) not in results:
                continue
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

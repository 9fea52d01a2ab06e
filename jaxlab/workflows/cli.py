"""``jaxlab workflows search``: AFlow's search on the arithmetic task from the command line.

    jaxlab workflows search --task arithmetic --executor standin --rounds 20 --run-dir DIR
    jaxlab workflows search --task FILE.jsonl --executor lm --lm-run-dir RUN --run-dir DIR

Prints one table row per round (score, parent, edit), and writes to the run directory:
``state.json`` (the whole search, after every round: rerun the same command to resume),
``best_workflow.py`` (the best program as code), ``scores.png`` (score over rounds) and
``summary.json`` (best validation score and its test score). The validation:test split is 1:4.

The LM executor needs a trained decoder run (``--lm-run-dir``, e.g. an ``lm-tiny`` run). Loading
it is injected (``main(argv, load_lm=...)``): ``jaxlab.commands.workflows`` joins the model
family to this one, so nothing in ``workflows`` imports ``lm``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab import media
from jaxlab.workflows import interpreter, program, search, tasks
from jaxlab.workflows.optimizer import EditOptimizer
from jaxlab.workflows.programmer import ProgrammerError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="jaxlab workflows", description="AFlow: workflow search with MCTS."
    )
    sub = ap.add_subparsers(dest="action", required=True)
    s = sub.add_parser("search", help="run or resume a search")
    s.add_argument("--task", default="arithmetic", help="'arithmetic' or a JSON-lines task file")
    s.add_argument("--executor", choices=("standin", "lm"), default="standin")
    s.add_argument("--rounds", type=int, default=20)
    s.add_argument("--run-dir", required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--num-problems", type=int, default=1000, help="arithmetic: val + test")
    s.add_argument("--max-terms", type=int, default=3, help="arithmetic: numbers per problem")
    s.add_argument("--validation-runs", type=int, default=3)
    s.add_argument("--no-experience", action="store_true", help="uniform edits (ablation)")
    s.add_argument("--no-convergence", action="store_true", help="always run --rounds rounds")
    s.add_argument("--lm-run-dir", default=None, help="trained decoder run (--executor lm)")
    s.add_argument("--lm-recipe", default="lm-tiny")
    s.add_argument("--particles", type=int, default=4, help="SMC particles per prompt (lm)")
    return ap


def _plot(state: search.SearchState, path: Path) -> None:
    rounds = [r["round"] for r in state.rounds]
    scores = [r["score"] for r in state.rounds]
    media.plot_curves(
        path,
        {"round score": (rounds, scores), "best so far": (rounds, np.maximum.accumulate(scores))},
        points={"round score": (rounds, scores)},
        xlabel="round",
        ylabel="validation accuracy",
        title="AFlow search",
    )


def _executor(args, load_lm):
    if args.executor == "standin":
        from jaxlab.workflows.standin import StandInExecutor, StandInParams

        return StandInExecutor(), {"executor": "standin", "params": repr(StandInParams())}
    from jaxlab.core.errors import UserError

    if not args.lm_run_dir:
        raise UserError(
            "--executor lm needs --lm-run-dir",
            "train a decoder first, e.g. python -m benchmarks.bench_workflows --parts lm "
            "--train-lm RUN",
        )
    if load_lm is None:
        raise UserError("--executor lm: no model loader (run it as `jaxlab workflows ...`)")
    from jaxlab.workflows.lm_executor import LMExecutor

    text_lm = load_lm(args.lm_recipe, args.lm_run_dir)
    desc = {
        "executor": "lm",
        "lm_run_dir": str(Path(args.lm_run_dir).resolve()),
        "particles": args.particles,
    }
    return LMExecutor(text_lm, num_particles=args.particles), desc


def search_main(args, load_lm=None) -> int:
    """Runs or resumes the search in ``--run-dir``, holding the directory's run lock
    (:class:`jaxlab.core.run_lock.RunLock`): a second search on the same directory is refused
    with the holder's pid while the first runs."""
    from jaxlab.core import resume, run_lock
    from jaxlab.core.errors import keeping

    run_dir = Path(args.run_dir)
    resume.check_run_dir(run_dir)
    with run_lock.RunLock(run_dir), keeping(lambda: _search_kept(run_dir)):
        return _search_locked(args, run_dir, load_lm)


def _search_kept(run_dir: Path) -> str:
    """What an interrupted search leaves: ``state.json`` after its last finished round (each
    file is replaced whole, never half-written)."""
    state = run_dir / search.STATE_FILE
    if not state.exists():
        return f"no round finished, nothing was saved in {run_dir}"
    try:
        rounds = len(json.loads(state.read_text())["rounds"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{state} is kept as it was"
    return f"{state} keeps rounds 1-{rounds}; run the same command to resume"


def _check_new_or_search_dir(run_dir: Path) -> None:
    """Refuses a directory that holds files but no saved search (another command's output, or
    a search whose state was removed): its files would be overwritten or mixed with this one."""
    from jaxlab.core import run_lock
    from jaxlab.core.errors import UserError

    if (run_dir / search.STATE_FILE).exists():
        return
    others = sorted(p.name for p in run_dir.iterdir() if p.name != run_lock.LOCK_NAME)
    if others:
        raise UserError(
            f"--run-dir {run_dir} holds {', '.join(others[:5])} but no {search.STATE_FILE}: "
            "not a search to resume",
            "pass --run-dir with a new or empty directory (nothing is overwritten)",
        )


def _check_split(val: Any, test: Any, args) -> None:
    """Refuses a split with an empty validation or test part (its mean would be NaN)."""
    from jaxlab.core.errors import UserError

    if len(val) == 0 or len(test) == 0:
        raise UserError(
            f"{len(val) + len(test)} problems give {len(val)} validation and {len(test)} test "
            "problems; both need at least one (the split is 1:4)",
            "pass --num-problems 5 or more" if args.task == "arithmetic" else "add problems",
        )


def _search_locked(args, run_dir: Path, load_lm) -> int:
    from jaxlab.core import atomic, json_files
    from jaxlab.core.errors import UserError

    _check_new_or_search_dir(run_dir)
    try:
        if args.task == "arithmetic":
            problems = tasks.make_problems(args.seed, args.num_problems, max_terms=args.max_terms)
        else:
            problems = tasks.load_task_file(args.task)
        val, test = tasks.split(problems, args.seed)
        _check_split(val, test, args)
        executor, desc = _executor(args, load_lm)
        config = search.SearchConfig(
            max_rounds=args.rounds,
            validation_runs=args.validation_runs,
            seed=args.seed,
            check_convergence=not args.no_convergence,
        )
        optimizer = EditOptimizer(use_experience=not args.no_experience)
        print(f"{'round':>5} {'score':>6} {'parent':>6}  edit")

        def show(rec, _state):
            parent = "-" if rec["parent"] is None else str(rec["parent"])
            print(f"{rec['round']:>5} {rec['score']:>6.3f} {parent:>6}  {rec['modification']}")
            sys.stdout.flush()

        state = search.run_search(
            program.initial_workflow(),
            executor,
            val,
            optimizer,
            config,
            run_dir=run_dir,
            describe={
                "task": args.task if args.task != "arithmetic" else f"arithmetic/{args.max_terms}",
                **desc,
                "experience": not args.no_experience,
            },
            on_round=show,
        )
    except (
        program.WorkflowError,
        tasks.TaskFileError,
        ProgrammerError,
        search.SearchStateError,
    ) as e:
        raise UserError(str(e), f"the search state in {run_dir} is unchanged") from None
    best = state.best()
    workflow = program.Workflow.from_json(best["workflow"])
    test_eval = interpreter.evaluate(
        jax.random.key(args.seed + 1), workflow, executor, test, args.validation_runs
    )
    atomic.write_text(
        run_dir / "best_workflow.py",
        f"# round {best['round']}: validation {best['score']:.4f}, test {test_eval.mean:.4f}\n"
        + workflow.to_code(),
    )
    _plot(state, run_dir / "scores.png")
    summary = {
        "stopped": state.stopped,
        "rounds": len(state.rounds),
        "initial_val": state.rounds[0]["score"],
        "best_round": best["round"],
        "best_val": best["score"],
        "best_test": test_eval.mean,
        "val_size": len(val),
        "test_size": len(test),
    }
    json_files.write(run_dir / "summary.json", summary)
    print(f"stopped: {state.stopped}")
    print(workflow.to_code(), end="")
    print(json_files.dumps(summary, where="summary"))
    return 0


def main(argv: Sequence[str], *, load_lm: Callable[[str, str], Any] | None = None) -> int:
    """``jaxlab workflows search ...`` (module docstring).

    Args:
        argv: the arguments after ``workflows``.
        load_lm: ``(recipe, run_dir) -> jaxlab.workflows.lm_executor.TextLM`` for
            ``--executor lm``.
    """
    args = build_parser().parse_args(list(argv))
    if args.action == "search":
        return search_main(args, load_lm)
    return 2

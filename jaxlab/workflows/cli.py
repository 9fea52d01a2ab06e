"""``jaxlab workflows search``: AFlow's search on the arithmetic task from the command line.

    jaxlab workflows search --task arithmetic --executor standin --rounds 20 --run-dir DIR
    jaxlab workflows search --standin-config hard --optimizer lm --optimizer-hf-dir HF --run-dir DIR
    jaxlab workflows search --task FILE.jsonl --executor lm --lm-run-dir RUN --run-dir DIR
    jaxlab workflows show DIR

Prints one table row per round (score, parent, edit), and writes to the run directory:
``state.json`` (the whole search, after every round: rerun the same command to resume),
``best_workflow.py`` (the best program as code), ``scores.png`` (score over rounds) and
``summary.json`` (best validation score and its test score, its cost, the score/cost front,
the optimizer's usage and rejections). The validation:test split is 1:4. ``show`` prints a
search's best workflow as code with its scores and cost, the front and the rejection counts.

The optimizer is the grammar of edits (``--optimizer edit``) or a language model
(``--optimizer lm`` with ``--optimizer-hf-dir`` or ``--optimizer-run-dir``; its replies are
parsed, never run; ``--optimizer-constrained`` decodes them under the workflow grammar of
:mod:`jaxlab.workflows.program_grammar`, so that every reply parses). The stand-in's accuracies come from ``--standin-config`` (``arithmetic``,
``hard`` or a JSON file).

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
    s.add_argument("--executor", choices=("standin", "lm", "text"), default="standin")
    s.add_argument(
        "--format",
        default=None,
        choices=("gsm8k", "math", "humaneval", "mbpp", "hotpotqa"),
        help="a benchmark layout: --task FILE (default: the shipped sample), --executor text",
    )
    s.add_argument("--executor-hf-dir", default=None, help="text executor: Hugging Face model")
    s.add_argument("--executor-max-new-tokens", type=int, default=128)
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
    s.add_argument("--standin-config", default="arithmetic", help="arithmetic, hard or a JSON file")
    s.add_argument("--optimizer", choices=("edit", "lm"), default="edit")
    s.add_argument("--optimizer-hf-dir", default=None, help="Hugging Face model directory")
    s.add_argument("--optimizer-run-dir", default=None, help="trained decoder run (lm optimizer)")
    s.add_argument("--optimizer-recipe", default="lm-tiny")
    s.add_argument("--optimizer-max-new-tokens", type=int, default=256)
    s.add_argument(
        "--optimizer-constrained",
        action="store_true",
        help="lm optimizer: decode under the workflow grammar, so every reply parses",
    )
    s.add_argument("--failures-shown", type=int, default=3, help="k failed cases per prompt")
    s.add_argument("--expansion-tries", type=int, default=20, help="optimizer asks per round")
    sh = sub.add_parser("show", help="print a search's best workflow, scores and cost")
    sh.add_argument("run_dir")
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
        from jaxlab.core.errors import UserError
        from jaxlab.workflows.standin import StandInExecutor, load_params

        try:
            params = load_params(args.standin_config)
        except ValueError as e:
            raise UserError(f"--standin-config: {e}") from None
        return StandInExecutor(params), {"executor": "standin", "params": repr(params)}
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


def search_main(args, load_lm=None, load_generator=None) -> int:
    """Runs or resumes the search in ``--run-dir``, holding the directory's run lock
    (:class:`jaxlab.core.run_lock.RunLock`): a second search on the same directory is refused
    with the holder's pid while the first runs."""
    from jaxlab.core import resume, run_lock
    from jaxlab.core.errors import keeping

    run_dir = Path(args.run_dir)
    resume.check_run_dir(run_dir)
    with run_lock.RunLock(run_dir), keeping(lambda: _search_kept(run_dir)):
        return _search_locked(args, run_dir, load_lm, load_generator)


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


def _optimizer(args, load_generator):
    """The optimizer of ``--optimizer`` and the settings that must match on resume."""
    from jaxlab.core.errors import UserError

    if args.optimizer == "edit":
        return EditOptimizer(use_experience=not args.no_experience), {}
    from jaxlab.workflows.lm_optimizer import LMOptimizer

    if (args.optimizer_hf_dir is None) == (args.optimizer_run_dir is None):
        raise UserError(
            "--optimizer lm needs exactly one of --optimizer-hf-dir and --optimizer-run-dir",
            "e.g. --optimizer lm --optimizer-hf-dir path/to/instruct-model",
        )
    if load_generator is None:
        raise UserError("--optimizer lm: no model loader (run it as `jaxlab workflows ...`)")
    if args.optimizer_max_new_tokens < 1 or args.failures_shown < 0:
        raise UserError(
            f"--optimizer-max-new-tokens {args.optimizer_max_new_tokens} / --failures-shown "
            f"{args.failures_shown}: expected >= 1 / >= 0"
        )
    where = args.optimizer_hf_dir or args.optimizer_run_dir
    constrained = {"constrained": True} if args.optimizer_constrained else {}
    try:
        generate = load_generator(
            hf_dir=args.optimizer_hf_dir,
            run_dir=args.optimizer_run_dir,
            recipe=args.optimizer_recipe,
            max_new_tokens=args.optimizer_max_new_tokens,
            **constrained,
        )
    except ValueError as e:
        if not constrained:
            raise
        raise UserError(
            f"--optimizer-constrained with {where}: {e}",
            "a model whose vocabulary writes the workflow code and whose context holds "
            "--optimizer-max-new-tokens tokens after the prompt",
        ) from None
    desc = {
        "optimizer": "lm",
        "optimizer_model": str(Path(where).resolve()),
        "optimizer_max_new_tokens": args.optimizer_max_new_tokens,
        "failures_shown": args.failures_shown,
    }
    desc |= {"optimizer_constrained": True} if constrained else {}
    opt = LMOptimizer(generate, k=args.failures_shown, use_experience=not args.no_experience)
    return opt, desc


def _text_executor(args, load_generator):
    """The task of ``--format``/``--task``, its 1:4 split and the text executor on
    ``--executor-hf-dir`` or ``--lm-run-dir`` (code formats get a sandbox)."""
    from jaxlab.core.errors import UserError
    from jaxlab.workflows import formats
    from jaxlab.workflows.sandbox import Sandbox, SandboxUnavailable
    from jaxlab.workflows.text_executor import CODE_FORMATS, TextExecutor

    if args.format is None or args.executor != "text":
        raise UserError(
            f"--format {args.format} with --executor {args.executor}: a benchmark format runs "
            "on the text executor",
            "pass --format FMT --executor text --executor-hf-dir DIR",
        )
    if (args.executor_hf_dir is None) == (args.lm_run_dir is None):
        raise UserError("--executor text needs exactly one of --executor-hf-dir and --lm-run-dir")
    if load_generator is None:
        raise UserError("--executor text: no model loader (run it as `jaxlab workflows ...`)")
    path = formats.sample_path(args.format) if args.task == "arithmetic" else Path(args.task)
    task = formats.load_task(args.format, path)
    try:
        sandbox = Sandbox() if args.format in CODE_FORMATS else None
    except SandboxUnavailable as e:
        raise UserError(str(e)) from None
    generate = load_generator(
        hf_dir=args.executor_hf_dir,
        run_dir=args.lm_run_dir,
        recipe=args.lm_recipe,
        max_new_tokens=args.executor_max_new_tokens,
        batch=True,
    )
    executor = TextExecutor(generate, task, sandbox)
    val_idx, test_idx = formats.split_indices(len(task), args.seed)
    desc = {
        "task": f"{args.format}:{path.resolve()}",
        "executor": "text",
        "executor_model": str(Path(args.executor_hf_dir or args.lm_run_dir).resolve()),
        "executor_max_new_tokens": args.executor_max_new_tokens,
    }
    return executor, executor.problems(val_idx), executor.problems(test_idx), desc


def _text_search(args, run_dir: Path, load_generator) -> int:
    """``search --format FMT --executor text``: the search on a benchmark task file."""
    from jaxlab.core.errors import UserError

    try:
        executor, val, test, desc = _text_executor(args, load_generator)
        optimizer, opt_desc = _optimizer(args, load_generator)
        config = _search_config(args)
        print(f"{'round':>5} {'score':>6} {'parent':>6}  edit")
        state = search.run_search(
            program.initial_workflow(),
            executor,
            val,
            optimizer,
            config,
            run_dir=run_dir,
            describe={**desc, **opt_desc, "experience": not args.no_experience},
            on_round=_print_round,
        )
    except (program.WorkflowError, tasks.TaskFileError, search.SearchStateError) as e:
        raise UserError(str(e), f"the search state in {run_dir} is unchanged") from None
    return _finish(args, run_dir, state, executor, val, test)


def _search_config(args) -> search.SearchConfig:
    """The search settings of the command line."""
    return search.SearchConfig(
        max_rounds=args.rounds,
        validation_runs=args.validation_runs,
        seed=args.seed,
        check_convergence=not args.no_convergence,
        max_expansion_tries=args.expansion_tries,
    )


def _print_round(rec, _state) -> None:
    parent = "-" if rec["parent"] is None else str(rec["parent"])
    print(f"{rec['round']:>5} {rec['score']:>6.3f} {parent:>6}  {rec['modification']}")
    sys.stdout.flush()


def _search_locked(args, run_dir: Path, load_lm, load_generator=None) -> int:
    from jaxlab.core.errors import UserError

    _check_new_or_search_dir(run_dir)
    if args.format is not None or args.executor == "text":
        return _text_search(args, run_dir, load_generator)
    try:
        if args.task == "arithmetic":
            problems = tasks.make_problems(args.seed, args.num_problems, max_terms=args.max_terms)
        else:
            problems = tasks.load_task_file(args.task)
        val, test = tasks.split(problems, args.seed)
        _check_split(val, test, args)
        executor, desc = _executor(args, load_lm)
        config = _search_config(args)
        optimizer, opt_desc = _optimizer(args, load_generator)
        print(f"{'round':>5} {'score':>6} {'parent':>6}  edit")
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
                **opt_desc,
                "experience": not args.no_experience,
            },
            on_round=_print_round,
        )
    except (
        program.WorkflowError,
        tasks.TaskFileError,
        ProgrammerError,
        search.SearchStateError,
    ) as e:
        raise UserError(str(e), f"the search state in {run_dir} is unchanged") from None
    return _finish(args, run_dir, state, executor, val, test)


def _finish(args, run_dir: Path, state, executor, val, test) -> int:
    """Evaluates the best workflow on the test part; writes the code, plot and summary."""
    from jaxlab.core import atomic, json_files

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
        "best_cost": best.get("cost", {}),
        "best_test_cost": test_eval.cost,
        "front": [
            {"round": r["round"], "score": r["score"], "calls": r.get("cost", {}).get("calls")}
            for r in state.front()
        ],
        "optimizer_usage": state.optimizer_usage(),
        "rejections": state.rejection_counts(),
        "val_size": len(val),
        "test_size": len(test),
    }
    json_files.write(run_dir / "summary.json", summary)
    print(f"stopped: {state.stopped}")
    print(workflow.to_code(), end="")
    print(json_files.dumps(summary, where="summary"))
    seconds = sum(t["round_s"] for t in state.timing.values())
    print(f"wall time of the rounds run: {seconds:.2f} s")
    return 0


def show_main(run_dir: str | Path) -> int:
    """``jaxlab workflows show RUN``: the best workflow as code, its scores and cost, the
    score/cost front, the optimizer's usage and rejections, and the wall time per round."""
    from jaxlab.core.errors import UserError

    try:
        state = search.load_state(run_dir)
    except search.SearchStateError as e:
        raise UserError(str(e)) from None
    if state is None or not state.rounds:
        raise UserError(
            f"{run_dir}: no search there (no {search.STATE_FILE})",
            "run `jaxlab workflows search --run-dir DIR` first",
        )
    best = state.best()
    cost = best.get("cost", {})
    scores = ", ".join(f"{s:.4f}" for s in best["scores"])
    print(f"# best: round {best['round']} of {len(state.rounds)} ({state.stopped})")
    print(f"# validation {best['score']:.4f} (runs: {scores}; std {best['std']:.4f})")
    print(
        f"# cost per problem: {cost.get('calls', 0):.2f} calls, "
        f"{cost.get('prompt_tokens', 0):.1f} prompt tokens, "
        f"{cost.get('generated_tokens', 0):.1f} generated tokens"
    )
    print(_workflow_of(best).to_code(), end="")
    print("# score/cost front (round: score @ calls per problem):")
    for r in state.front():
        print(f"#   {r['round']}: {r['score']:.4f} @ {r.get('cost', {}).get('calls', 0):.2f}")
    usage = state.optimizer_usage()
    print(
        f"# optimizer: {usage['calls']} calls, {usage['prompt_tokens']} prompt tokens, "
        f"{usage['generated_tokens']} generated tokens; rejected: {state.rejection_counts()}"
    )
    seconds = [state.timing.get(str(r["round"]), {}).get("round_s") for r in state.rounds]
    known = [t for t in seconds if t is not None]
    if known:
        print(f"# wall time: {sum(known):.2f} s over {len(known)} rounds")
    return 0


def _workflow_of(record: dict[str, Any]) -> program.Workflow:
    return program.Workflow.from_json(record["workflow"])


def main(
    argv: Sequence[str],
    *,
    load_lm: Callable[[str, str], Any] | None = None,
    load_generator: Callable[..., Any] | None = None,
) -> int:
    """``jaxlab workflows search|show ...`` (module docstring).

    Args:
        argv: the arguments after ``workflows``.
        load_lm: ``(recipe, run_dir) -> jaxlab.workflows.lm_executor.TextLM`` for
            ``--executor lm``.
        load_generator: ``(hf_dir=, run_dir=, recipe=, max_new_tokens=) -> generator`` for
            ``--optimizer lm`` (:mod:`jaxlab.workflows.lm_optimizer`); with
            ``--optimizer-constrained`` it is also given ``constrained=True``.
    """
    args = build_parser().parse_args(list(argv))
    if args.action == "search":
        return search_main(args, load_lm, load_generator)
    if args.action == "show":
        return show_main(args.run_dir)
    return 2

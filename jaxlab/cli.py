"""The ``jaxlab`` command line: list, config, train, eval, bench, and family sub-commands.

Errors a user can cause (a bad key, value, preset, recipe, run directory or checkpoint) print one
line starting with ``error:`` and a ``hint:`` line, and exit with status 2; never a traceback. A
full disk prints one ``error:`` line naming the file, and a ``hint:`` naming what was kept (exit
1); Ctrl-C or SIGTERM one line naming what was kept (exit 130 / 143). Files are written whole or
not at all (:mod:`jaxlab.core.atomic`), so what was kept is never half-written.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import runpy
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Extra sub-commands contributed by families: name -> ("module:function", help). The function
#: takes the remaining argv and returns an exit status; the module's ``build_parser()`` returns the
#: family's own parser, which reads everything after the name (``--help`` included).
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "causal": ("jaxlab.causal.cli:main", "causal discovery under selection bias (CDIS) from a CSV"),
    "data": (
        "jaxlab.commands.data:main",
        "corpus files: `data prepare IN OUT --tokenizer DIR` tokenizes text for data.source",
    ),
    "export-hf": (
        "jaxlab.commands.export_hf:main",
        "write a decoder LM run as a Hugging Face Llama directory",
    ),
    "generate": ("jaxlab.commands.generate:main", "sample text from a trained decoder LM run"),
    "levels": (
        "jaxlab.envs.kinetix.cli:main",
        "Kinetix level files: show, rollout, render; the level library",
    ),
    "studio": (
        "jaxlab.studio.cli:main",
        "Kinetix level editor and player in the browser (a local web server)",
    ),
    "workflows": ("jaxlab.commands.workflows:main", "AFlow: MCTS search over agentic workflows"),
}


from jaxlab.core import json_files  # noqa: E402

# UserError is re-exported for commands.
from jaxlab.core.errors import Terminated, UserError, disk_full, keeping  # noqa: E402


def _user_errors() -> tuple[type[BaseException], ...]:
    from jaxlab.core.checkpoint import IncompatibleCheckpointError
    from jaxlab.core.config import ConfigError
    from jaxlab.core.loop import NonFiniteLossError

    return (
        UserError,
        ConfigError,
        IncompatibleCheckpointError,
        NonFiniteLossError,
        FileNotFoundError,
        # Every other ValueError reaching the command line comes from a check of the
        # configuration or of an input (a batch the mesh does not divide, a level file, a damaged
        # checkpoint, a locked run directory): one line, not a traceback (JAXLAB_TRACEBACK=1
        # shows where it was raised).
        ValueError,
    )


def _hint_for(e: BaseException) -> str:
    from jaxlab.core.checkpoint import IncompatibleCheckpointError
    from jaxlab.core.config import ConfigError
    from jaxlab.core.loop import NonFiniteLossError

    if getattr(e, "hint", None) and not isinstance(e, ConfigError):
        return e.hint
    if isinstance(e, ConfigError):
        return "see `jaxlab config RECIPE` for every key and its current value"
    if isinstance(e, IncompatibleCheckpointError):
        return (
            "pass --run-dir NEW_DIR to start a separate run; a float hyper-parameter such as a "
            "learning rate may change on resume with --allow-change KEY"
        )
    from jaxlab.core.run import RunNotFoundError

    if isinstance(e, RunNotFoundError):
        return "train first (jaxlab train RECIPE --run-dir DIR) or pass the directory of a run"
    if isinstance(e, NonFiniteLossError):
        return _non_finite_hint(e)
    if isinstance(e, ValueError):
        return "set JAXLAB_TRACEBACK=1 to see where it was raised"
    return "see `jaxlab --help`"


def _non_finite_hint(e: BaseException) -> str:
    """What to run after a non-finite stop: resume from the last healthy checkpoint (or start
    over in the same directory) with a tenth of the learning rate; the command itself when
    ``cmd_train`` attached it (``e.rerun``)."""
    lr = "a tenth of the learning rate" if e.lr_values else "a lower learning rate"
    if e.healthy_checkpoint is not None:
        what = f"resume from the last healthy checkpoint (step {e.healthy_checkpoint}) with {lr}"
    elif e.last_checkpoint is not None:
        what = (
            f"no checkpoint is healthy: start over with {lr} (the checkpoints are set aside "
            "as <step>.abandoned, not deleted)"
        )
    else:
        what = f"no checkpoint exists: rerun from step 0 with {lr}"
    rerun = getattr(e, "rerun", None)
    if rerun is None:
        keys = " ".join(f"{k}=SMALLER" for k in e.lr_values) or "a lower learning rate"
        step = e.healthy_checkpoint if e.healthy_checkpoint is not None else 0
        rerun = f"the same command with {keys}" + (
            f" --resume-from {step}" if e.last_checkpoint is not None else ""
        )
    return f"{what}: {rerun}; or check the data"


def _rerun_command(args: argparse.Namespace, run_dir: Path, e: BaseException) -> str:
    """The ``jaxlab train`` command that follows the non-finite hint: the same recipe, preset,
    TPU config, run directory and overrides, each learning rate a tenth, resuming from the last
    healthy checkpoint (``--allow-change`` for the rates) or from 0 when none is healthy."""
    import shlex

    cmd = ["jaxlab", "train", args.recipe]
    if args.preset:
        cmd += ["--preset", args.preset]
    if args.tpu_config:
        cmd += ["--tpu-config", args.tpu_config]
    cmd += ["--run-dir", str(run_dir)]
    cmd += [o for o in args.overrides if o.split("=", 1)[0] not in e.lr_values]
    cmd += [f"{k}={v / 10!r}" for k, v in e.lr_values.items()]
    if e.last_checkpoint is not None:
        start = e.healthy_checkpoint or 0
        if start:
            for k in dict.fromkeys([*args.allow_change, *e.lr_values]):
                cmd += ["--allow-change", k]
        cmd += ["--resume-from", str(start)]
    return shlex.join(cmd)


def _default_run_dir(recipe: str, preset: str | None) -> Path:
    return Path("runs") / f"{recipe}-{preset or 'default'}"


def cmd_list(args: argparse.Namespace) -> int:
    from jaxlab.core import recipe as recipe_lib

    for name in recipe_lib.names():
        r = recipe_lib.get(name)
        presets = ", ".join(r.presets()) or "-"
        print(f"{name:16s} {r.description}\n{'':16s} presets: {presets}")
    for name, (_, help_) in sorted(EXTRA_COMMANDS.items()):
        print(f"{'(command) ' + name:16s} {help_}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from jaxlab.core import config as config_lib
    from jaxlab.core import recipe as recipe_lib

    r = recipe_lib.get(args.recipe)
    cfg = r.config(args.preset, args.overrides)
    print(config_lib.to_yaml(cfg), end="")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from jaxlab.core import loop
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.sharding import maybe_initialize_distributed
    from jaxlab.core.tracking import json_row

    maybe_initialize_distributed()
    r = recipe_lib.get(args.recipe)
    if args.tpu_config:
        from jaxlab.core import tpu_config

        tpu_run = tpu_config.load(args.tpu_config, tuple(args.overrides))
        if tpu_run.recipe != r.name:
            raise UserError(f"{args.tpu_config} is for recipe {tpu_run.recipe}, not {r.name}")
        cfg = tpu_run.config
    else:
        cfg = r.config(args.preset, args.overrides)
    run_dir = (
        Path(args.run_dir)
        if args.run_dir
        else _default_run_dir(r.name, args.preset or r.default_preset)
    )
    print(
        f"jaxlab: training {r.name} (preset {args.preset or r.default_preset or 'default'}) "
        f"in {run_dir}",
        file=sys.stderr,
    )
    print("jaxlab: compiling the train step...", file=sys.stderr)
    try:
        with keeping(lambda: _checkpoints_kept(run_dir)):
            result = loop.run(
                r,
                cfg,
                run_dir,
                allow_change=tuple(args.allow_change),
                resume_from=args.resume_from,
            )
    except loop.NonFiniteLossError as e:
        e.rerun = _rerun_command(args, run_dir, e)
        raise
    summary = {"step": result.step, "interrupted": result.interrupted}
    summary.update({k: float(v) for k, v in result.metrics.items()})
    summary.update(
        {f"eval/{k}": v for k, v in result.eval_metrics.items() if isinstance(v, int | float)}
    )
    print(json_files.dumps(json_row(summary), where="the training summary"))
    if result.interrupted:
        print(
            f"jaxlab: interrupted at step {result.step}; checkpoint saved, run the same command "
            "to resume",
            file=sys.stderr,
        )
    return 0


def _checkpoints_kept(run_dir: Path) -> str:
    """What a stopped ``train`` leaves: its saved checkpoints (a checkpoint is written whole or
    not at all), and how to continue."""
    steps = sorted(
        int(p.name) for p in (run_dir / "checkpoints").glob("*") if p.is_dir() and p.name.isdigit()
    )
    if not steps:
        return f"no checkpoint was saved in {run_dir}"
    return (
        f"{run_dir} keeps its checkpoints (newest: step {steps[-1]}); run the same command to "
        "resume from it"
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core import run as run_lib
    from jaxlab.core.tracking import json_row

    r = recipe_lib.get(args.recipe)
    run_dir = Path(args.run_dir)
    _, cfg = run_lib.read_run(run_dir, r)
    if r.eval_main is not None:
        with keeping(f"the run's checkpoints in {run_dir} are unchanged (evaluation reads them)"):
            return int(r.eval_main(cfg, run_dir, list(args.extra)) or 0)
    if args.extra:
        raise UserError(f"unexpected arguments {args.extra} for `jaxlab eval {r.name}`")
    run = run_lib.open_run(run_dir, recipe=r)
    if run.parts.evaluate is None:
        raise UserError(f"recipe {r.name} has no evaluation")
    metrics = run.parts.evaluate(run.state)
    row = json_row({"step": run.step, **dict(metrics)})
    print(json_files.dumps(row, where="the evaluation"))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core import sweep as sweep_lib

    r = recipe_lib.get(args.recipe)
    base = r.config(args.preset)
    axes = sweep_lib.parse_axes(r, base, args.overrides)
    out = Path(args.run_dir) if args.run_dir else Path("runs") / f"sweep-{r.name}"
    traced = [k for k in axes if k in r.traced]
    static = [k for k in axes if k not in r.traced]
    print(
        f"jaxlab: sweep {r.name} in {out}: vmapped over {traced + ['seed'] if traced else ['seed']}"
        + (f", a sequence of runs over {static}" if static else ""),
        file=sys.stderr,
    )
    with keeping(lambda: _sweep_kept(out)):
        result = sweep_lib.sweep(r, base, axes, seeds=args.seeds, out_dir=out)
    print(sweep_lib.format_table(result.summary, list(axes)), end="")
    print(
        f"jaxlab: {len(result.rows)} runs, {result.compiles} compiled programs; "
        f"table in {out / 'table.txt'}, rows in {out / 'sweep.jsonl'}",
        file=sys.stderr,
    )
    return 0


def _sweep_kept(out: Path) -> str:
    """What a stopped sweep leaves: the run directory of each point and seed that finished (its
    checkpoint written whole), and no table."""
    if not out.is_dir():
        return "nothing was written"
    done = [c for c in out.rglob("checkpoints") if any(s.name.isdigit() for s in c.iterdir())]
    if not done:
        return f"{out} holds no finished run; remove it or sweep into a new --run-dir"
    return (
        f"{out} keeps {len(done)} finished run(s) (a point and seed each) but no table; sweep "
        "again into a new --run-dir"
    )


def checkout_root() -> Path | None:
    """The source checkout this ``jaxlab`` was imported from (``benchmarks/`` beside ``jaxlab/``),
    or None for an installed copy: benchmarks are not shipped in the package."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "benchmarks" / "harness.py").is_file() else None


def cmd_bench(args: argparse.Namespace) -> int:
    root = checkout_root()
    if root is None:
        raise UserError(
            "benchmarks run from a source checkout, and this jaxlab is an installed copy",
            "from a clone of the repository, run `python -m benchmarks.bench_AREA` at its root "
            "(or `jaxlab bench AREA` with the clone installed: pip install -e .)",
        )
    areas = sorted(p.stem[len("bench_") :] for p in (root / "benchmarks").glob("bench_*.py"))
    if args.area not in areas:
        from jaxlab.core.config import suggest

        raise UserError(
            f"no benchmark named '{args.area}' (areas: {', '.join(areas) or 'none'})",
            suggest(args.area, areas) or "pick one of the areas listed",
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = f"benchmarks.bench_{args.area}"
    sys.argv = [module, *args.extra]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxlab",
        description="jaxlab: pure-JAX research methods on one shared training core.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("list", help="list recipes and their presets")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("config", help="print a recipe's resolved config as YAML")
    s.add_argument("recipe")
    s.add_argument("--preset", default=None)
    s.add_argument("overrides", nargs="*", metavar="key=value")
    s.set_defaults(fn=cmd_config)

    s = sub.add_parser(
        "train",
        help="train a recipe (resumes if the run directory has a checkpoint)",
        description="Train RECIPE. Dotted overrides change any config field, e.g. "
        "`jaxlab train lm-tiny optim.lr=1e-3 loop.total_steps=200`.",
    )
    s.add_argument("recipe")
    s.add_argument("--preset", default=None, help="a preset name (see `jaxlab list`)")
    s.add_argument("--run-dir", default=None, help="run directory (default runs/RECIPE-PRESET)")
    s.add_argument("--tpu-config", default=None, help="a tpu_configs/*.yaml file (mesh, batch)")
    s.add_argument(
        "--allow-change",
        action="append",
        default=[],
        metavar="KEY",
        help="on resume, accept a changed float hyper-parameter KEY (e.g. optim.lr); repeatable",
    )
    s.add_argument(
        "--resume-from",
        type=int,
        default=None,
        metavar="STEP",
        help="resume from checkpoint STEP instead of the newest (0: start over); once the run "
        "has made a finite step, newer checkpoints are set aside as <step>.abandoned",
    )
    s.add_argument("overrides", nargs="*", metavar="key=value")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser(
        "eval",
        help="evaluate the latest checkpoint of a run (`eval --hf-dir DIR [--data FILE]`: "
        "perplexity of a Hugging Face model directory)",
    )
    s.add_argument("recipe")
    s.add_argument("--run-dir", required=True)
    s.set_defaults(fn=cmd_eval, extra=[])  # recipe-specific options are passed through

    s = sub.add_parser(
        "sweep",
        help="sweep config values and seeds (traced hyper-parameters and seeds in one vmapped "
        "program, other keys as a sequence of runs)",
        description="Sweep RECIPE over key=v1,v2,... axes and --seeds, e.g. "
        "`jaxlab sweep lm-tiny --preset tiny optim.lr=1e-3,3e-3 --seeds 3`.",
    )
    s.add_argument("recipe")
    s.add_argument("--preset", default=None)
    s.add_argument("--seeds", type=int, default=1, help="seeds per point (from the config's seed)")
    s.add_argument(
        "--run-dir",
        default=None,
        help="sweep directory, a run per point (default runs/sweep-RECIPE)",
    )
    s.add_argument("--out", dest="run_dir", help=argparse.SUPPRESS)  # deprecated spelling
    s.add_argument("overrides", nargs="*", metavar="key=v1,v2")
    s.set_defaults(fn=cmd_sweep)

    s = sub.add_parser(
        "bench",
        help="run the benchmark benchmarks/bench_AREA.py of a source checkout (JSON lines)",
    )
    s.add_argument("area")
    s.add_argument("extra", nargs=argparse.REMAINDER)
    s.set_defaults(fn=cmd_bench)

    for name, (target, help_) in sorted(EXTRA_COMMANDS.items()):
        s = sub.add_parser(name, help=help_, add_help=False)
        s.add_argument("extra", nargs=argparse.REMAINDER)
        s.set_defaults(fn=_extra(target))
    return p


def _extra(target: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        mod, fn = target.split(":")
        return int(getattr(importlib.import_module(mod), fn)(list(args.extra)) or 0)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] in EXTRA_COMMANDS:
        # A family's own parser reads all that follows its name, so `--help` reaches it.
        target = EXTRA_COMMANDS[argv[0]][0]
        args = argparse.Namespace(command=argv[0], fn=_extra(target), extra=argv[1:])
        return _dispatch(args)
    if argv[:1] == ["eval"] and any(a.split("=", 1)[0] == "--hf-dir" for a in argv[1:]):
        # `jaxlab eval --hf-dir DIR`: a Hugging Face model directory, no recipe or run.
        target = "jaxlab.commands.eval_hf:main"
        args = argparse.Namespace(command="eval", fn=_extra(target), extra=argv[1:])
        return _dispatch(args)
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command == "eval":
        args.extra, unknown = unknown, []
    if unknown:
        # key=value overrides may come after options (`train R --preset P a.b=1`).
        stray = [u for u in unknown if u.startswith("-") or "=" not in u]
        if stray or not hasattr(args, "overrides"):
            parser.error(f"unrecognized arguments: {' '.join(stray or unknown)}")
        args.overrides = list(args.overrides) + unknown
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    return _dispatch(args)


#: ``JAXLAB_VERBOSE_XLA=1`` keeps XLA's own log lines (its slow-compile alarms) on the terminal.
VERBOSE_XLA_ENV = "JAXLAB_VERBOSE_XLA"


def quiet_xla_logs(environ: Mapping[str, str] | None = None) -> bool:
    """Hides XLA's own C++ log lines below FATAL for the rest of the process: its slow-compile
    alarms ("Constant folding an instruction is taking > 1s", "Very slow compile?") are logged as
    errors although the compile goes on and succeeds; the CLI says "compiling" itself instead.
    Nothing changes when ``JAXLAB_VERBOSE_XLA`` is set to anything but ``0`` or when
    ``TF_CPP_MIN_LOG_LEVEL`` is set to anything but ``1``, the default ``import jax`` sets (the
    user's choice wins). Returns whether the logs were hidden.
    """
    environ = os.environ if environ is None else environ
    if environ.get(VERBOSE_XLA_ENV, "0") not in ("", "0"):
        return False
    if environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1":
        return False
    try:  # the setter jax's own `jax_logging_level` option calls, without its Python handlers
        from jax._src.lib import utils as jaxlib_utils

        jaxlib_utils.absl_set_min_log_level(3)
    except (ImportError, AttributeError):  # pragma: no cover - a jaxlib without it
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # read when XLA first logs
    return True


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args.fn``; a user error prints ``error:`` and ``hint:`` lines (exit 2),
    a full disk one ``error:`` line naming the file and what was kept (exit 1), Ctrl-C or SIGTERM
    one line saying what was kept (exit 130, or 143 for SIGTERM); never a traceback. XLA's own
    log lines are hidden (:func:`quiet_xla_logs`)."""
    quiet_xla_logs()
    with _sigterm_as_interrupt():
        try:
            return args.fn(args)
        except KeyboardInterrupt as e:
            if os.environ.get("JAXLAB_TRACEBACK"):
                raise
            what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
            print(f"jaxlab: {what}; {_kept(e)}", file=sys.stderr)
            return 128 + (Terminated.signum if isinstance(e, Terminated) else 2)
        except Exception as e:
            if os.environ.get("JAXLAB_TRACEBACK"):
                raise
            full = disk_full(e)
            if full is not None:
                where = f" writing {full.filename}" if full.filename else ""
                print(f"error: no space left on the device{where}", file=sys.stderr)
                print(f"hint: free some space and run the same command again; {_kept(e)}",
                      file=sys.stderr)  # fmt: skip
                return 1
            if not isinstance(e, _user_errors()):
                raise
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"error: {msg}", file=sys.stderr)
            print(f"hint: {_hint_for(e)}", file=sys.stderr)
            return 2


def _kept(e: BaseException) -> str:
    """What the command kept (:func:`jaxlab.core.errors.keeping`), as the end of a sentence."""
    kept = getattr(e, "kept", None)
    return kept or "nothing was written"


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) while a command runs, so a
    killed command ends like an interrupted one (``train`` saves first: its loop takes both
    signals itself); the previous handler is put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())

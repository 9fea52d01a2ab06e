"""Sweeps for every recipe: ``jaxlab sweep RECIPE key=v1,v2,... [--seeds N]``.

Points are the product of the swept values and the seeds. Values of the recipe's *traced*
hyper-parameters (:attr:`jaxlab.core.recipe.Recipe.traced`) and seeds run as **one vmapped
program** (one compilation for all of them): each point's initial state is the recipe's ``init``
with its own key and its ``hparams`` replaced, each point gets the batches of its own seed's data
iterator, and the train step is ``vmap``-ed over the points inside the same ``lax.scan`` of K steps
per call as the loop. Other (static) keys change shapes or the compiled program, so each of their
values is a separate group, run in sequence.

Every point gets a run directory (``config.yaml``, ``recipe.txt``, ``metrics.jsonl``, a
checkpoint) that ``jaxlab eval`` / :func:`jaxlab.core.run.open_run` opens like any run; the sweep
writes ``sweep.jsonl`` (one row per point) and prints a table of the final metrics with the mean
and standard deviation over seeds. The sweep folder and every point's run directory are held under
:class:`jaxlab.core.run_lock.RunLock` while the sweep runs: a second sweep, or a ``train`` resuming
a point, is refused with the point and the holder's pid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import atomic, json_files, run_lock
from jaxlab.core import config as config_lib
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Recipe
from jaxlab.core.tracking import Tracker


@dataclasses.dataclass
class SweepResult:
    """Per-point rows (swept values, seed, final metrics, run directory), the per-group summary
    over seeds, and how many train-step programs were compiled."""

    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    compiles: int
    states: list[Any]


def parse_axes(recipe: Recipe, base: Any, items: Sequence[str]) -> dict[str, list[Any]]:
    """``["optim.lr=1e-3,3e-3", "rewire=none,jdr"] -> {"optim.lr": [0.001, 0.003], ...}``; each
    value typed and validated as an override of ``base`` (a ConfigError names key and value)."""
    axes: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(item, None, "a sweep axis of the form key=v1,v2,...")
        key, raw = item.split("=", 1)
        recipe_lib.config_value(base, key)  # the key exists
        values = []
        for text in raw.split(","):
            parsed = config_lib.parse_overrides(type(base), [f"{key}={text.strip()}"])
            node: Any = parsed
            for part in key.split("."):
                node = node[part]
            try:  # validates type and range
                config_lib.replace(base, **{key: node})
            except (ConfigError, TypeError, ValueError) as e:
                if isinstance(e, ConfigError) and f"'{key}'" in str(e):
                    raise
                raise ConfigError(key, text.strip(), f"a valid value ({e})") from None
            values.append(node)
        if key in axes:
            raise ConfigError(key, raw, "each key swept once")
        axes[key] = values
    return axes


def _point_name(values: Mapping[str, Any], seed: int) -> str:
    parts = [f"{k}={v}" for k, v in values.items()]
    safe = ",".join(parts).replace("/", "_") or "base"
    return f"{safe}/seed{seed}"


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _multi_step(train_step: Any, state: Any, batches: Any, n: int) -> Any:
    """``n`` steps of ``train_step`` vmapped over the points (the sweep's one program)."""
    step = jax.vmap(train_step)
    if batches is None:
        return jax.lax.scan(lambda s, _: step(s, None), state, None, length=n)
    return jax.lax.scan(step, state, batches)


def _init_points(recipe: Recipe, cfg: Any, parts: Any, points: list[tuple[dict[str, Any], int]]):
    """The vmapped ``init`` of every point and its inputs: ``(fn, keys [P, 2], hparams {k: [P]})``."""
    defaults = recipe_lib.hparams_of(recipe, cfg)
    keys = jnp.stack([jax.random.PRNGKey(seed) for _, seed in points])
    hps = {
        k: jnp.asarray([float(vals.get(k, defaults[k])) for vals, _ in points], jnp.float32)
        for k in recipe.traced
    }

    def init_point(key: jax.Array, hp: dict[str, jax.Array]) -> Any:
        return recipe_lib.with_hparams(parts.init(key), hp)

    return jax.vmap(init_point), keys, hps


def lower_program(
    recipe: Recipe, cfg: Any, axes: Mapping[str, Sequence[float]], seeds: Sequence[int]
) -> jax.stages.Lowered:
    """The sweep's one program (one step, vmapped over every traced value x seed) lowered from
    abstract values without running or compiling it: what ``jaxlab sweep`` would compile.

    Raises:
      ConfigError: a key of ``axes`` that is not one of the recipe's traced hyper-parameters.
    """
    for key in axes:
        if key not in recipe.traced:
            raise ConfigError(key, None, "one of the traced keys " + ", ".join(recipe.traced))
    parts = run_lib.build(recipe, cfg, jax.devices()[:1])
    points = [
        (dict(zip(axes, tv, strict=True)), seed)
        for tv in itertools.product(*axes.values())
        for seed in seeds
    ]
    init, keys, hps = _init_points(recipe, cfg, parts, points)
    states = jax.eval_shape(init, keys, hps)
    batches = None
    if parts.abstract_batch is not None:
        batches = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((1, len(points), *x.shape), x.dtype),
            parts.abstract_batch,
        )
    multi = functools.partial(_multi_step, parts.train_step)
    return jax.jit(lambda s, b: multi(s, b, 1)).lower(states, batches)


def _run_group(
    recipe: Recipe,
    cfg: Any,
    points: list[tuple[dict[str, Any], int]],
    out_dir: Path,
    log: Any,
) -> tuple[list[dict[str, Any]], int, list[Any]]:
    """One vmapped program for ``points`` (traced values, seed) sharing the static config."""
    devices = jax.devices()[:1]
    parts = run_lib.build(recipe, cfg, devices)
    init, keys, hps = _init_points(recipe, cfg, parts, points)
    states = jax.jit(init)(keys, hps)
    if recipe.finetune is not None:  # a fresh start from another run, as the loop does
        tuned = [
            recipe.finetune(
                config_lib.replace(cfg, seed=seed, **vals),
                jax.tree.map(lambda x, i=i: x[i], states),
            )
            for i, (vals, seed) in enumerate(points)
        ]
        states = jax.tree.map(lambda *xs: jnp.stack(xs), *tuned)

    seeds = sorted({seed for _, seed in points})
    iters: dict[int, Any] = {}
    if parts.data is not None:
        for s in seeds:
            iters[s] = run_lib.build(recipe, config_lib.replace(cfg, seed=s), devices).data()

    multi = functools.partial(_multi_step, parts.train_step)
    compiled: dict[int, Any] = {}
    loop = cfg.loop
    step, last = 0, {}
    while step < loop.total_steps:
        n = min(loop.steps_per_call, loop.total_steps - step)
        if n not in compiled:
            compiled[n] = jax.jit(lambda s, b, n=n: multi(s, b, n), donate_argnums=0)
        batches = None
        if iters:
            per_seed = {s: _stack([next(it) for _ in range(n)]) for s, it in iters.items()}
            batches = _stack([per_seed[seed] for _, seed in points])  # [P, n, ...]
            batches = jax.tree.map(lambda x: np.swapaxes(x, 0, 1), batches)  # [n, P, ...]
        states, metrics = compiled[n](states, batches)
        step += n
        last = jax.tree.map(lambda x: np.asarray(x)[-1], jax.device_get(metrics))
        print(f"sweep: step {step}/{loop.total_steps} ({len(points)} points)", file=log)

    rows, point_states = [], []
    for i, (vals, seed) in enumerate(points):
        cfg_p = config_lib.replace(cfg, seed=seed, **vals)
        state_p = jax.tree.map(lambda x, i=i: x[i], states)
        row = {k: float(np.asarray(v)[i]) for k, v in last.items() if np.ndim(v) >= 1}
        if parts.evaluate is not None:
            ev = run_lib.build(recipe, cfg_p, devices).evaluate(state_p)
            row.update({f"eval/{k}": float(v) for k, v in ev.items() if np.isscalar(v)})
        run_dir = out_dir / _point_name(vals, seed)
        _write_point(recipe, cfg_p, run_dir, step, state_p, iters.get(seed), row)
        rows.append({**vals, "seed": seed, **row, "run_dir": str(run_dir)})
        point_states.append(state_p)
    return rows, len(compiled), point_states


def _write_point(
    recipe: Recipe, cfg: Any, run_dir: Path, step: int, state: Any, data_it: Any, row: dict
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(run_dir / run_lib.CONFIG_FILE, config_lib.to_yaml(cfg))
    atomic.write_text(run_dir / run_lib.RECIPE_FILE, recipe.name + "\n")
    tracker = Tracker(run_dir)
    tracker.log(step, {k: v for k, v in row.items() if not k.startswith("eval/")})
    tracker.log(step, {k[5:]: v for k, v in row.items() if k.startswith("eval/")}, prefix="eval/")
    tracker.close()
    ck = Checkpointer(run_dir / "checkpoints", cfg, async_save=False)
    try:
        ck.save(step, state, data_it, force=True)
    finally:
        ck.close()


def summarize(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds of every metric, per combination of swept values."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for combo, rs in groups.items():
        metrics = [k for k in rs[0] if k not in (*keys, "seed", "run_dir")]
        entry: dict[str, Any] = dict(zip(keys, combo, strict=True))
        entry["seeds"] = len(rs)
        for m in metrics:
            vals = np.asarray([r[m] for r in rs], np.float64)
            entry[m] = float(np.mean(vals))
            entry[f"{m}_std"] = float(np.std(vals))
        out.append(entry)
    return out


def sweep(
    recipe: Recipe,
    base: Any,
    axes: Mapping[str, Sequence[Any]],
    *,
    seeds: int | Sequence[int] = 1,
    out_dir: str | Path,
    log: Any = sys.stderr,
) -> SweepResult:
    """Runs the sweep (see the module docstring); ``seeds`` is a count (``base.seed`` onwards) or
    a list of seeds. Nothing is written before every key and value is validated."""
    out_dir = Path(out_dir)
    for key, values in axes.items():
        recipe_lib.config_value(base, key)
        if key == "seed":
            raise ConfigError(key, list(values), "seeds given with --seeds N, not as a swept key")
        if not values:
            raise ConfigError(key, list(values), "at least one value")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(key, list(values), "each value once")
        for v in values:
            config_lib.replace(base, **{key: v})
    seed_list = [base.seed + i for i in range(seeds)] if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ConfigError("--seeds", seeds, "at least one seed")
    traced = {k: v for k, v in axes.items() if k in recipe.traced}
    static = {k: v for k, v in axes.items() if k not in recipe.traced}
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--run-dir", str(out_dir), "a directory (this path is a file)")
    with run_lock.RunLock(out_dir):  # one sweep per folder; a second is refused by pid
        if any(p.name != run_lock.LOCK_NAME for p in out_dir.iterdir()):
            raise ConfigError(
                "--run-dir", str(out_dir), "a new or empty directory (nothing is overwritten)"
            )
        names = [
            _point_name(v, seed) for _, pts in _groups(seed_list, traced, static) for v, seed in pts
        ]
        with point_locks(out_dir, names):
            return _sweep_groups(recipe, base, axes, seed_list, traced, static, out_dir, log)


def _groups(
    seed_list: list[int], traced: Mapping[str, Sequence[Any]], static: Mapping[str, Sequence[Any]]
) -> list[tuple[dict[str, Any], list[tuple[dict[str, Any], int]]]]:
    """``(static values, [(point values, seed), ...])`` for each group of one vmapped program."""
    out = []
    for static_vals in itertools.product(*static.values()) if static else [()]:
        svals = dict(zip(static, static_vals, strict=True))
        points = [
            ({**svals, **dict(zip(traced, tv, strict=True))}, seed)
            for tv in (itertools.product(*traced.values()) if traced else [()])
            for seed in seed_list
        ]
        out.append((svals, points))
    return out


@contextlib.contextmanager
def point_locks(out_dir: Path, names: Sequence[str]) -> Iterator[None]:
    """Holds the :class:`jaxlab.core.run_lock.RunLock` of every point's run directory
    ``out_dir/name`` for the block, so no other run (a second sweep, a ``train`` resuming a
    point) writes a point while the sweep does.

    Raises:
      RunLockedError: a point is held by another process (names the point and the holder).
    """
    with contextlib.ExitStack() as stack:
        for name in names:
            try:
                stack.enter_context(run_lock.RunLock(out_dir / name))
            except run_lock.RunLockedError as e:
                raise run_lock.RunLockedError(f"sweep point {name}: {e}", e.hint) from None
        yield


def _sweep_groups(
    recipe: Recipe,
    base: Any,
    axes: Mapping[str, Sequence[Any]],
    seed_list: list[int],
    traced: Mapping[str, Sequence[Any]],
    static: Mapping[str, Sequence[Any]],
    out_dir: Path,
    log: Any,
) -> SweepResult:
    """Every group of static values in turn, each one vmapped program; then the summary files."""
    for key in static:
        print(
            f"sweep: {key} is not a traced hyper-parameter of {recipe.name} (traced: "
            f"{', '.join(recipe.traced) or 'none'}); each of its values runs as its own program, "
            "one after another",
            file=log,
        )
    rows, compiles, states = [], 0, []
    for svals, points in _groups(seed_list, traced, static):
        cfg = config_lib.replace(base, **svals)
        for vals, _ in points:  # the point's own config must validate too
            config_lib.replace(cfg, **vals)
        group_rows, c, st = _run_group(recipe, cfg, points, out_dir, log)
        rows += group_rows
        compiles += c
        states += st
    summary = summarize(rows, list(axes))
    out_dir.mkdir(parents=True, exist_ok=True)
    reason = "non-finite: the point diverged (JSON has no NaN)"
    for name, table in (("sweep.jsonl", rows), ("summary.jsonl", summary)):
        where = str(out_dir / name)
        lines = [
            json_files.dumps(json_files.null_if_non_finite(r, reason), where=where) for r in table
        ]
        atomic.write_text(out_dir / name, "".join(line + "\n" for line in lines))
    atomic.write_text(out_dir / "table.txt", format_table(summary, list(axes)))
    return SweepResult(rows, summary, compiles, states)


def format_table(summary: list[dict[str, Any]], keys: Sequence[str], max_metrics: int = 6) -> str:
    """A text table: swept values, seeds, then ``mean ± std`` of (up to) ``max_metrics`` metrics,
    evaluation metrics first."""
    if not summary:
        return "(no points)\n"
    metrics = [m for m in summary[0] if m not in (*keys, "seeds") and not m.endswith("_std")]
    metrics = sorted(metrics, key=lambda m: (not m.startswith("eval/"), m))[:max_metrics]
    head = [*keys, "seeds", *metrics]
    lines = ["  ".join(f"{h:>14s}" for h in head)]
    for r in summary:
        cells = [f"{r[k]!s:>14s}" for k in keys] + [f"{r['seeds']:>14d}"]
        for m in metrics:
            v, s = r[m], r[f"{m}_std"]
            cell = f"{v:.4g}±{s:.2g}" if math.isfinite(v) else str(v)
            cells.append(f"{cell:>14s}")
        lines.append("  ".join(cells))
    return "\n".join(lines) + "\n"

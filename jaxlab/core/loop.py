"""The one training loop every recipe runs through.

``run(recipe, cfg, run_dir)`` builds the recipe's :class:`~jaxlab.core.recipe.Parts` for the mesh of
``cfg.mesh`` and owns the rest:

* one compiled multi-step function per chunk length: ``lax.scan`` of ``train_step`` over ``n <= K``
  steps (``loop.steps_per_call``), jitted with the state donated, so the host dispatches once per
  ``n`` steps; these live as long as the run's :class:`~jaxlab.core.recipe.Parts`, so runs given
  the same ``parts`` (a resume in the same process, a run continued to more steps) reuse them;
* metrics to ``metrics.jsonl`` every ``log_every`` steps, evaluation every ``eval_every`` steps and
  at the end, user hooks ``Hook(fn, every)``;
* checkpoints (state, data-iterator position, step, config) every ``checkpoint_every`` steps and at
  the end; on start the latest checkpoint is restored, so an interrupted run continues and ends
  bit-identical (on the CPU) to an uninterrupted one;
* SIGTERM/SIGINT: finish the current chunk, save, and return with ``interrupted=True``;
* a non-finite ``loss`` or train state stops the run with :class:`NonFiniteLossError`: every step
  also computes one on-device flag, "every floating leaf of the new state is finite"
  (:mod:`jaxlab.core.finite`), so a non-finite state is never saved and the last finite checkpoint
  stays the latest; each checkpoint is also judged *healthy* or not (its state's scale and the
  loss computed from it, :mod:`jaxlab.core.health`), the newest healthy one is kept out of the
  rotation, and the error names both, so ``resume_from`` (``--resume-from``) can restart from a
  state that does not diverge again;
* the run directory is locked for the run (:mod:`jaxlab.core.run_lock`: a second run on it is
  refused) and nothing in it changes before the resume checks pass (:mod:`jaxlab.core.resume`:
  config compatibility with ``allow_change``) *and* the resumed run's first chunk of steps is
  finite: only then are newer checkpoints set aside, ``metrics.jsonl`` cut back to the restored
  step and ``config.yaml`` rewritten, so a resume that fails again leaves the directory as it was;
* a tqdm progress bar with steps/s and the recipe's own unit per second.

Chunks end on every log/eval/checkpoint/hook boundary, so events happen at exact steps whatever K is.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab.core import config as config_lib
from jaxlab.core import finite, run_lock
from jaxlab.core import health as health_lib
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import resume as resume_lib
from jaxlab.core import run as run_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.compile import jit
from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Parts, Recipe
from jaxlab.core.run import abstract_state  # noqa: F401  (re-exported)
from jaxlab.core.tracking import Tracker


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Run control (these fields may change between a run and its resumption).

    Attributes:
      total_steps: optimisation steps in the whole run.
      steps_per_call: K, steps fused into one host call with ``lax.scan``.
      log_every: steps between metric rows (the last step of each chunk is logged).
      eval_every: steps between evaluations (0: only at the end).
      checkpoint_every: steps between checkpoints (0: only at the end).
      keep_checkpoints: how many recent checkpoints to keep.
      async_checkpoint: write checkpoints in the background.
      progress: show a progress bar.
      tensorboard: also write TensorBoard events (needs the ``tb`` extra).
    """

    total_steps: int = 100
    steps_per_call: int = 1
    log_every: int = 10
    eval_every: int = 0
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    async_checkpoint: bool = True
    progress: bool = True
    tensorboard: bool = False

    def __post_init__(self):
        for name in ("total_steps", "steps_per_call", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"loop.{name}", getattr(self, name), "an integer >= 1")
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"loop.{name}", getattr(self, name), "an integer >= 0 (0 = end only)"
                )


@dataclasses.dataclass(frozen=True)
class Hook:
    """``fn(step, state, metrics)`` called on the host every ``every`` steps."""

    fn: Callable[[int, Any, dict[str, Any]], None]
    every: int


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN/Inf loss or train state; nothing non-finite was saved.

    Attributes: ``step`` (the first bad step), ``what`` (``"loss"`` or ``"state"``),
    ``last_checkpoint`` (the newest checkpoint, all finite, or None when none was written),
    ``healthy_checkpoint`` (the newest healthy one, :mod:`jaxlab.core.health`, or None),
    ``lr_keys`` and ``lr_values`` (the config's learning-rate fields and their values, for the
    hint)."""

    def __init__(
        self,
        message: str,
        step: int = -1,
        what: str = "loss",
        last_checkpoint: int | None = None,
        lr_keys: tuple[str, ...] = (),
        healthy_checkpoint: int | None = None,
        lr_values: dict[str, float] | None = None,
    ):
        super().__init__(message)
        self.step, self.what = step, what
        self.last_checkpoint, self.lr_keys = last_checkpoint, lr_keys
        self.healthy_checkpoint = healthy_checkpoint
        self.lr_values = dict(lr_values or {})


@dataclasses.dataclass
class RunResult:
    state: Any
    step: int
    interrupted: bool
    metrics: dict[str, Any]
    eval_metrics: dict[str, Any]
    run_dir: Path


def _multi_step(
    train_step: Callable, n: int, with_data: bool, state_shardings: Any = None
) -> Callable:
    """``(state, batches[n]) -> (state, metrics[n])`` as one scan.

    ``state_shardings`` (the incoming state's shardings) pin the output state's: otherwise XLA may
    return an equivalent sharding spelled differently (``P()`` for ``P(None, None)``), which is a
    new cache key, so the second call would compile the step again."""

    train_step = finite.with_state_flag(train_step)

    def multi(state, batches):
        if with_data:
            return jax.lax.scan(train_step, state, batches)
        return jax.lax.scan(lambda s, _: train_step(s, None), state, None, length=n)

    out = None if state_shardings is None else (state_shardings, None)
    return jit(multi, donate_argnums=0, out_shardings=out)


_COMPILED: dict[int, list[tuple[int, bool, Any, Callable]]] = {}
"""``id(parts)`` -> the compiled multi-step functions of those parts as ``(chunk length, with
data, state shardings, fn)``; an entry is dropped when its ``Parts`` is garbage-collected."""


def _compiled_for(parts: Parts) -> list[tuple[int, bool, Any, Callable]]:
    """The cache of compiled multi-step functions that lives as long as ``parts``."""
    key = id(parts)
    if key not in _COMPILED:
        _COMPILED[key] = []
        weakref.finalize(parts, _COMPILED.pop, key, None)
    return _COMPILED[key]


def _same_shardings(state: Any, shardings: Any) -> bool:
    """Whether ``state`` is placed as ``shardings`` (equivalent specs count: a restored state may
    spell ``P()`` as ``P(None, None)``)."""
    leaves, tree = jax.tree.flatten(state)
    if tree != jax.tree.structure(shardings):
        return False
    pairs = zip(leaves, jax.tree.leaves(shardings), strict=True)
    return all(x.sharding.is_equivalent_to(s, x.ndim) for x, s in pairs)


def _weak(x: Any) -> bool:
    return bool(getattr(getattr(x, "aval", None), "weak_type", False))


def step_for(task: Parts, state: Any, n: int, with_data: bool) -> tuple[Any, Callable]:
    """The compiled ``n``-step function of ``task`` for ``state``'s placement (compiled on first
    use, then shared by every run given the same parts), and ``state`` relabelled with the exact
    shardings it was compiled for so that it is not compiled again."""
    # weak-typed leaves (e.g. a Python-scalar counter) come back strong from a checkpoint: make
    # them strong here so that fresh and restored states have the same types (one compilation)
    state = jax.tree.map(lambda x: x.astype(x.dtype) if _weak(x) else x, state)
    cache = _compiled_for(task)
    for m, d, shardings, fn in cache:
        if m == n and d == with_data and _same_shardings(state, shardings):
            pairs = zip(jax.tree.leaves(state), jax.tree.leaves(shardings), strict=True)
            same = all(x.sharding == t for x, t in pairs)
            return (state if same else jax.device_put(state, shardings)), fn
    shardings = jax.tree.map(lambda x: x.sharding, state)
    fn = _multi_step(task.train_step, n, with_data, shardings)
    cache.append((n, with_data, shardings, fn))
    return state, fn


def next_batches(task: Parts, data_it: Any, n: int) -> Any:
    """The next ``n`` batches of ``data_it`` stacked on a leading axis and placed on the devices
    as the ``n``-step function takes them (None without a data iterator)."""
    if data_it is None:
        return None
    items = [next(data_it) for _ in range(n)]
    return run_lib.place_batches(
        jax.tree.map(lambda *xs: np.stack(xs), *items), task.abstract_batch
    )


class _StopFlag:
    """Records SIGTERM/SIGINT during a run instead of dying mid-step."""

    def __init__(self):
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def _non_finite(
    cfg: Any, step: int, what: str, ckpt: Checkpointer, health: health_lib.Health
) -> NonFiniteLossError:
    """The error for a non-finite ``what`` (loss/state) first seen at ``step``: it names the last
    finite and the last healthy checkpoint (:mod:`jaxlab.core.health`)."""
    good = ckpt.latest_step()
    head = (
        f"non-finite loss at step {step}"
        if what == "loss"
        else f"non-finite train state (parameters or optimizer state) after step {step}, "
        "while the loss was finite"
    )
    steps = ckpt.all_steps()
    healthy = health.last_healthy(steps)
    if good is None:
        tail = "no checkpoint was written (the run stopped before its first checkpoint)."
    else:
        tail = (
            f"last finite checkpoint: step {good} in {ckpt.directory} (nothing non-finite was "
            "saved); "
        )
        if healthy is None:
            tail += f"no healthy checkpoint (step {good}: {health.describe(good)})."
        else:
            tail += f"last healthy checkpoint: step {healthy} ({health.describe(healthy)})."
    flat = config_lib.flatten(config_lib.to_dict(cfg))
    lr_values = {
        k: v
        for k, v in flat.items()
        if k.rsplit(".", 1)[-1] in ("lr", "learning_rate") and isinstance(v, float)
    }
    try:
        default = config_lib.flatten(config_lib.to_dict(type(cfg)()))
    except (TypeError, ValueError):
        default = None
    causes = finite.likely_causes(flat, default)
    tail += f" Likely causes, most evident first: {'; '.join(causes)}." if causes else ""
    return NonFiniteLossError(
        f"{head}; training stopped; {tail}",
        step,
        what,
        good,
        tuple(lr_values),
        healthy,
        lr_values,
    )


def _next_boundary(step: int, total: int, everies: Sequence[int]) -> int:
    b = total
    for e in everies:
        if e > 0:
            b = min(b, (step // e + 1) * e)
    return b


def _checkpointer(
    cfg: Any, run_dir: Path, allow_change: Sequence[str], health: health_lib.Health
) -> Checkpointer:
    """The run's checkpointer on ``run_dir/checkpoints``, set up from ``cfg.loop``; the newest
    healthy checkpoint is kept out of the rotation."""

    def protect() -> list[int]:
        step = health.last_healthy(health.steps)
        return [] if step is None else [step]

    return Checkpointer(
        run_dir / "checkpoints",
        cfg,
        keep=cfg.loop.keep_checkpoints,
        async_save=cfg.loop.async_checkpoint,
        allow_change=allow_change,
        protect=protect,
    )


def _start_step(ckpt: Checkpointer, resume: bool, resume_from: int | None) -> int | None:
    """The checkpoint step to restore (None: a fresh state), checked against the config."""
    if resume_from is None:
        return resume_lib.check_resume(ckpt, resume)
    steps = ckpt.all_steps()
    if resume_from != 0 and resume_from not in steps:
        raise ConfigError(
            "--resume-from",
            resume_from,
            f"a checkpoint step in {ckpt.directory} ({', '.join(map(str, steps)) or 'none'}) "
            "or 0 to start over",
        )
    if resume_from == 0:
        return None
    ckpt.check_config(resume_from)
    return resume_from


def _restore_or_init(
    recipe: Recipe,
    cfg: Any,
    task: Parts,
    ckpt: Checkpointer,
    key: Any,
    data_it: Any,
    resume: bool,
    resume_from: int | None = None,
) -> tuple[Any, int]:
    """The starting ``(state, step)``: the newest checkpoint when resuming (or the step
    ``resume_from``; 0 is a fresh state), else a fresh state."""
    step = 0
    start = _start_step(ckpt, resume, resume_from)
    if start is not None:
        state, step = ckpt.restore(run_lib.abstract_state(task, key), data_it, step=start)
        state = recipe_lib.with_hparams(state, recipe_lib.hparams_of(recipe, cfg))
    else:
        state = run_lib.init_state(task, key)
        if recipe.finetune is not None:
            state = recipe.finetune(cfg, state)
    return state, step


def _open_tracker(recipe: Recipe, cfg: Any, run_dir: Path, step: int) -> Tracker:
    """The run's tracker, after cutting ``metrics.jsonl`` back to ``step`` and writing the config."""
    if jax.process_index() == 0:
        resume_lib.truncate_metrics(run_dir, step)
    tracker = Tracker(run_dir, tensorboard=cfg.loop.tensorboard)
    if tracker.active:
        (run_dir / "config.yaml").write_text(config_lib.to_yaml(cfg))
        (run_dir / "recipe.txt").write_text(recipe.name + "\n")
    return tracker


def _progress_bar(loop: LoopConfig, step: int) -> Any:
    """A tqdm bar over ``loop.total_steps`` that starts at ``step``."""
    from tqdm.auto import tqdm

    return tqdm(total=loop.total_steps, initial=step, unit="step", dynamic_ncols=True)


def _check_finite(
    cfg: Any,
    ckpt: Checkpointer,
    health: health_lib.Health,
    metrics: dict,
    step: int,
    n: int,
    save_health: bool,
) -> None:
    """Raises :class:`NonFiniteLossError` on a chunk's first non-finite step (writing the health
    records first when ``save_health``: a committed run); drops the flag."""
    bad, what = finite.first_bad_step(metrics, n)
    if bad is not None:
        ckpt.wait()
        if save_health:
            health.save()
        raise _non_finite(cfg, step + bad + 1, what, ckpt, health)
    metrics.pop(finite.FLAG, None)


def _observe_health(
    health: health_lib.Health, metrics: dict, step: int, n: int, saved: int
) -> bool:
    """Judges the checkpoint at ``step`` (if one was saved or restored there) by the chunk's
    first loss, which is computed from exactly that state; step 0 sets the run's reference.
    Returns whether a record was added."""
    if "loss" not in metrics or (step != saved and step != 0):
        return False
    health.observe(step, np.mean(np.asarray(metrics["loss"]).reshape(n, -1)[0]), step == 0)
    return True


def _commit(
    recipe: Recipe,
    cfg: Any,
    run_dir: Path,
    ckpt: Checkpointer,
    health: health_lib.Health,
    step: int,
) -> Tracker:
    """The point after which a resumed run may change its directory (its first chunk was
    finite): checkpoints newer than the restored ``step`` are set aside (``<s>.abandoned``),
    ``metrics.jsonl`` is cut back to ``step``, ``config.yaml`` and the health records written."""
    if jax.process_index() == 0:
        ckpt.set_aside(s for s in ckpt.all_steps() if s > step)
    health.steps = {s: r for s, r in health.steps.items() if s <= step}
    tracker = _open_tracker(recipe, cfg, run_dir, step)
    if tracker.active:
        health.save()
    return tracker


def _advance_bar(bar: Any, task: Parts, last_metrics: dict[str, Any], n: int, dt: float) -> None:
    """Moves the progress bar ``n`` steps and shows the loss and the recipe's units per second."""
    bar.update(n)
    post = {"loss": f"{float(last_metrics['loss']):.4g}"} if "loss" in last_metrics else {}
    if task.units_per_step and dt > 0:
        count, unit = task.units_per_step
        post[f"{unit}/s"] = f"{count * n / dt:,.0f}"
    bar.set_postfix(post, refresh=False)


def _placer(task: Parts) -> Callable[[Any], Any]:
    """Host batches -> batches placed with the recipe's abstract batch's shardings."""
    return lambda b: run_lib.place_batches(b, task.abstract_batch)


def _run_chunk(task: Parts, state: Any, data_it: Any, n: int) -> tuple[Any, Any, float]:
    """``n`` steps in one call: ``(state, metrics on the host [n, ...], seconds)``."""
    state, step_fn = step_for(task, state, n, data_it is not None)
    batches = next_batches(task, data_it, n)
    t0 = time.perf_counter()
    state, metrics = step_fn(state, batches)
    metrics = jax.device_get(metrics)
    return state, metrics, time.perf_counter() - t0


def _log_and_evaluate(
    task: Parts,
    loop: LoopConfig,
    tracker: Any,
    state: Any,
    step: int,
    steps_per_s: float,
    last_metrics: dict[str, Any],
    eval_metrics: dict[str, Any],
) -> dict[str, Any]:
    """Logs the chunk's last metrics every ``loop.log_every`` steps and at the end, and evaluates
    every ``loop.eval_every`` steps and at the end; returns the latest evaluation metrics."""
    is_end = step == loop.total_steps
    if step % loop.log_every == 0 or is_end:
        tracker.log(step, {**last_metrics, "steps_per_s": steps_per_s})
    if task.evaluate is not None and (is_end or (loop.eval_every and step % loop.eval_every == 0)):
        eval_metrics = dict(task.evaluate(state))
        tracker.log(step, eval_metrics, prefix="eval/")
    return eval_metrics


@run_lock.exclusive_run_dir
def run(
    recipe: Recipe,
    cfg: Any,
    run_dir: str | Path,
    *,
    hooks: Sequence[Hook] = (),
    parts: Parts | None = None,
    resume: bool = True,
    devices: Sequence[jax.Device] | None = None,
    allow_change: Sequence[str] = (),
    resume_from: int | None = None,
) -> RunResult:
    """Trains ``recipe`` with config ``cfg`` in ``run_dir`` (see the module docstring).

    Args:
      parts: the recipe's parts if already built (default: built for ``cfg.mesh`` over
        ``devices``, all devices when None); runs given the same parts (built for ``cfg``) share
        their compiled steps.
      resume: restore the newest checkpoint of ``run_dir`` if there is one.
      allow_change: float fields (dotted keys, e.g. ``("optim.lr",)``) that may differ from the
        config of the checkpoint being resumed; ``loop.*`` and ``mesh.*`` may always differ.
      resume_from: restore this checkpoint step instead of the newest (0: a fresh state); once
        the run's first chunk is finite, the newer checkpoints are set aside (``<step>.abandoned``)
        and the metrics cut back to it. The non-finite error names the step to pass here.
    """
    loop: LoopConfig = cfg.loop
    run_dir = Path(run_dir)
    task = parts if parts is not None else run_lib.build(recipe, cfg, devices)
    health = health_lib.Health(run_dir)
    ckpt = _checkpointer(cfg, run_dir, allow_change, health)
    key = jax.random.PRNGKey(cfg.seed)
    data_it = task.data() if task.data is not None else None

    place = None if task.abstract_batch is None else _placer(task)
    with ckpt.closed_on_error():  # nothing in run_dir changes before these checks pass
        resume_lib.check_batch_placement(place, data_it)
        had_checkpoints = bool(ckpt.all_steps())
        state, step = _restore_or_init(recipe, cfg, task, ckpt, key, data_it, resume, resume_from)
    if step == 0:
        health.start(state)
    else:
        health.resumed_without_records()
    # A resume (or a restart over old checkpoints) changes the directory only once its first
    # chunk is finite (_commit); a fresh run has nothing to lose and starts its files now.
    deferred = step > 0 or (resume_from == 0 and had_checkpoints)
    tracker = None if deferred else _open_tracker(recipe, cfg, run_dir, step)

    hooks = list(hooks) + (list(recipe.hooks(cfg, run_dir)) if recipe.hooks is not None else [])
    everies = [loop.log_every, loop.eval_every, loop.checkpoint_every] + [h.every for h in hooks]
    last_metrics: dict[str, Any] = {}
    eval_metrics: dict[str, Any] = {}
    last_saved = step if step > 0 else -1
    bar = _progress_bar(loop, step) if loop.progress and jax.process_index() == 0 else None

    def save(s: int, st: Any) -> None:
        nonlocal last_saved
        if s != last_saved:
            ckpt.save(s, st, data_it, force=True)
            health.saved(s, st)
            if tracker is not None and tracker.active:
                health.save()
            last_saved = s

    interrupted = False
    try:
        with _StopFlag() as stop:
            while step < loop.total_steps:
                n = min(loop.steps_per_call, _next_boundary(step, loop.total_steps, everies) - step)
                state, metrics, dt = _run_chunk(task, state, data_it, n)
                observed = _observe_health(health, metrics, step, n, last_saved)
                committed = tracker is not None and tracker.active
                _check_finite(cfg, ckpt, health, metrics, step, n, committed)
                if tracker is None:
                    tracker = _commit(recipe, cfg, run_dir, ckpt, health, step)
                elif observed and committed:
                    health.save()
                step += n
                last_metrics = jax.tree.map(lambda x: np.asarray(x)[-1], metrics)
                if bar is not None:
                    _advance_bar(bar, task, last_metrics, n, dt)
                is_end = step == loop.total_steps
                eval_metrics = _log_and_evaluate(
                    task, loop, tracker, state, step, n / dt if dt > 0 else math.nan,
                    last_metrics, eval_metrics,
                )  # fmt: skip
                for h in hooks:
                    if step % h.every == 0:
                        h.fn(step, state, last_metrics)
                if is_end or (loop.checkpoint_every and step % loop.checkpoint_every == 0):
                    save(step, state)
                if stop.signum is not None:
                    save(step, state)
                    interrupted = True
                    break
        if tracker is None:  # no step ran (the run was already at total_steps)
            tracker = _commit(recipe, cfg, run_dir, ckpt, health, step)
        if not interrupted and task.finalize is not None and tracker.active:
            task.finalize(state, run_dir)
    finally:
        if bar is not None:
            bar.close()
        ckpt.close()
        if tracker is not None:
            tracker.close()
    return RunResult(state, step, interrupted, last_metrics, eval_metrics, run_dir)

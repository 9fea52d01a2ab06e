"""The one module that talks to orbax: train state + data-iterator state + step + config.

Layout: ``<dir>/<step>/{state, data, meta}`` managed by :class:`orbax.checkpoint.CheckpointManager`.
Orbax writes each step to a temporary folder and renames it when complete, so a half-written
checkpoint never replaces the last good one; the newest *finalised* step is what restores.

Restoring checks the saved config against the current one: fields that only steer the run
(``loop.*`` and ``mesh.*``, listed in :data:`RUN_CONTROL_PREFIXES`) may differ, and so may the float
hyper-parameters named in ``allow_change`` (learning rates, loss weights: values the recipe reads
when it builds the step, which shape nothing in the state); any other difference is an
:class:`IncompatibleCheckpointError` naming the fields. A checkpoint that cannot be read (a
truncated or missing array file, manifest or data-iterator state) is a
:class:`CorruptCheckpointError` naming the step and the newest older step that does restore. The state is restored into an abstract tree
(``jax.eval_shape`` of the recipe's init, optionally with shardings), so a checkpoint written on one
mesh restores onto another.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxlab.core import config as config_lib

RUN_CONTROL_PREFIXES: tuple[str, ...] = ("loop.", "mesh.")


class IncompatibleCheckpointError(ValueError):
    """A checkpoint made with a config that differs in fields that shape or define the run."""

    def __init__(self, directory: Path, fields: Sequence[str], saved: dict, current: dict):
        self.fields = list(fields)
        saved_f, cur_f = config_lib.flatten(saved), config_lib.flatten(current)
        parts = [f"{k}: saved {saved_f.get(k)!r} vs now {cur_f.get(k)!r}" for k in self.fields[:8]]
        super().__init__(
            f"checkpoint in {directory} was made with a different config; differing fields: "
            + "; ".join(parts)
            + " (use a new --run-dir, or the same config to resume)"
        )


class CorruptCheckpointError(ValueError):
    """A checkpoint step whose files cannot be read; ``older`` is the newest older step that
    restores (None if there is none)."""

    def __init__(self, directory: Path, step: int, cause: BaseException, older: int | None):
        self.directory, self.step, self.older = directory, step, older
        reason = " ".join(str(cause).split())
        reason = reason[:240] + ("..." if len(reason) > 240 else "")
        super().__init__(
            f"checkpoint step {step} in {directory} is damaged and cannot be restored "
            f"({type(cause).__name__}: {reason})"
        )
        if older is not None:
            self.hint = (
                f"step {older} is complete: move the damaged step aside "
                f"(mv {directory / str(step)} {directory / str(step)}.damaged) and rerun to "
                f"resume from step {older}"
            )
        else:
            self.hint = "no older complete checkpoint exists; pass --run-dir NEW_DIR to start over"


_QUIET = {"restoring": 0, "until": 0.0}
_QUIET_LOCK = threading.Lock()


def _drop_closed_loop_callback(u: Any) -> bool:
    """Whether an unraisable exception is a TensorStore read calling back into orbax's closed
    event loop during a restore or in the grace period after a failed one."""
    return (
        (_QUIET["restoring"] > 0 or time.monotonic() < _QUIET["until"])
        and isinstance(u.exc_value, RuntimeError)
        and str(u.exc_value) == "Event loop is closed"
    )


@contextlib.contextmanager
def _closed_loop_callbacks_dropped(grace: float = 30.0) -> Iterator[None]:
    """Wraps one orbax restore. Orbax runs the restore's reads in a fresh event loop and closes it
    as soon as one read fails; TensorStore then completes the reads still in flight and calls back
    into the closed loop, and each callback prints "Exception ignored ... RuntimeError: Event loop
    is closed" (dozens per failed restore, some before the restore has even returned). Those
    messages, and only those, are dropped from the moment the restore starts until ``grace``
    seconds after it failed: the real error is the :class:`CorruptCheckpointError` raised."""
    with _QUIET_LOCK:
        if not getattr(sys.unraisablehook, "_jaxlab_closed_loop_filter", False):
            previous = sys.unraisablehook

            def hook(u: Any) -> None:
                if not _drop_closed_loop_callback(u):
                    previous(u)

            hook._jaxlab_closed_loop_filter = True  # type: ignore[attr-defined]
            sys.unraisablehook = hook
        _QUIET["restoring"] += 1
    try:
        yield
    except BaseException:
        _QUIET["until"] = max(_QUIET["until"], time.monotonic() + grace)
        raise
    finally:
        with _QUIET_LOCK:
            _QUIET["restoring"] -= 1


def check_allow_change(config: Any, keys: Sequence[str]) -> tuple[str, ...]:
    """Validates the ``allow_change`` keys: existing float fields of ``config`` (dotted).

    Raises:
      ConfigError: an unknown key (with the closest one) or a field that is not a float (ints,
        strings and nested configs define shapes, data or the method: a resume cannot change them).
    """
    flat = config_lib.flatten(config_lib.to_dict(config))
    for k in keys:
        if k not in flat:
            raise config_lib.ConfigError(
                "allow_change", k, "a dotted config key", config_lib.suggest(k, flat)
            )
        if k.startswith(RUN_CONTROL_PREFIXES):
            continue
        if not isinstance(flat[k], float):
            raise config_lib.ConfigError(
                "allow_change",
                k,
                "a float hyper-parameter (e.g. a learning rate); "
                f"{k}={flat[k]!r} may not change on resume",
            )
    return tuple(keys)


def _with_default_sharding(abstract: Any) -> Any:
    """Gives leaves without a sharding the default single-device sharding (orbax needs one)."""
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def fix(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct) and getattr(x, "sharding", None) is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=dev)
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, np.ndarray):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=dev)
        return x

    return jax.tree.map(fix, abstract)


class _LatestAndProtected:
    """Orbax preservation policy: the newest ``n`` steps (all when ``n`` is None) and every
    step ``protect()`` names at the time of the rotation."""

    def __init__(self, n: int | None, protect: Callable[[], Iterable[int]]):
        self.n, self.protect = n, protect

    def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
        keep = set(self.protect())
        cut = 0 if self.n is None else len(checkpoints) - self.n
        return [i >= cut or c.step in keep for i, c in enumerate(checkpoints)]


class Checkpointer:
    """Saves and restores (state, data iterator, step, config) under ``directory``.

    Args:
      directory: where the step folders live (created if missing).
      config: the current run's config dataclass (stored with each save, checked on restore).
      keep: number of most recent checkpoints to keep (None: all).
      async_save: write in a background thread; :meth:`wait` (called by :meth:`close`) joins it.
      create: create ``directory`` if missing (False for read-only use: nothing is written).
      allow_change: float fields (dotted keys) that may differ from the checkpoint's config.
      protect: steps kept whatever ``keep`` says (called at each rotation; the loop keeps its
        newest healthy checkpoint, :mod:`jaxlab.core.health`).
    """

    def __init__(
        self,
        directory: str | Path,
        config: Any,
        *,
        keep: int | None = 3,
        async_save: bool = True,
        create: bool = True,
        allow_change: Sequence[str] = (),
        protect: Callable[[], Iterable[int]] | None = None,
    ):
        self.directory = Path(directory).absolute()
        self.config = config
        self.allow_change = check_allow_change(config, allow_change)
        self.config_dict = config_lib.to_dict(config)
        if protect is None:
            options = ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=create
            )
        else:
            options = ocp.CheckpointManagerOptions(
                preservation_policy=_LatestAndProtected(keep, protect),
                enable_async_checkpointing=async_save,
                create=create,
            )
        self._mngr = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "data", "meta")
        )

    def set_aside(self, steps: Iterable[int]) -> list[Path]:
        """Renames the folders of ``steps`` to ``<step>.abandoned`` (``.abandoned-2``, ... if
        taken) so that they no longer restore or rotate, without deleting them; returns the
        new paths."""
        self.wait()
        moved = []
        for step in sorted(steps):
            src = self.directory / str(step)
            dst, i = self.directory / f"{step}.abandoned", 1
            while dst.exists():
                i += 1
                dst = self.directory / f"{step}.abandoned-{i}"
            src.rename(dst)
            moved.append(dst)
        if moved:
            self._mngr.reload()
        return moved

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None."""
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mngr.all_steps())

    def save(
        self, step: int, state: Any, data_iterator: Any = None, *, force: bool = False
    ) -> bool:
        """Saves ``state`` (and the data iterator's position) as ``step``."""
        import grain

        items: dict[str, Any] = {
            "state": ocp.args.StandardSave(state),
            "meta": ocp.args.JsonSave({"step": int(step), "config": self.config_dict}),
        }
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        return self._mngr.save(step, args=ocp.args.Composite(**items), force=force)

    def check_config(self, step: int) -> dict:
        """Reads the saved meta of ``step`` and refuses an incompatible config."""
        try:
            meta = self._restore(step, meta=ocp.args.JsonRestore())["meta"]
        except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise many types
            raise CorruptCheckpointError(self.directory, step, e, self._older(step)) from e
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
            problem = KeyError("the saved meta has no 'config' mapping")
            raise CorruptCheckpointError(self.directory, step, problem, self._older(step))
        saved = meta["config"]
        flat_saved, flat_now = config_lib.flatten(saved), config_lib.flatten(self.config_dict)

        def added_since(k: str) -> bool:
            # A field the saved run did not have yet, set to its declared default now: the
            # saved run behaved as the default, so the checkpoint is compatible.
            return k not in flat_saved and flat_now.get(k) == config_lib.field_default(
                self.config, k
            )

        fields = [
            k
            for k in config_lib.diff(saved, self.config_dict)
            if not k.startswith(RUN_CONTROL_PREFIXES)
            and k not in self.allow_change
            and not added_since(k)
        ]
        if fields:
            raise IncompatibleCheckpointError(self.directory, fields, saved, self.config_dict)
        return meta

    def restore(
        self, abstract_state: Any, data_iterator: Any = None, step: int | None = None
    ) -> tuple[Any, int]:
        """Restores the state (into ``abstract_state``'s shapes, dtypes and shardings) and, in place,
        the data iterator's position. Returns ``(state, step)``."""
        import grain

        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        self.check_config(step)
        items: dict[str, Any] = {
            "state": ocp.args.StandardRestore(_with_default_sharding(abstract_state))
        }
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        try:
            restored = self._restore(step, **items)
        except Exception as e:  # noqa: BLE001 - orbax/tensorstore/grain raise many types
            older = self._older(step, abstract_state, data_iterator is not None)
            raise CorruptCheckpointError(self.directory, step, e, older) from e
        return restored["state"], int(step)

    def _restore(self, step: int, **items: Any) -> Any:
        """``CheckpointManager.restore`` of ``items`` at ``step``, with the closed-loop callbacks
        of a failed read dropped (:func:`_closed_loop_callbacks_dropped`)."""
        with _closed_loop_callbacks_dropped():
            return self._mngr.restore(step, args=ocp.args.Composite(**items))

    def _older(self, step: int, abstract_state: Any = None, with_data: bool = False) -> int | None:
        """The newest step before ``step`` whose meta (and state, given ``abstract_state``, and
        data-iterator file, given ``with_data``) restores; None if none does."""
        for s in sorted((s for s in self.all_steps() if s < step), reverse=True):
            try:
                self._restore(s, meta=ocp.args.JsonRestore())
                if abstract_state is not None:
                    target = ocp.args.StandardRestore(_with_default_sharding(abstract_state))
                    self._restore(s, state=target)
                if with_data and not any((self.directory / str(s) / "data").glob("*.json")):
                    continue
            except Exception:  # noqa: BLE001
                continue
            return s
        return None

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[Checkpointer]:
        """Closes the manager (joining its threads) if the block raises, then re-raises."""
        try:
            yield self
        except BaseException:
            self.close()
            raise

    def wait(self) -> None:
        """Blocks until any asynchronous save has finished."""
        self._mngr.wait_until_finished()

    def close(self) -> None:
        """Joins any asynchronous save, then closes the manager (also when the save failed)."""
        try:
            self._mngr.wait_until_finished()
        finally:
            self._mngr.close()

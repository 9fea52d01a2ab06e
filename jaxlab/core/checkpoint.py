"""The one module that talks to orbax: train state + data-iterator state + step + config.

Layout: ``<dir>/<step>/{state, data, meta}`` managed by :class:`orbax.checkpoint.CheckpointManager`.
Orbax writes each step to a temporary folder and renames it when complete, so a half-written
checkpoint never replaces the last good one; the newest *finalised* step is what restores.

Restoring checks the saved config against the current one: fields that only steer the run
(``loop.*`` and ``mesh.*``, listed in :data:`RUN_CONTROL_PREFIXES`) may differ; any other difference is an
:class:`IncompatibleCheckpointError` naming the fields. The state is restored into an abstract tree
(``jax.eval_shape`` of the recipe's init, optionally with shardings), so a checkpoint written on one
mesh restores onto another.
"""

from __future__ import annotations

from collections.abc import Sequence
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


class Checkpointer:
    """Saves and restores (state, data iterator, step, config) under ``directory``.

    Args:
      directory: where the step folders live (created if missing).
      config: the current run's config dataclass (stored with each save, checked on restore).
      keep: number of most recent checkpoints to keep.
      async_save: write in a background thread; :meth:`wait` (called by :meth:`close`) joins it.
      create: create ``directory`` if missing (False for read-only use: nothing is written).
    """

    def __init__(
        self,
        directory: str | Path,
        config: Any,
        *,
        keep: int = 3,
        async_save: bool = True,
        create: bool = True,
    ):
        self.directory = Path(directory).absolute()
        self.config = config
        self.config_dict = config_lib.to_dict(config)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=async_save,
            create=create,
        )
        self._mngr = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "data", "meta")
        )

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
        meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))[
            "meta"
        ]
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
            if not k.startswith(RUN_CONTROL_PREFIXES) and not added_since(k)
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
        restored = self._mngr.restore(step, args=ocp.args.Composite(**items))
        return restored["state"], int(step)

    def wait(self) -> None:
        """Blocks until any asynchronous save has finished."""
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()

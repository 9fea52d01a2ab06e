"""Runs on a mesh: building a recipe's :class:`~jaxlab.core.recipe.Parts` for a mesh, placing
batches, and reopening a finished (or interrupted) run with :func:`open_run`.

Every caller that needs "the trained state of run X" (``jaxlab eval``, ``jaxlab generate``,
fine-tuning, a teacher model of another recipe, benchmarks) goes through :func:`open_run`; it reads
``recipe.txt`` and ``config.yaml`` from the run directory, builds the recipe's parts for the mesh
asked for (one device by default) and restores the newest (or a given) checkpoint onto it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxlab.core import config as config_lib
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.compile import jit
from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Parts, Recipe
from jaxlab.core.sharding import MeshConfig, make_mesh

CONFIG_FILE = "config.yaml"
RECIPE_FILE = "recipe.txt"


class RunNotFoundError(FileNotFoundError):
    """A run directory without a run (no config, no recipe name or no checkpoint)."""


def mesh_for(cfg: Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """The mesh of ``cfg.mesh`` (a :class:`MeshConfig`) over ``devices`` (default: all).

    A mesh of fixed sizes (no ``-1`` axis) takes the first devices it needs, so e.g.
    ``mesh.data=1`` runs on one device of a multi-device host. A config without a ``mesh`` field
    runs on one device."""
    mesh_cfg = getattr(cfg, "mesh", None)
    if isinstance(mesh_cfg, MeshConfig):
        devices = list(devices if devices is not None else jax.devices())
        if -1 not in mesh_cfg.sizes():
            devices = devices[: math.prod(mesh_cfg.sizes())]
        return make_mesh(mesh_cfg, devices)
    devices = list(devices if devices is not None else jax.devices())[:1]
    return make_mesh(MeshConfig(data=1), devices)


def build(recipe: Recipe, cfg: Any, devices: Sequence[jax.Device] | None = None) -> Parts:
    """``recipe.build(cfg, mesh_for(cfg, devices))``."""
    mesh = mesh_for(cfg, devices)
    return recipe.parts(cfg, mesh)


def abstract_state(parts: Parts, key: jax.Array) -> Any:
    """Shapes/dtypes (and shardings, if the parts give them) of the train state, without compute."""
    abstract = jax.eval_shape(parts.init, key)
    if parts.state_sharding is None:
        return abstract
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        abstract,
        parts.state_sharding(abstract),
    )


def init_state(parts: Parts, key: jax.Array) -> Any:
    """The initial state, created directly in its shardings on the mesh."""
    out = parts.state_sharding(jax.eval_shape(parts.init, key)) if parts.state_sharding else None
    return jit(parts.init, out_shardings=out)(key)


def _stacked_sharding(sh: Any, extra: int) -> Any:
    """The sharding of ``sh``'s array with ``extra`` unsharded leading axes."""
    if isinstance(sh, NamedSharding):
        return NamedSharding(sh.mesh, PartitionSpec(*((None,) * extra), *sh.spec))
    return sh


class BatchSplitError(ValueError):
    """A batch the mesh's data-parallel axes do not divide (set from the batch-size key)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def place_batches(batches: Any, abstract_batch: Any, leading: int = 1) -> Any:
    """Puts host batches (``leading`` extra axes in front of one step's batch, e.g. the steps of
    one call) on the devices with ``abstract_batch``'s shardings.

    Multi-host: each process passes its local rows; the global array is assembled with
    ``jax.make_array_from_process_local_data``."""

    if abstract_batch is None:
        return batches

    def put(x: Any, spec: Any) -> Any:
        x = np.asarray(x)
        sh = getattr(spec, "sharding", None)
        if sh is None:
            return jax.device_put(x)
        sh = _stacked_sharding(sh, leading)
        if jax.process_count() > 1:
            return jax.make_array_from_process_local_data(sh, x)
        if isinstance(sh, NamedSharding):
            for dim, entry in zip(x.shape, sh.spec, strict=False):
                axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
                n = math.prod(sh.mesh.shape[a] for a in axes)
                if dim % n:
                    raise BatchSplitError(
                        f"a batch of shape {tuple(x.shape[leading:])} does not split over the "
                        f"mesh: its dimension {dim} is not divisible by the mesh axes {axes} of "
                        f"size {n} (mesh {dict(sh.mesh.shape)})",
                        f"set the recipe's batch size (e.g. data.batch_size) to a multiple of {n}, "
                        "or change mesh.*",
                    )
        return jax.device_put(x, sh)

    return jax.tree.map(put, batches, abstract_batch)


def batch_spec(batch: Any, mesh: Mesh, batch_axes: tuple[str, ...] = ("data", "fsdp", "expert")):
    """``abstract_batch`` for host-batch example ``batch`` (arrays or ShapeDtypeStructs): each
    leaf's leading axis split over the mesh's data-parallel axes (those of size > 1)."""
    axes = tuple(a for a in batch_axes if mesh.shape.get(a, 1) > 1)
    entry = None if not axes else axes[0] if len(axes) == 1 else axes

    def one(x: Any) -> jax.ShapeDtypeStruct:
        spec = PartitionSpec(entry, *([None] * (len(x.shape) - 1))) if x.shape else PartitionSpec()
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec))

    return jax.tree.map(one, batch)


@dataclasses.dataclass
class OpenRun:
    """A reopened run: its recipe, resolved config, parts for the mesh it was opened on, the
    restored train state and the step of that state."""

    recipe: Recipe
    cfg: Any
    parts: Parts
    state: Any
    step: int
    run_dir: Path


def read_run(run_dir: str | Path, recipe: Recipe | str | None = None) -> tuple[Recipe, Any]:
    """The recipe and resolved config of the run in ``run_dir`` (no state).

    ``recipe`` (optional) is what the caller expects; a run of another recipe is refused by name."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunNotFoundError(f"no run in {run_dir} (the directory does not exist)")
    cfg_path, name_path = run_dir / CONFIG_FILE, run_dir / RECIPE_FILE
    if not cfg_path.exists():
        raise RunNotFoundError(f"no run in {run_dir} (missing {CONFIG_FILE})")
    try:
        saved_name = name_path.read_text(encoding="utf-8").strip() if name_path.exists() else None
    except (UnicodeDecodeError, IsADirectoryError) as e:
        raise RunNotFoundError(f"{name_path}: not a recipe name ({e})") from None
    expected = recipe.name if isinstance(recipe, Recipe) else recipe
    if saved_name is None and expected is None:
        raise RunNotFoundError(f"no run in {run_dir} (missing {RECIPE_FILE})")
    if expected is not None and saved_name is not None and saved_name != expected:
        raise ConfigError(
            "recipe",
            expected,
            f"the recipe of the run in {run_dir}, which is '{saved_name}'",
        )
    r = recipe if isinstance(recipe, Recipe) else recipe_lib.get(saved_name or expected)
    cfg = config_lib.from_dict(r.config_cls, config_lib.load_yaml(cfg_path))
    return r, cfg


def open_run(
    run_dir: str | Path,
    *,
    recipe: Recipe | str | None = None,
    devices: Sequence[jax.Device] | None = None,
    step: int | None = None,
    cfg: Any = None,
) -> OpenRun:
    """Reopens the run in ``run_dir`` on ``devices`` (default: one device).

    Args:
      run_dir: a directory written by ``jaxlab.core.loop.run``.
      recipe: the recipe expected (a run of another recipe is a ConfigError naming both).
      devices: the devices of the mesh to restore onto (the config's mesh over them).
      step: the checkpoint step (default: the newest complete one).
      cfg: build the parts with this config instead of the saved one (it must be
        checkpoint-compatible with the saved one, e.g. differing only in run control).
    """
    from jaxlab.core.checkpoint import Checkpointer

    run_dir = Path(run_dir)
    r, saved = read_run(run_dir, recipe)
    cfg = saved if cfg is None else cfg
    devices = list(devices) if devices is not None else jax.devices()[:1]
    if devices is not None and isinstance(getattr(cfg, "mesh", None), MeshConfig):
        if len(devices) == 1:
            cfg = config_lib.replace(
                cfg, **{f"mesh.{a}": 1 for a in ("data", "fsdp", "tensor", "expert")}
            )
    parts = build(r, cfg, devices)
    ck_dir = run_dir / "checkpoints"
    if not ck_dir.is_dir():
        raise RunNotFoundError(f"no checkpoint in {ck_dir}")
    ck = Checkpointer(ck_dir, saved, async_save=False, create=False)
    try:
        latest = ck.latest_step()
        if latest is None:
            raise RunNotFoundError(f"no checkpoint in {ck_dir}")
        state, got = ck.restore(abstract_state(parts, jax.random.PRNGKey(cfg.seed)), step=step)
    finally:
        ck.close()
    return OpenRun(r, cfg, parts, state, got, run_dir)

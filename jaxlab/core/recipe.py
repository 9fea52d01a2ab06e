"""What a runnable method gives the shared loop, and the registry of recipes.

A :class:`Recipe` names a method, its config dataclass, its presets and a ``build(cfg) -> Task``.
A :class:`Task` is the set of pure functions the loop drives (see ``jaxlab.core.loop.run``).
Recipes register themselves on import; :func:`get` imports the recipe modules listed in
``jaxlab.recipes.MODULES`` lazily, so ``jaxlab list`` does not pay for every family's imports.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxlab.core import config as config_lib


@dataclasses.dataclass(frozen=True)
class Task:
    """The pieces of one training run.

    Attributes:
      init: ``key -> state``; a pure function building the train state pytree.
      train_step: ``(state, batch) -> (state, metrics)``; pure and jit-able. RL and synthetic-data
        recipes get ``batch=None`` and carry their PRNG key in the state.
      evaluate: optional host-side ``state -> dict`` of scalars (may jit inside).
      data: optional ``() -> iterator`` of numpy batch pytrees (a grain ``DatasetIterator`` so its
        position is checkpointed).
      finalize: optional ``(state, run_dir) -> None`` writing artefacts (plots, GIFs, tables).
      units_per_step: optional (count, name) for the progress bar, e.g. ``(4096, "tok")``.
      place_batch: optional ``batches -> batches`` putting the host batches of one call (leading axis
        = steps of the call) on the devices, e.g. sharded over the mesh's data axes.
      state_sharding: optional ``abstract_state -> shardings`` pytree, so a checkpoint restores
        onto this run's mesh (which may differ from the mesh it was written on).
    """

    init: Callable[[Any], Any]
    train_step: Callable[[Any, Any], tuple[Any, dict[str, Any]]]
    evaluate: Callable[[Any], dict[str, Any]] | None = None
    data: Callable[[], Any] | None = None
    finalize: Callable[[Any, Path], None] | None = None
    units_per_step: tuple[int, str] | None = None
    place_batch: Callable[[Any], Any] | None = None
    state_sharding: Callable[[Any], Any] | None = None


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A runnable method: a name, its config class, presets on disk, and how to build a Task."""

    name: str
    config_cls: type
    build: Callable[[Any], Task]
    description: str = ""
    presets_dir: Path | None = None
    default_preset: str | None = None
    #: optional ``(cfg, run_dir, argv) -> exit status`` for recipe-specific ``jaxlab eval`` options
    eval_main: Callable[[Any, Path, list[str]], int] | None = None
    #: optional ``(cfg, run_dir) -> hooks`` (``jaxlab.core.loop.Hook``) added to every run
    hooks: Callable[[Any, Path], Any] | None = None

    def presets(self) -> list[str]:
        if self.presets_dir is None or not Path(self.presets_dir).is_dir():
            return []
        return sorted(p.stem for p in Path(self.presets_dir).glob("*.yaml"))

    def preset_mapping(self, name: str | None) -> dict[str, Any]:
        name = name or self.default_preset
        if name is None:
            return {}
        available = self.presets()
        if name not in available:
            raise config_lib.ConfigError(
                "preset",
                name,
                "one of: " + ", ".join(available or ["(none)"]),
                config_lib.suggest(name, available),
            )
        return config_lib.load_yaml(Path(self.presets_dir) / f"{name}.yaml")

    def config(self, preset: str | None = None, overrides: tuple[str, ...] | list[str] = ()) -> Any:
        """The resolved config: defaults, then the preset, then dotted overrides."""
        return config_lib.resolve(
            self.config_cls, preset=self.preset_mapping(preset), overrides=overrides
        )


_REGISTRY: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    """Adds a recipe to the registry (idempotent for the same name and config class)."""
    old = _REGISTRY.get(recipe.name)
    if old is not None and old.config_cls is not recipe.config_cls:
        raise ValueError(f"recipe name '{recipe.name}' is already registered")
    _REGISTRY[recipe.name] = recipe
    return recipe


def _load_all() -> None:
    from jaxlab import recipes

    for mod in recipes.MODULES:
        importlib.import_module(f"jaxlab.recipes.{mod}")


def names() -> list[str]:
    """All recipe names."""
    from jaxlab import recipes

    return sorted(recipes.NAMES)


def get(name: str) -> Recipe:
    """The recipe called ``name``; an unknown name is a ConfigError with the closest name."""
    from jaxlab import recipes

    if name not in recipes.NAMES:
        raise config_lib.ConfigError(
            "recipe",
            name,
            "one of: " + ", ".join(sorted(recipes.NAMES)),
            config_lib.suggest(name, recipes.NAMES),
        )
    importlib.import_module(f"jaxlab.recipes.{recipes.NAMES[name]}")
    return _REGISTRY[name]

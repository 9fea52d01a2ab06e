"""The recipe interface: what a runnable method gives ``core``, and the registry of recipes.

A :class:`Recipe` names a method, its config dataclass and presets, and ``build(cfg, mesh) ->
Parts``. :class:`Parts` are the pure pieces of one run *built for a given mesh*; ``core`` owns the
rest of a run's life through them:

* ``jaxlab.core.loop.run`` trains (compiling, K steps per call, checkpoints, resume, evaluation);
* ``jaxlab.core.run.open_run(run_dir)`` reopens any run (recipe, config, restored state, step) on
  any mesh, for evaluation, generation or fine-tuning;
* ``jaxlab.core.lowering.lower(recipe, cfg, mesh)`` compiles the train step ahead of time for a
  TPU slice from ``Parts.abstract_batch`` and ``Parts.state_sharding``;
* ``jaxlab.core.sweep.sweep`` runs seeds and the recipe's *traced* hyper-parameters
  (:attr:`Recipe.traced`) as one vmapped program.

Writing a new recipe (no change in ``core``, ``cli.py`` or other recipes)::

    @dataclasses.dataclass(frozen=True)
    class MyConfig:            # frozen, typed; nests the family's configs, never copies fields
        seed: int = 0
        model: MyModelConfig = MyModelConfig()     # the family's config, validated there
        optim: OptimConfig = OptimConfig(lr=1e-3)  # jaxlab.core.optim; traced lr, weight decay
        mesh: MeshConfig = MeshConfig()
        loop: LoopConfig = LoopConfig()

    def build(cfg: MyConfig, mesh: Mesh) -> Parts:
        def init(key):         # -> a flax.struct state with a field ``hparams``
            ...
            return MyState(params, opt_state, hparams=optim.hparams(cfg.optim))
        def train_step(state, batch):
            opt = optim.from_hparams(cfg.optim, cfg.loop.total_steps, state.hparams)
            ...
        return Parts(init=init, train_step=train_step, abstract_batch=...)

    RECIPE = register(Recipe("my-method", MyConfig, build, traced=optim.traced_keys()))

with its presets in ``presets/my-method/*.yaml`` beside the module that defines ``build``, and one
entry point in pyproject.toml's ``[project.entry-points."jaxlab.recipes"]`` table
(``my-method = "jaxlab.recipes.my_method"``), which is how ``core`` finds a recipe by name without
importing the recipes package. A recipe defined elsewhere (a test, a user's script) is registered
by :func:`register` when its module is imported, or passed to the core functions directly.

Recipes never import other recipes or the CLI: what two recipes share lives in their family.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab.core import config as config_lib


@dataclasses.dataclass(frozen=True)
class Parts:
    """The pure pieces of one run, built for one mesh by :attr:`Recipe.build`.

    Attributes:
      init: ``key -> state``; a pure function building the train state pytree. When the recipe
        has traced hyper-parameters, the state is a ``flax.struct`` dataclass with a field
        ``hparams`` (a ``dict[str, Array]`` of scalars keyed by dotted config key) holding their
        values from the config (:func:`hparams_of`); ``core`` may replace them (sweeps, an
        allowed change on resume).
      train_step: ``(state, batch) -> (state, metrics)``; pure and jit-able. RL and synthetic-data
        recipes get ``batch=None`` and carry their PRNG key in the state.
      abstract_batch: one step's *global* batch as a pytree of ``jax.ShapeDtypeStruct`` whose
        ``sharding`` places it on the mesh (``None``: no data). The loop shards host batches with
        these shardings, and ``lower`` compiles against it.
      state_sharding: ``abstract_state -> shardings`` (same tree), so the state is created,
        restored and lowered on this mesh (``None``: :func:`state_sharding_of`'s default, leaves
        boxed with logical axis names placed by the mesh rules and the rest replicated).
      data: ``() -> iterator`` of host-local numpy batches (a grain ``DatasetIterator``, so its
        position is checkpointed); required when ``abstract_batch`` is given.
      evaluate: host-side ``state -> dict`` of scalars (may jit inside).
      finalize: ``(state, run_dir) -> None`` writing the run's artefacts (plots, GIFs, tables).
      units_per_step: ``(count, name)`` for the progress bar, e.g. ``(4096, "tok")``.
    """

    init: Callable[[Any], Any]
    train_step: Callable[[Any, Any], tuple[Any, dict[str, Any]]]
    abstract_batch: Any = None
    state_sharding: Callable[[Any], Any] | None = None
    data: Callable[[], Any] | None = None
    evaluate: Callable[[Any], dict[str, Any]] | None = None
    finalize: Callable[[Any, Path], None] | None = None
    units_per_step: tuple[int, str] | None = None


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A runnable method.

    Attributes:
      name: the command-line name (``jaxlab train NAME``).
      config_cls: its frozen config dataclass (fields ``seed`` and ``loop`` are required; a
        ``mesh: MeshConfig`` field places it on a mesh, else it runs on one device).
      build: ``(cfg, mesh) -> Parts``.
      description: one line for ``jaxlab list``.
      presets_dir: folder of ``<preset>.yaml`` files (default: ``presets/<name>`` beside the module
        that defines ``build``); ``default_preset`` is used when none is named.
      traced: dotted config keys of float hyper-parameters that are traced values in the state
        (``state.hparams``), so ``jaxlab sweep`` vmaps over them in one compiled program and a
        resume may change them when allowed.
      finetune: ``(cfg, state) -> state``: called by the loop on a fresh start (not on resume),
        e.g. to load another run's parameters (opened with ``core.run.open_run``) named by the
        config; it returns ``state`` unchanged when the config names no source.
      eval_main: ``(cfg, run_dir, argv) -> exit status`` for recipe-specific ``jaxlab eval``
        options (it opens the run with ``core.run.open_run``); without it ``jaxlab eval`` prints
        ``Parts.evaluate`` of the opened run.
      hooks: ``(cfg, run_dir) -> [jaxlab.core.loop.Hook]`` added to every run.
    """

    name: str
    config_cls: type
    build: Callable[[Any, jax.sharding.Mesh], Parts]
    description: str = ""
    presets_dir: Path | None = None
    default_preset: str | None = None
    traced: tuple[str, ...] = ()
    finetune: Callable[[Any, Any], Any] | None = None
    eval_main: Callable[[Any, Path, list[str]], int] | None = None
    hooks: Callable[[Any, Path], Any] | None = None

    def __post_init__(self):
        if self.presets_dir is None:
            module = sys.modules.get(getattr(self.build, "__module__", ""), None)
            where = getattr(module, "__file__", None)
            if where is not None:
                object.__setattr__(self, "presets_dir", Path(where).parent / "presets" / self.name)

    def parts(self, cfg: Any, mesh: jax.sharding.Mesh) -> Parts:
        """``build(cfg, mesh)`` with the interface's defaults filled in: a state sharding from
        :func:`state_sharding_of` when the recipe gives none."""
        parts = self.build(cfg, mesh)
        if parts.state_sharding is None:
            parts = dataclasses.replace(parts, state_sharding=state_sharding_of(parts, mesh))
        return parts

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


def config_value(cfg: Any, key: str) -> Any:
    """The value of dotted ``key`` in ``cfg`` (a ConfigError naming the key if there is none)."""
    obj = cfg
    for part in key.split("."):
        if not dataclasses.is_dataclass(obj) or not hasattr(obj, part):
            flat = config_lib.flatten(config_lib.to_dict(cfg))
            raise config_lib.ConfigError(
                key, None, "an existing config key", config_lib.suggest(key, flat)
            )
        obj = getattr(obj, part)
    return obj


def hparams_of(recipe: Recipe, cfg: Any) -> dict[str, np.float32]:
    """The traced hyper-parameters of ``recipe`` as NumPy float32 scalars, valued from ``cfg``."""
    return {k: np.float32(config_value(cfg, k)) for k in recipe.traced}


def with_hparams(state: Any, hparams: Mapping[str, Any]) -> Any:
    """``state`` with its ``hparams`` field replaced (each value a float32 array)."""
    if not hparams:
        return state
    current = getattr(state, "hparams", None)
    if not isinstance(current, dict):
        raise TypeError(
            "a recipe with traced hyper-parameters needs a state with a dict field 'hparams'"
        )
    new = dict(current)
    for k, v in hparams.items():
        if k not in current:
            raise config_lib.ConfigError(k, v, "one of the traced keys " + ", ".join(current))
        new[k] = jax.numpy.asarray(v, jax.numpy.float32)
    return state.replace(hparams=new)


def state_sharding_of(parts: Parts, mesh: jax.sharding.Mesh) -> Callable[[Any], Any]:
    """``parts.state_sharding``, or the default: :func:`jaxlab.core.sharding.state_shardings` on
    ``mesh`` (logical-axis rules for boxed leaves, replicated otherwise)."""
    if parts.state_sharding is not None:
        return parts.state_sharding
    from jaxlab.core.sharding import state_shardings

    return lambda abstract: state_shardings(abstract, mesh)


#: the entry-point group through which installed packages name their recipe modules
ENTRY_POINT_GROUP = "jaxlab.recipes"

_REGISTRY: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    """Adds a recipe to the registry (idempotent for the same name and config class)."""
    old = _REGISTRY.get(recipe.name)
    if old is not None and old.config_cls is not recipe.config_cls:
        raise ValueError(f"recipe name '{recipe.name}' is already registered")
    _REGISTRY[recipe.name] = recipe
    return recipe


def _entry_points() -> dict[str, str]:
    """Recipe name -> module, from the installed packages' ``jaxlab.recipes`` entry points."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """The installed recipes' names (entry points; a recipe registered only in this process, e.g.
    by a test, is reached with :func:`get` but not listed)."""
    return sorted(_entry_points())


def get(name: str) -> Recipe:
    """The recipe called ``name`` (importing its module on first use); an unknown name is a
    ConfigError with the closest name."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    modules = _entry_points()
    if name not in modules:
        known = names()
        raise config_lib.ConfigError(
            "recipe",
            name,
            "one of: " + ", ".join(known),
            config_lib.suggest(name, known),
        )
    importlib.import_module(modules[name].split(":")[0])
    if name not in _REGISTRY:
        raise config_lib.ConfigError(
            "recipe", name, f"a recipe registered by its module {modules[name]}"
        )
    return _REGISTRY[name]

"""Every preset of every recipe resolves, builds and has an initial state, so a preset that cannot
run is caught here and not at the end of a run.

For each (recipe, preset): the config resolves (``RECIPE.config(preset)``: YAML keys exist, values
pass validation); the recipe builds on one device (mesh forced to one device: the preset's own
mesh is for its target slice and is checked by ``tests/core/test_tpu_configs.py``); and its
``init`` evaluates abstractly (``jax.eval_shape``: traced, never compiled or run, so even the
7B-parameter OLMoE preset costs only its trace).

Presets in :data:`NEEDS_RUN` start from the trained state of another run (fine-tuning, a
pretrained diffusion model); no such run exists in a fresh checkout, so they are checked for config
validity only, plus that building without the run is refused with a ConfigError naming the field.
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

from jaxlab import recipes
from jaxlab.core import config as config_lib
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.sharding import MESH_AXES, MeshConfig
from tests.typecheck import unchecked

PRESETS_ROOT = Path(recipes.__file__).parent / "presets"

NEEDS_RUN: dict[tuple[str, str], str] = {
    ("kinetix-ppo", "finetune"): "init_from",  # fine-tunes a pretraining run's agent
    ("ld3", "digits"): "checkpoint",  # learns the timesteps of a trained diffusion model
}
"""(recipe, preset) -> the config field naming the run it starts from."""

SLOW: set[tuple[str, str]] = {
    # the init of the pretraining presets generates and no-op-filters their training levels; the
    # trace alone takes 20-30 s on the 2-core test machine
    ("kinetix-ppo", "s-pretrain"),
    ("kinetix-ppo", "m-pretrain"),
    ("kinetix-ppo", "l-pretrain"),
}


def preset_cases() -> list:
    """(recipe, preset) pairs from the preset folders (no recipe import at collection time)."""
    cases = []
    for name in recipe_lib.names():
        for path in sorted((PRESETS_ROOT / name).glob("*.yaml")):
            marks = [pytest.mark.slow] if (name, path.stem) in SLOW else []
            cases.append(pytest.param(name, path.stem, id=f"{name}:{path.stem}", marks=marks))
    return cases


CASES = preset_cases()


def one_device(cfg):
    """``cfg`` with every mesh axis of size 1 (recipes without a mesh run on one device)."""
    if isinstance(getattr(cfg, "mesh", None), MeshConfig):
        return config_lib.replace(cfg, **{f"mesh.{axis}": 1 for axis in MESH_AXES})
    return cfg


def test_cases_cover_every_preset_of_every_recipe():
    found = {(c.values[0], c.values[1]) for c in CASES}
    want = {(name, p) for name in recipe_lib.names() for p in recipe_lib.get(name).presets()}
    assert found == want
    assert {name for name, _ in found} == set(recipe_lib.names())  # every recipe has presets
    assert set(NEEDS_RUN) <= found and SLOW <= found


@pytest.mark.parametrize(("name", "preset"), CASES)
def test_preset_resolves_builds_and_initialises(name, preset, tmp_path):
    recipe = recipe_lib.get(name)
    if (name, preset) in NEEDS_RUN:
        field = NEEDS_RUN[(name, preset)]
        try:
            cfg = recipe.config(preset)
        except config_lib.ConfigError as err:  # the preset leaves the run to the command line
            assert err.key == field, err
            cfg = recipe.config(preset, overrides=[f"{field}={tmp_path / 'no-run'}"])
        assert isinstance(cfg, recipe.config_cls)
        assert recipe_lib.config_value(cfg, field)
        # the missing run is refused by its field: at build (ld3 loads its teacher there) or when
        # a fresh run starts from it (Recipe.finetune, kinetix-ppo), before touching any state
        with pytest.raises(config_lib.ConfigError, match=field):
            run_lib.build(recipe, one_device(cfg), jax.devices()[:1])
            if recipe.finetune is not None:
                unchecked(recipe.finetune)(cfg, None)  # no state: refused before it is read
        return
    cfg = recipe.config(preset)
    assert isinstance(cfg, recipe.config_cls)
    assert recipe.config(preset) == cfg  # resolution is deterministic (configs are hashable)
    parts = run_lib.build(recipe, one_device(cfg), jax.devices()[:1])
    state = jax.eval_shape(parts.init, jax.random.key(0))
    leaves = jax.tree.leaves(state)
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    assert sum(x.size for x in leaves) > 0
    if recipe.traced:  # the traced hyper-parameters are in the state, valued from the preset
        assert set(state.hparams) == set(recipe.traced)

"""Every recipe's learning rate sweeps as one vmapped program: the program ``jaxlab sweep RECIPE
optim.lr=a,b --seeds 2`` compiles is lowered from abstract values at the recipe's tiny preset."""

from __future__ import annotations

import pytest

from jaxlab.core import recipe as recipe_lib
from jaxlab.core import sweep as sweep_lib
from tests.recipes.test_presets import one_device


@pytest.mark.parametrize("name", recipe_lib.names())
def test_learning_rate_sweep_lowers_as_one_program(name):
    recipe = recipe_lib.get(name)
    rates = [k for k in recipe.traced if k.startswith("optim.") and k.endswith(".lr")]
    assert rates, f"{name} traces no optim.*.lr (traced: {recipe.traced})"
    preset = "tiny" if "tiny" in recipe.presets() else None
    cfg = one_device(recipe.config(preset))
    axes = {
        k: [recipe_lib.config_value(cfg, k), 2 * recipe_lib.config_value(cfg, k)] for k in rates
    }
    lowered = sweep_lib.lower_program(recipe, cfg, axes, seeds=[0, 1])
    points = 2 ** len(rates) * 2
    text = lowered.as_text()
    assert f"{points}x" in text or f"[{points}," in text or f"<{points}x" in text

"""task-arithmetic recipe: the tiny preset fine-tunes through the shared loop and writes heat maps."""

import json

import pytest

from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError

RECIPE = recipe_lib.get("task-arithmetic")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = RECIPE.config("tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert 0.0 <= result.eval_metrics["irrelevant_add_T1"] <= 1.0
    table = json.loads((tmp_path / "results.json").read_text())
    assert set(table) == {"irrelevant", "aligned", "contradictory"}
    assert set(table["aligned"]) == {"full", "low_rank", "pruned"}
    for rel in table:
        for panel in ("T1", "T2", "both", "ood"):
            assert (tmp_path / f"heatmap_{rel}_{panel}.png").read_bytes()[:4] == b"\x89PNG"


def test_finetune_step_data_parallel_equals_one_device():
    """Each fine-tuning batch split over 8 simulated devices: two steps equal one device."""
    from jaxlab.core.testing import sharded_step_matches

    cfg = RECIPE.config("tiny", ["experiment.batch=16"])
    sharded_step_matches(RECIPE, cfg, {"mesh.data": 8}, steps=2)


def test_fine_tuning_steps_are_loop_total_steps_only():
    """``experiment.steps`` is no key: the fine-tuning length is ``loop.total_steps``."""
    with pytest.raises(ConfigError, match="'experiment.steps'"):
        RECIPE.config("tiny", ["experiment.steps=5"])

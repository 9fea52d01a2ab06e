"""distill recipe: the tiny preset trains the teacher through the shared loop and writes its plots."""

import json

import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError

RECIPE = recipe_lib.get("distill")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = RECIPE.config("tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert 0.0 <= result.eval_metrics["teacher_accuracy"] <= 1.0
    out = json.loads((tmp_path / "results.json").read_text())
    n_ckpt = cfg.loop.total_steps // cfg.checkpoint_every
    assert out["checkpoint_steps"] == [cfg.checkpoint_every * (i + 1) for i in range(n_ckpt)]
    assert set(out["samples_to_95"]) == {"progressive", "two_shot", "one_shot", "labels"}
    assert np.asarray(out["student_accuracy"]["labels"]).shape == (cfg.seeds, 2)
    for name in ("teacher_loss.png", "teacher_probes.png", "students.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_config_needs_intermediate_checkpoints():
    with pytest.raises(ConfigError, match="checkpoint_every"):
        C.replace(RECIPE.config("tiny"), checkpoint_every=100)
    with pytest.raises(ConfigError, match="'k'"):
        C.replace(RECIPE.config("tiny"), k=9)


def test_teacher_step_data_parallel_equals_one_device():
    """The teacher batch split over 8 simulated devices: two SGD steps equal one device
    (parameters, snapshots, losses)."""
    from jaxlab.core.testing import sharded_step_matches

    sharded_step_matches(RECIPE, RECIPE.config("tiny"), {"mesh.data": 8}, steps=2)

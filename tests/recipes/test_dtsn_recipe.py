"""dtsn recipe end to end: the tiny presets train through the shared loop, evaluate on held-out
layouts/instances and write the GIF; a run resumed from its mid-run checkpoint ends bit-identical
to an uninterrupted one."""

import json

import jax
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop, run
from jaxlab.core import recipe as recipe_lib

RECIPE = recipe_lib.get("dtsn")


def test_tiny_maze_preset_runs_evaluates_and_draws(tmp_path):
    cfg = RECIPE.config("tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    m = result.eval_metrics
    assert 0.0 <= m["success_rate"] <= 1.0 and m["path_length_ratio"] >= 0.0
    out = json.loads((tmp_path / "results.json").read_text())
    assert out["method"] == "dtsn" and out["gif"]["steps"] >= 1
    from PIL import Image

    with Image.open(tmp_path / "episode.gif") as gif:  # PIL merges repeated frames
        assert 1 <= gif.n_frames <= out["gif"]["steps"] + 1 and gif.size == (144, 144)


def test_resume_is_bit_identical(tmp_path):
    cfg = C.replace(RECIPE.config("tiny"), **{"gif": False})
    full = loop.run(RECIPE, cfg, tmp_path / "full")
    half = C.replace(cfg, **{"loop.total_steps": 4})
    loop.run(RECIPE, half, tmp_path / "resumed")
    resumed = loop.run(RECIPE, cfg, tmp_path / "resumed")
    assert resumed.step == full.step == 8
    a = run.open_run(tmp_path / "full").state
    b = run.open_run(tmp_path / "resumed").state
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(_raw(x), _raw(y))


def _raw(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


@pytest.mark.slow
def test_tiny_game24_preset_runs(tmp_path):
    cfg = RECIPE.config("game24-tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert 0.0 <= result.eval_metrics["success_rate"] <= 1.0


def test_step_data_parallel_equals_one_device():
    """The sampled transitions split over 8 simulated devices: two Adam steps of the D-TSN
    objective (search, REINFORCE, consistency losses) equal one device."""
    from jaxlab.core.testing import sharded_step_matches

    sharded_step_matches(
        RECIPE, RECIPE.config("tiny"), {"mesh.data": 8}, steps=2, rtol=1e-4, atol=1e-5
    )

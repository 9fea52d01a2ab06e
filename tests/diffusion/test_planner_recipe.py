"""The planner recipe end to end on its tiny preset, and 8 devices equal one."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import run
from jaxlab.core.testing import sharded_step_matches
from jaxlab.core.tracking import read_metrics
from jaxlab.diffusion import planner_training
from jaxlab.recipes import planner as planner_recipe


@pytest.fixture(scope="module")
def tiny():
    cfg = planner_recipe.RECIPE.config("tiny")
    return cfg, run_lib.build(planner_recipe.RECIPE, cfg)


def test_planner_tiny_trains_and_evaluates_in_closed_loop(tiny, tmp_path):
    recipe = planner_recipe.RECIPE
    res = run(recipe, tiny[0], tmp_path, parts=tiny[1])
    assert res.step == 20
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert rows and all(np.isfinite(r["loss"]) for r in rows)
    m = res.eval_metrics
    assert {"open_loop/ade", "diffusion/score", "diffusion/collision"} <= set(m)
    assert 0.0 <= m["diffusion/score"] <= 100.0 and np.isfinite(m["open_loop/ade"])
    for k in ("jump_rate", "backward_rate", "offroad_time", "comfortable"):
        assert 0.0 <= m[f"diffusion/{k}"] <= 1.0, (k, m[f"diffusion/{k}"])
    assert np.isfinite(m["diffusion/max_jump"])
    cfg = recipe.config("tiny")
    assert cfg.model.guidance == (("collision", 0.5),)
    with pytest.raises(ConfigError, match="--scenes"):
        recipe.eval_main(cfg, tmp_path, ["--scenes", "0"])


def test_planner_eight_devices_equal_one(tiny):
    """One call of the loop's 10-step function (the tiny run's, compiled by the end-to-end test
    in this module) on one device and on 8."""
    recipe = planner_recipe.RECIPE
    cfg, parts = tiny
    assert cfg.loop.steps_per_call == 10 and cfg.batch_size % 8 == 0
    _, s8 = sharded_step_matches(
        recipe, cfg, {"mesh.data": 8}, steps=10, rtol=1e-4, atol=1e-5, parts=parts, chunk=10
    )
    assert set(s8.hparams) == {"optim.lr", "optim.weight_decay", "ema_decay"}
    assert jax.tree.leaves(s8.params)


def test_lr_schedule_warms_up_then_holds_or_decays_to_zero():
    base = planner_recipe.RECIPE.config("tiny")
    base = dataclasses.replace(
        base,
        optim=dataclasses.replace(base.optim, warmup_steps=10),
        loop=dataclasses.replace(base.loop, total_steps=110),
    )

    def with_schedule(name):
        return dataclasses.replace(base, optim=dataclasses.replace(base.optim, schedule=name))

    const = planner_training.lr_unit(base)
    cos = planner_training.lr_unit(with_schedule("cosine"))
    lin = planner_training.lr_unit(with_schedule("linear"))
    for unit in (const, cos, lin):
        np.testing.assert_allclose(
            [float(unit(0)), float(unit(5)), float(unit(10))], [0.0, 0.5, 1.0]
        )
    assert float(const(110)) == 1.0
    # half-way through the decay the cosine and the linear decay are at one half; zero at
    # total_steps
    np.testing.assert_allclose(float(cos(60)), 0.5, atol=1e-6)
    np.testing.assert_allclose(float(lin(60)), 0.5, atol=1e-6)
    assert float(cos(110)) == 0.0 and float(cos(35)) > float(cos(85)) > 0.0
    assert float(lin(110)) == 0.0
    with pytest.raises(ConfigError, match="optim.schedule"):
        planner_recipe.RECIPE.config("tiny", ["optim.schedule=step"])
    # a decay tail: constant to step 60, then linear to zero at total_steps (110)
    wsd = planner_training.lr_unit(dataclasses.replace(base, decay_fraction=50 / 110))
    np.testing.assert_allclose(
        [float(wsd(v)) for v in (5, 10, 40, 60, 85, 110)], [0.5, 1.0, 1.0, 1.0, 0.5, 0.0], atol=1e-6
    )
    with pytest.raises(ConfigError, match="decay_fraction"):
        dataclasses.replace(base, decay_fraction=1.0)
    with pytest.raises(ConfigError, match="decay_fraction"):
        dataclasses.replace(with_schedule("cosine"), decay_fraction=0.1)


def test_static_scene_weight_weighs_scenes_with_a_parked_car():
    base = planner_recipe.RECIPE.config("tiny")
    scene = {"static_valid": np.array([[False, False], [True, False], [False, True]])}
    assert planner_training.scene_weights(base, scene) is None  # 1: the unweighted loss
    w = planner_training.scene_weights(dataclasses.replace(base, static_scene_weight=3.0), scene)
    np.testing.assert_array_equal(w, [1.0, 3.0, 3.0])
    with pytest.raises(ConfigError, match="static_scene_weight"):
        dataclasses.replace(base, static_scene_weight=0.0)


@pytest.mark.parametrize(
    "override, key",
    [
        ("model.dt=-1", "model.dt"),
        ("ema_decay=2.0", "ema_decay"),
        ("model.guidance_window=[0.2,0.1]", "model.guidance_window"),
        ("model.guidance_window=[0.0,1.5]", "model.guidance_window"),
        ("model.guidance_window=[-0.1,0.1]", "model.guidance_window"),
        ("model.guidance_window=[0.1]", "model.guidance_window"),
        ("model.guidance=[[drivable,1.0],[collision,-0.5]]", "model.guidance[1].weight"),
        ("model.guidance=[[collision,-1.0]]", "model.guidance[0].weight"),
        ("model.guidance_max_shift=-1", "model.guidance_max_shift"),
        ("model.guidance_max_shift=.nan", "model.guidance_max_shift"),
        ("optim.lr=0", "optim.lr"),
        ("agent_type_probs=[1.0,-0.5,0.0]", "agent_type_probs"),
        ("agent_type_probs=[1.0,0.0]", "agent_type_probs"),
        ("perception_range=-5", "perception_range"),
        ("model.n_route=0", "model.n_route"),
    ],
)
def test_config_errors_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        planner_recipe.RECIPE.config("tiny", [override])

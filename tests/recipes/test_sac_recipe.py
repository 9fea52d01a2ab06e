"""The ``sac`` recipe through the shared loop: trains and evaluates, and resume is bit-identical
(networks, Adam states, the replay buffer, env states and the key)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.testing import assert_bit_identical, cut_back_copy
from jaxlab.core.tracking import read_metrics
from jaxlab.recipes.sac import RECIPE


@pytest.fixture(scope="module")
def tiny():
    """The tiny config and its parts, shared by the module's runs (one compilation of the step,
    evaluation and init for all of them)."""
    cfg = RECIPE.config("tiny")
    return cfg, run_lib.build(RECIPE, cfg)


@pytest.fixture(scope="module")
def full(tiny, tmp_path_factory):
    cfg, parts = tiny
    return loop.run(RECIPE, cfg, tmp_path_factory.mktemp("full"), parts=parts)


def test_tiny_trains_and_evaluates(full):
    assert full.step == 8
    rows = read_metrics(full.run_dir)
    assert [r["step"] for r in rows if "critic_loss" in r] == [2, 4, 6, 8]
    ev = [r for r in rows if "eval/return" in r or "return" in r]
    assert ev and all(np.isfinite(v) for v in ev[-1].values() if isinstance(v, float))
    assert int(full.state.iteration) == 8


def test_resume_is_bit_identical_including_the_replay_buffer(tiny, full, tmp_path):
    # a copy of the full run cut back to its step-4 checkpoint, resumed to the end
    run_dir = cut_back_copy(full.run_dir, tmp_path / "resumed", 4)
    cfg, parts = tiny
    resumed = loop.run(RECIPE, cfg, run_dir, parts=parts)
    assert resumed.step == 8
    assert_bit_identical(full.state, resumed.state)
    assert int(np.asarray(resumed.state.buffer.current_index)) > 0


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="buffer_size"):
        RECIPE.config("tiny", ["off_policy.buffer_size=4"])
    with pytest.raises(ConfigError, match="goal"):
        RECIPE.config("tiny", ["goal=[3.0,0.0]"])
    with pytest.raises(ConfigError, match="optim.critic.lr"):
        RECIPE.config("tiny", ["optim.critic.lr=-1"])


def test_replay_batch_data_parallel_equals_one_device(tiny, full):
    """Each gradient step's replay batch split over 8 simulated devices: four SAC iterations
    (learning starts at the second) equal one device, buffer and targets included. The
    one-device leg is the tiny run's own two-step function (compiled by ``full``)."""
    from jaxlab.core.testing import sharded_step_matches

    cfg, parts = tiny
    assert cfg.loop.steps_per_call == 2
    sharded_step_matches(
        RECIPE, cfg, {"mesh.data": 8}, steps=4, rtol=1e-4, atol=1e-5, parts=parts, chunk=2
    )

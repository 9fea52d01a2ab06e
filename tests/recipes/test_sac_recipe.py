"""The ``sac`` recipe through the shared loop: trains and evaluates, and resume is bit-identical
(networks, Adam states, the replay buffer, env states and the key)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.core.config import ConfigError
from jaxlab.core.tracking import read_metrics
from jaxlab.recipes.sac import RECIPE


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return loop.run(RECIPE, RECIPE.config("tiny"), tmp_path_factory.mktemp("full"))


def test_tiny_trains_and_evaluates(full):
    assert full.step == 8
    rows = read_metrics(full.run_dir)
    assert [r["step"] for r in rows if "critic_loss" in r] == [2, 4, 6, 8]
    ev = [r for r in rows if "eval/return" in r or "return" in r]
    assert ev and all(np.isfinite(v) for v in ev[-1].values() if isinstance(v, float))
    assert int(full.state.iteration) == 8


def test_resume_is_bit_identical_including_the_replay_buffer(full, tmp_path):
    half = loop.run(RECIPE, RECIPE.config("tiny", ["loop.total_steps=4"]), tmp_path)
    assert half.step == 4
    resumed = loop.run(RECIPE, RECIPE.config("tiny"), tmp_path)
    assert resumed.step == 8
    a, b = jax.tree.leaves(full.state), jax.tree.leaves(resumed.state)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        x, y = jax.device_get(x), jax.device_get(y)
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    assert int(np.asarray(resumed.state.buffer.current_index)) > 0


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="buffer_size"):
        RECIPE.config("tiny", ["buffer_size=4"])
    with pytest.raises(ConfigError, match="goal"):
        RECIPE.config("tiny", ["goal=[3.0,0.0]"])


def test_replay_batch_data_parallel_equals_one_device():
    """Each gradient step's replay batch split over 8 simulated devices: three SAC iterations
    (learning starts at the second) equal one device, buffer and targets included."""
    from jaxlab.core.testing import sharded_step_matches

    sharded_step_matches(
        RECIPE, RECIPE.config("tiny"), {"mesh.data": 8}, steps=3, rtol=1e-4, atol=1e-5
    )

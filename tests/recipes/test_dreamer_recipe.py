"""The ``dreamer`` and ``ls-imagine`` recipes through the shared loop: train, evaluate and write
the imagination (and affordance) GIFs; resume is bit-identical (networks, Adam states, the
sequence buffer, env states, the acting latent and the key); a data-parallel step equals one
device.

The tiny run and its resumption share one build (``parts``), so the resumed run reuses the
compiled step, evaluation and media programs instead of compiling them again."""

from __future__ import annotations

import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.core import run as run_lib
from jaxlab.core.testing import assert_bit_identical, cut_back_copy
from jaxlab.core.tracking import read_metrics
from jaxlab.recipes.dreamer import LS_RECIPE, RECIPE


@pytest.fixture(scope="module")
def tiny():
    cfg = RECIPE.config("tiny")
    return cfg, run_lib.build(RECIPE, cfg)


@pytest.fixture(scope="module")
def full(tiny, tmp_path_factory):
    cfg, parts = tiny
    return loop.run(RECIPE, cfg, tmp_path_factory.mktemp("full"), parts=parts)


def test_tiny_trains_evaluates_and_writes_the_gif(full):
    assert full.step == 6
    rows = read_metrics(full.run_dir)
    learned = [r for r in rows if r.get("learning")]
    assert learned and all(np.isfinite(r["image_loss"]) for r in learned)
    assert (full.run_dir / "imagination.gif").stat().st_size > 0
    ev = [r for r in rows if any("success" in k for k in r)]
    assert ev
    # the open world's evaluation also reports the closest approach to the target: the easy
    # variant starts it 1.5-3 away
    near = [v for r in ev for k, v in r.items() if k.endswith("min_distance")]
    assert near and all(0.0 < v <= 3.0 for v in near), near


def test_resume_is_bit_identical_including_the_replay_buffer(tiny, full, tmp_path):
    # a copy of the full run cut back to its step-2 checkpoint, resumed to the end (one extra
    # run instead of two)
    run_dir = cut_back_copy(full.run_dir, tmp_path / "resumed", 2)
    cfg, parts = tiny
    resumed = loop.run(RECIPE, cfg, run_dir, parts=parts)
    assert resumed.step == 6
    assert_bit_identical(full.state, resumed.state)
    assert int(np.asarray(resumed.state.buffer.current_index)) > 0


def test_ls_imagine_tiny_trains_and_writes_affordance_maps(tmp_path):
    out = loop.run(LS_RECIPE, LS_RECIPE.config("tiny"), tmp_path)
    rows = read_metrics(out.run_dir)
    learned = [r for r in rows if r.get("learning")]
    assert learned and all(np.isfinite(r["jump_loss"]) for r in learned)
    assert (out.run_dir / "affordance.gif").stat().st_size > 0


def test_sequence_batch_data_parallel_equals_one_device(tiny, full):
    """Each update's replayed sequences split over 4 simulated devices: four iterations
    (learning from the fourth) equal one device. The one-device leg runs the tiny run's parts
    two steps per call, as the loop did (``full``): its step is compiled once in this module."""
    from jaxlab.core.testing import sharded_step_matches

    cfg, parts = tiny
    assert cfg.loop.steps_per_call == 2
    compiled = list(loop._COMPILED[id(parts)])
    sharded_step_matches(
        RECIPE, cfg, {"mesh.data": 4}, steps=4, rtol=1e-4, atol=1e-5, parts=parts, chunk=2
    )
    assert loop._COMPILED[id(parts)] == compiled  # the loop's own step, not a new one

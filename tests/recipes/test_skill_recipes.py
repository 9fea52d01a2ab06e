"""The ``metra`` and ``csf`` recipes through the shared loop: ``metra`` (two vmapped seeds) trains,
evaluates (coverage and goal success) and plots its skills, and resumes bit-identically (replay
buffer, dual variable, skills); ``csf``'s replay batch data parallel over simulated devices
equals one device (the two recipes share their wiring, ``recipes.skills``); bad config names
the field.

The tiny run and its resumption share one build (``parts``), so the resumed run reuses the
compiled step and evaluation instead of compiling them again."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.core import loop
from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.testing import assert_bit_identical, cut_back_copy
from jaxlab.core.tracking import read_metrics
from jaxlab.recipes.skills import CSF, METRA


@pytest.fixture(scope="module")
def tiny():
    cfg = METRA.config("tiny")
    return cfg, run_lib.build(METRA, cfg)


@pytest.fixture(scope="module")
def full(tiny, tmp_path_factory):
    cfg, parts = tiny
    return loop.run(METRA, cfg, tmp_path_factory.mktemp("full"), parts=parts)


def test_metra_tiny_trains_evaluates_and_plots(full):
    assert full.step == 8 and full.state.obs.shape == (2, 2, 2)  # [seed, env, xy]
    assert np.asarray(full.state.iteration).tolist() == [8, 8]
    a = jax.tree.leaves(full.state.phi)[0]
    assert not np.array_equal(a[0], a[1])  # two vmapped seeds, independent runs
    rows = read_metrics(full.run_dir)
    assert [r["step"] for r in rows if "phi_loss" in r] == [2, 4, 6, 8]
    ev = [r for r in rows if any(k.endswith("coverage") for k in r)][-1]
    keys = {k.split("/")[-1] for k in ev}
    assert {"coverage", "coverage_random", "coverage_zero", "goal_success"} <= keys
    assert {"directions", "directions_random", "directions_zero", "directions_seed1"} <= keys
    assert {"coverage_seed0", "coverage_seed1", "goal_success_seed1"} <= keys
    assert all(np.isfinite(v) for v in ev.values() if isinstance(v, float))
    assert (full.run_dir / "skills.png").stat().st_size > 1000


def test_metra_resume_is_bit_identical(tiny, full, tmp_path):
    # a copy of the full run cut back to its step-4 checkpoint, resumed to the end
    run_dir = cut_back_copy(full.run_dir, tmp_path / "resumed", 4)
    cfg, parts = tiny
    resumed = loop.run(METRA, cfg, run_dir, parts=parts)
    assert resumed.step == 8
    assert_bit_identical(full.state, resumed.state)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows if "phi_loss" in r] == [2, 4, 6, 8]  # cut back, then resumed


def test_csf_replay_batch_data_parallel_equals_one_device():
    """8 envs fill the replay batch at once, so both compared iterations learn (the second from
    the first's update), the batch split over 8 simulated devices."""
    import optax

    from jaxlab.core.testing import sharded_step_matches

    cfg = CSF.config("tiny", ["off_policy.num_envs=8", "off_policy.learning_starts=0"])
    single, _ = sharded_step_matches(CSF, cfg, {"mesh.data": 8}, steps=2, rtol=1e-4, atol=1e-5)
    for opt in (single.phi_opt, single.critic_opt):  # [seed] Adam step counts
        assert np.asarray(optax.tree_utils.tree_get(opt, "count")).tolist() == [2, 2]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("skills.skill_dim=0", "skills.skill_dim"),
        ("off_policy.buffer_size=4", "off_policy.buffer_size"),
        ("method=csf", "method"),
        ("seeds=0", "seeds"),
        ("eval.cell=0.0", "eval.cell"),
        ("optim.dual.lr=-1", "optim.dual.lr"),
        ("skills.infonce_coef=-1", "skills.infonce_coef"),
    ],
)
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        METRA.config("tiny", [override])


def test_maze_without_a_free_cell_and_goal_outside_the_arena_are_refused():
    from jaxlab.rl.skills.evaluate import check_goals

    with pytest.raises(ConfigError, match="layout"):
        envs.make("point-maze", layout=("###", "###"))
    env, _ = envs.make("point-mass-2d", size=1.0)
    assert check_goals(env, [[0.5, -0.5]]).shape == (1, 2)
    with pytest.raises(ConfigError, match="goals"):
        check_goals(env, [[0.5, 1.5]])
    maze, _ = envs.make("point-maze")
    with pytest.raises(ConfigError, match="goals"):
        check_goals(maze, [[0.5, 0.5]])  # a wall cell of the U-maze

"""dtsn recipe end to end: the tiny presets train through the shared loop, evaluate on held-out
layouts/instances and write the GIF; a run resumed from its mid-run checkpoint ends bit-identical
to an uninterrupted one (one shared maze run: the resumed run is a copy of it cut back to step 4)."""

import json
import shutil

import jax
import numpy as np
import pytest

from jaxlab.core import loop, run
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.tracking import read_metrics

RECIPE = recipe_lib.get("dtsn")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """One tiny maze run (checkpoints at steps 4 and 8), shared by the tests of this module; its
    parts are kept so that a resumed run reuses the compiled evaluation."""
    cfg = RECIPE.config("tiny")
    parts = run.build(RECIPE, cfg)
    return loop.run(RECIPE, cfg, tmp_path_factory.mktemp("full"), parts=parts), parts


def test_tiny_maze_preset_runs_evaluates_and_draws(full):
    result, _ = full
    cfg = RECIPE.config("tiny")
    assert result.step == cfg.loop.total_steps
    m = result.eval_metrics
    assert 0.0 <= m["success_rate"] <= 1.0 and m["path_length_ratio"] >= 0.0
    out = json.loads((result.run_dir / "results.json").read_text())
    assert out["method"] == "dtsn" and out["gif"]["steps"] >= 3
    from PIL import Image

    # a frame per step (the progress strip keeps a step where the agent stays put a frame of
    # its own) and the last one; the layout drawn is the longest of 16 held-out ones
    with Image.open(result.run_dir / "episode.gif") as gif:
        assert gif.n_frames == out["gif"]["steps"] + 1 and gif.size == (144, 144)
        edges = 0
        for i in range(gif.n_frames):
            gif.seek(i)
            f = np.asarray(gif.convert("RGB")).astype(int)
            edges += int(((f[..., 0] > 150) & (f[..., 1] < 120) & (f[..., 2] < 60)).sum())
    assert edges > 0  # the trees' edges are drawn


def test_resume_is_bit_identical(full, tmp_path):
    """A copy of the full run cut back to its mid-run checkpoint (its step-8 checkpoint removed;
    the loop drops the metrics rows past step 4) resumes to step 8 bit-identical to the
    uninterrupted run."""
    result, parts = full
    cfg = RECIPE.config("tiny")
    shutil.copytree(result.run_dir, tmp_path / "resumed")
    ckpts = tmp_path / "resumed" / "checkpoints"
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [4, 8]
    shutil.rmtree(ckpts / "8")
    resumed = loop.run(RECIPE, cfg, tmp_path / "resumed", parts=parts)
    assert resumed.step == result.step == 8
    rows = [r for r in read_metrics(tmp_path / "resumed") if "steps_per_s" in r]
    before = [r for r in read_metrics(result.run_dir) if "steps_per_s" in r]
    assert [r["step"] for r in rows] == [4, 8], rows
    # step 4's row (with its measured speed) is the original one: the run resumed, not restarted
    assert rows[0] == before[0]
    a = run.open_run(result.run_dir).state
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


def test_step_data_parallel_equals_one_device(full):
    """The sampled transitions split over 8 simulated devices: four Adam steps of the D-TSN
    objective (search, REINFORCE, consistency losses) equal one device. The one-device leg is
    the tiny run's own four-step function (compiled by ``full``)."""
    from jaxlab.core.testing import sharded_step_matches

    parts = full[1]
    cfg = RECIPE.config("tiny")
    assert cfg.loop.steps_per_call == 4
    sharded_step_matches(
        RECIPE, cfg, {"mesh.data": 8}, steps=4, rtol=1e-4, atol=1e-5, parts=parts, chunk=4
    )


@pytest.mark.parametrize(
    "override,key",
    [
        ("learner.wall_prob=1.5", "learner.wall_prob"),
        ("learner.height=2", "learner.height"),
        ("learner.latent_weight=-1", "learner.latent_weight"),
        ("learner.temperature=0", "learner.temperature"),
        ("optim.lr=-1", "optim.lr"),
        ("learner.num_demos=0", "learner.num_demos"),
        ("learner.eval_height=9", "learner.eval_height"),  # larger than the 6x6 map
        ("learner.map_width=5", "learner.width"),  # the 6x6 world does not fit
    ],
)
def test_config_errors_name_the_dotted_key(override, key):
    """A bad value is refused when the config is resolved, by its full dotted key."""
    with pytest.raises(ConfigError) as e:
        RECIPE.config("tiny", [override])
    assert e.value.key == key, str(e.value)

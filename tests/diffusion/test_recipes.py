"""The diffusion, ld3 and preference recipes end to end on their tiny presets (shared loop)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import run
from jaxlab.core.testing import sharded_step_matches
from jaxlab.core.tracking import read_metrics
from jaxlab.diffusion.ld3 import load_time_steps, make_teacher_data
from jaxlab.diffusion.ld3_run import model_and_schedule
from jaxlab.diffusion.pretrained import load_model
from jaxlab.diffusion.samplers import sample
from jaxlab.diffusion.schedules import get_time_steps
from jaxlab.recipes import diffusion as diffusion_recipe
from jaxlab.recipes import ld3 as ld3_recipe
from jaxlab.recipes import preference as preference_recipe


@pytest.fixture(scope="module")
def ring_run(tmp_path_factory):
    recipe = diffusion_recipe.RECIPE
    run_dir = tmp_path_factory.mktemp("ring")
    res = run(recipe, recipe.config("tiny"), run_dir)
    return run_dir, res


def test_diffusion_tiny_trains_writes_samples_and_reloads(ring_run):
    run_dir, res = ring_run
    assert res.step == 40
    rows = [r for r in read_metrics(run_dir) if "loss" in r]
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert (run_dir / "samples.png").is_file()
    assert {"sw_to_data", "sample_log_lik"} <= set(res.eval_metrics)
    model, ema = load_model(run_dir)
    for a, b in zip(jax.tree.leaves(ema), jax.tree.leaves(res.state.ema_params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert model.data_shape == (2,)


def test_diffusion_eight_devices_equal_one():
    """Two steps with the in-step batch split over 8 devices equal one device."""
    recipe = diffusion_recipe.RECIPE
    cfg = recipe.config("tiny", ["optim.lr=0.01", "optim.warmup_steps=1"])
    _, s8 = sharded_step_matches(recipe, cfg, {"mesh.data": 8}, steps=2)
    assert set(s8.hparams) == {"optim.lr", "ema_decay"}
    assert float(s8.hparams["optim.lr"]) == np.float32(0.01)


def test_diffusion_digits_tiny_writes_a_png_grid(tmp_path):
    recipe = diffusion_recipe.RECIPE
    res = run(recipe, recipe.config("digits-tiny"), tmp_path)
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert rows[-1]["loss"] < rows[0]["loss"]
    from PIL import Image

    img = Image.open(tmp_path / "samples.png")
    assert img.size[0] > 8 * 4 and res.step == 20


def test_ld3_tiny_writes_steps_the_samplers_accept(tmp_path):
    recipe = ld3_recipe.RECIPE
    cfg = recipe.config("tiny", ["ld3.sampler.name=uni_pc", "ld3.sampler.order=2", "ld3.nfe=4"])
    res = run(recipe, cfg, tmp_path)
    ts, ts2, meta = load_time_steps(tmp_path / "steps.json")
    assert ts.shape == (5,) and meta["sampler"]["name"] == "uni_pc"
    comparison = json.loads((tmp_path / "comparison.json").read_text())
    assert {"l2/ld3", "l2/logsnr", "sw/edm", "sw/time_uniform"} <= set(comparison)
    assert res.step == 4
    # the sampler on the learned steps vs on the logSNR-uniform steps LD3 starts from, on fresh
    # held-out noise (not the recipe's own test split): the learned steps are closer to the
    # teacher's outputs in the squared L2 that LD3 minimises
    eps_fn, schedule, _, shape = model_and_schedule(cfg)

    @jax.jit
    def l2_to_teacher(ts, ts2):
        z, y = make_teacher_data(
            jax.random.PRNGKey(123),
            eps_fn,
            schedule,
            n=256,
            data_shape=shape,
            teacher=cfg.teacher,
            teacher_nfe=cfg.teacher_nfe,
            teacher_steps=cfg.teacher_steps,
        )
        out = sample(
            cfg.ld3.sampler,
            eps_fn,
            schedule.prior_std * z,
            ts,
            schedule=schedule,
            eval_timesteps=ts2,
        )
        return jnp.mean(jnp.sum((out - y) ** 2, -1))

    base = get_time_steps(schedule, cfg.static.steps, "logsnr")
    learned, baseline = float(l2_to_teacher(ts, ts2)), float(l2_to_teacher(base, base))
    print(f"held-out L2 to the teacher: learned {learned:.4g}, logSNR-uniform {baseline:.4g}")
    assert learned < 0.8 * baseline, (learned, baseline)


def test_ld3_eight_devices_equal_one():
    """Two LD3 iterations with the latents split over 8 devices equal one device; the traced
    starting rate is the optimizer's rate after the first steps."""
    recipe = ld3_recipe.RECIPE
    cfg = recipe.config("tiny", ["ld3.n_train=8", "ld3.n_valid=8", "optim.time.lr=0.02"])
    _, s8 = sharded_step_matches(recipe, cfg, {"mesh.data": 8}, steps=2)
    lr1 = s8.ld3.opt1[1].hyperparams["learning_rate"]
    assert set(s8.hparams) == {"optim.time.lr", "optim.eval_time.lr", "optim.shift.lr"}
    assert lr1 == np.float32(0.02)


def test_preference_tiny_from_scratch_and_from_a_checkpoint(tmp_path, ring_run):
    recipe = preference_recipe.RECIPE
    res = run(recipe, recipe.config("tiny"), tmp_path / "a")
    assert {"reward", "implicit_acc", "sw_to_tilted", "sw_to_tilted_reference"} <= set(
        res.eval_metrics
    )
    cfg = recipe.config("tiny", [f"pretrained={ring_run[0]}", "method=dpo", "beta=10"])
    res = run(recipe, cfg, tmp_path / "b")
    assert np.isfinite(res.metrics["loss"]) and (tmp_path / "b" / "samples.png").is_file()
    # the frozen reference is the loaded checkpoint's EMA model, unchanged by training
    _, ema = load_model(ring_run[0])
    for a, b in zip(jax.tree.leaves(res.state.ref_params), jax.tree.leaves(ema), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_preference_eight_devices_equal_one():
    """Two DSPO steps with the pairs and the batch split over 8 devices equal one device (the
    reference pretrained at init on the same mesh); beta and lr are traced."""
    recipe = preference_recipe.RECIPE
    cfg = recipe.config("tiny", ["reference.loop.total_steps=4"])
    _, s8 = sharded_step_matches(recipe, cfg, {"mesh.data": 8}, steps=2)
    assert set(s8.hparams) == {"optim.lr", "beta"} and s8.pairs_w.shape == (64, 2)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="schedule"):
        diffusion_recipe.RECIPE.config(None, ["parametrization=edm"])
    with pytest.raises(ConfigError, match="net.kind"):
        diffusion_recipe.RECIPE.config(None, ["net.kind=unet"])
    with pytest.raises(ConfigError, match="nfe"):
        ld3_recipe.RECIPE.config(None, ["ld3.sampler.name=heun", "ld3.nfe=5"])
    with pytest.raises(ConfigError, match="sampler"):
        ld3_recipe.RECIPE.config(None, ["ld3.sampler.name=plms"])
    with pytest.raises(ConfigError, match="checkpoint"):
        ld3_recipe.RECIPE.config(None, ["model=checkpoint"])
    with pytest.raises(ConfigError, match="parametrization"):
        preference_recipe.RECIPE.config(
            None, ["reference.parametrization=edm", "reference.schedule=edm"]
        )
    with pytest.raises(ConfigError, match="ema_decay"):
        diffusion_recipe.RECIPE.config(None, ["ema_decay=1.0"])
    with pytest.raises(ConfigError, match="reference.data.ring_std"):
        preference_recipe.RECIPE.config(None, ["reference.data.ring_std=0"])
    with pytest.raises(ConfigError, match="optim.lr"):
        preference_recipe.RECIPE.config(None, ["optim.lr=0"])
    with pytest.raises(ConfigError, match="optim.shift.clip_norm"):
        ld3_recipe.RECIPE.config(None, ["optim.shift.clip_norm=1"])
    with pytest.raises(ConfigError, match="optim.time.schedule"):
        ld3_recipe.RECIPE.config(None, ["optim.time.schedule=cosine"])
    with pytest.raises(ConfigError, match="optim.decay"):
        ld3_recipe.RECIPE.config(None, ["optim.decay=0"])


def test_ema_follows_the_warmed_up_decay_formula():
    """ema_{k+1} = d_k ema_k + (1 - d_k) params_{k+1}, d_k = min(ema_decay, (1 + k) / (10 + k))
    (k = the step count before the update), for the first steps where the warm-up term rules and
    later ones where ema_decay does; and training improves the samples (sliced Wasserstein to the
    data falls below the untrained model's)."""
    from jaxlab.core import config as C
    from jaxlab.core import run as run_lib

    recipe = diffusion_recipe.RECIPE
    cfg = C.replace(recipe.config("tiny"), **{"ema_decay": 0.5, "mesh.data": 1})
    parts = run_lib.build(recipe, cfg, jax.devices()[:1])
    state = run_lib.init_state(parts, jax.random.PRNGKey(0))
    step = jax.jit(parts.train_step)
    for k in range(4):
        new, _ = step(state, None)
        d = min(0.5, (1.0 + k) / (10.0 + k))
        for e0, p1, e1 in zip(
            jax.tree.leaves(state.ema_params),
            jax.tree.leaves(new.params),
            jax.tree.leaves(new.ema_params),
            strict=True,
        ):
            np.testing.assert_allclose(
                np.asarray(e1), d * np.asarray(e0) + (1 - d) * np.asarray(p1), rtol=1e-5, atol=1e-7
            )
        state = new


def test_training_improves_the_samples(ring_run):
    from jaxlab.core import run as run_lib

    run_dir, res = ring_run
    recipe = diffusion_recipe.RECIPE
    parts = run_lib.build(recipe, res_cfg(run_dir), jax.devices()[:1])
    untrained = parts.evaluate(run_lib.init_state(parts, jax.random.PRNGKey(0)))
    assert res.eval_metrics["sw_to_data"] < 0.7 * untrained["sw_to_data"], (
        res.eval_metrics,
        untrained,
    )


def res_cfg(run_dir):
    from jaxlab.core import run as run_lib

    return run_lib.read_run(run_dir)[1]

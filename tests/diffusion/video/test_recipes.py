"""The loopy and cyberhost recipes end to end on their tiny presets (shared loop), their videos,
and one train step on 8 simulated devices equal to one device."""

from __future__ import annotations

import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import run
from jaxlab.core.testing import sharded_step_matches
from jaxlab.core.tracking import read_metrics
from jaxlab.recipes import cyberhost, loopy


@pytest.mark.parametrize("recipe", [loopy.RECIPE, cyberhost.RECIPE], ids=["loopy", "cyberhost"])
def test_tiny_trains_evaluates_and_writes_videos(recipe, tmp_path):
    res = run(recipe, recipe.config("tiny"), tmp_path)
    assert res.step == 4
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert all(np.isfinite(r["loss"]) for r in rows)
    m = res.eval_metrics
    assert {"audio_sync", "audio_sync_audio_dropped"} <= set(m)
    if recipe.name == "loopy":
        assert {"head_x_err", "brightness_err"} <= set(m)
    else:
        assert {"hand_mse", "centre_std", "hand_sharpness_low", "hand_sharpness_high"} <= set(m)
    assert all(np.isfinite(v) for v in m.values())
    from jaxlab import media

    gif = media.read_video(tmp_path / "samples.gif")
    assert gif.shape[0] == 2 * 4 and gif.shape[1] == 2 * 16 * 4  # frames; 2 videos stacked


@pytest.mark.parametrize("recipe", [loopy.RECIPE], ids=["loopy"])
def test_eight_devices_equal_one(recipe):
    # the in-step batch split over the devices; a smaller net (no TSM / latents) compiles faster
    cfg = recipe.config(
        "tiny", ["batch_size=8", "net.motion_len=2", "net.tsm_stride=0", "net.audio_latents=0"]
    )
    sharded_step_matches(recipe, cfg, {"mesh.data": 8}, steps=1, rtol=1e-4, atol=1e-5)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="net.tsm_stride"):
        loopy.RECIPE.config("tiny", ["net.tsm_stride=5"])
    with pytest.raises(ConfigError, match="p_audio_drop"):
        loopy.RECIPE.config("tiny", ["p_audio_drop=1.5"])
    with pytest.raises(ConfigError, match="net.regions"):
        loopy.RECIPE.config("tiny", ["net.regions=2", "net.crop=8"])
    with pytest.raises(ConfigError, match="net.crop"):
        cyberhost.RECIPE.config("tiny", ["net.crop=6"])
    with pytest.raises(ConfigError, match="task.p_first_clip"):
        loopy.RECIPE.config("tiny", ["task.p_first_clip=2.0"])
    with pytest.raises(ConfigError, match="ema_decay"):
        loopy.RECIPE.config("tiny", ["ema_decay=1.0"])
    with pytest.raises(ConfigError, match="local_weight"):
        cyberhost.RECIPE.config("tiny", ["local_weight=-1"])
    with pytest.raises(ConfigError, match="optim.warmup_steps"):
        cyberhost.RECIPE.config("tiny", ["optim.warmup_steps=-1"])

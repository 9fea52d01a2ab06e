"""Synthetic audio-visual data: the measurements read back the known ground truth."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion.video import evaluation as E
from jaxlab.diffusion.video import measure, synthetic


@pytest.fixture(scope="module")
def clips():
    st = synthetic.AVStatic()
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    head = jax.jit(jax.vmap(lambda k: synthetic.talking_head(k, 48, st)))(keys)
    body = jax.jit(jax.vmap(lambda k: synthetic.talking_body(k, 48, st)))(keys)
    return head, body


def test_talking_head_measurements_recover_the_ground_truth(clips):
    head, _ = clips
    assert head.frames.shape == (3, 48, 16, 16, 1) and head.waveform.shape == (3, 48 * 64)
    assert float(jnp.abs(head.frames).max()) <= 1.0 + 1e-6
    sync = np.asarray(E.audio_sync(head.frames, head.envelope, "head"))
    assert (sync > 0.8).all(), sync
    # the readouts recover the ground truth ...
    pos = jax.vmap(jax.vmap(measure.head_position))(head.frames)
    assert float(jnp.abs(pos - head.position).max()) < 0.4
    # ... and the drift metric sees a 1 px shift and a darker face, not the readout's own bias
    assert float(E.drift(head.frames, head.frames)["head_x_err"].max()) == 0.0
    pad = jnp.full(head.frames.shape[:3] + (1, 1), -1.0)
    shifted = jnp.concatenate([pad, head.frames[:, :, :, :-1]], axis=3)  # 1 px right, no wrap
    err = np.asarray(E.drift(shifted, head.frames)["head_x_err"])
    assert ((err > 0.75) & (err < 1.05)).all(), err  # less than 1 where the face leaves the frame
    darker = jnp.where(head.frames > -0.9, head.frames - 0.1, head.frames)
    np.testing.assert_allclose(
        np.asarray(E.drift(darker, head.frames)["brightness_err"]), 0.1, atol=0.01
    )
    # the drift is slower than a clip: a period of 48..96 frames
    x = np.asarray(head.position[..., 0])
    assert np.abs(np.diff(x, axis=1)).max() < 2 * np.pi * 3.0 / 48 + 1e-3


def test_talking_body_hand_follows_audio_and_blur_lowers_sharpness(clips):
    _, body = clips
    sync = np.asarray(E.audio_sync(body.frames, body.envelope, "body"))
    assert (sync > 0.7).all(), sync
    c = jax.vmap(jax.vmap(measure.body_centre))(body.frames)
    assert float(jnp.abs(c - body.position).max()) < 1.0
    st = synthetic.AVStatic()
    sharp = [
        float(
            measure.hand_sharpness(synthetic.render_body(st, 6.5, 8.5, 0.5, 0.5, jnp.float32(s))[0])
        )
        for s in (0.0, 0.4, 0.8, 1.2)
    ]
    assert all(a > b for a, b in zip(sharp, sharp[1:], strict=False)), sharp


def test_audio_envelope_is_in_the_waveform(clips):
    head, _ = clips
    from jaxlab.diffusion.video.audio import log_mel

    mel = log_mel(head.waveform[0], hop=64, n_fft=128, n_mels=8, sample_rate=1600)
    assert float(measure.correlation(jnp.exp(mel).sum(-1) ** 0.5, head.envelope[0])) > 0.9


def test_bad_static_and_frames_raise():
    with pytest.raises(ValueError, match="sample_rate"):
        synthetic.AVStatic(sample_rate=1000, fps=30)
    # a ValueError from the check, or jaxtyping's TypeError when its runtime checks are on
    with pytest.raises((ValueError, TypeError)) as err:
        measure.head_position(jnp.zeros((16, 8, 1)))
    assert "frame" in str(err.value)


def test_motion_noise_corrupts_only_the_motion_frames():
    from jaxlab.core.config import ConfigError
    from jaxlab.diffusion.video.denoiser import VideoNetConfig
    from jaxlab.diffusion.video.tasks import AvatarTask, make_batch

    net = VideoNetConfig(motion_len=4, clip_len=4, patch=4)
    key = jax.random.PRNGKey(3)
    clean = make_batch(key, 32, net, AvatarTask("head", p_first_clip=0.0))
    noisy = make_batch(key, 32, net, AvatarTask("head", p_first_clip=0.0, motion_noise=0.5))
    np.testing.assert_array_equal(clean.cond.motion, clean.clip.frames[:, :4])
    np.testing.assert_array_equal(noisy.x0, clean.x0)  # the target clip is untouched
    std = np.asarray(jnp.std(noisy.cond.motion - clean.cond.motion, axis=(1, 2, 3, 4)))
    assert std.max() <= 0.5 * 1.1 and std.min() < 0.1 and std.max() > 0.3, std  # U[0, 0.5]
    with pytest.raises(ConfigError, match="motion_noise"):
        AvatarTask("head", motion_noise=-0.1)


def test_dwell_drift_holds_then_turns_and_needs_the_long_context():
    from jaxlab.core.config import ConfigError

    hold, move = synthetic.DWELL_HOLD, synthetic.DWELL_MOVE
    t = jnp.arange(4 * (hold + move), dtype=jnp.float32)
    s = np.asarray(synthetic.dwell_wave(t, jnp.float32(0.0)))
    np.testing.assert_allclose(s[: hold + 1], -1.0)  # holds on one side ...
    np.testing.assert_allclose(s[hold + move : 2 * hold + move + 1], 1.0)  # ... turns, holds
    np.testing.assert_allclose(s[2 * (hold + move) :], s[: 2 * (hold + move)], atol=1e-6)
    assert np.abs(np.diff(s)).max() < np.pi / move  # a half cosine over the turn, no jump
    # two videos whose last 4 frames are the same pose, one about to turn and one not: the next
    # frames are not a function of a 4-frame context
    st = synthetic.AVStatic()
    a = synthetic.dwell_wave(t, jnp.float32(hold - 4.0))  # turns right after frame 3
    b = synthetic.dwell_wave(t, jnp.float32(0.0))
    np.testing.assert_allclose(a[:4], b[:4])
    assert float(jnp.abs(a[4:12] - b[4:12]).max()) > 1.0
    clip = synthetic.talking_head(jax.random.PRNGKey(1), 96, st, drift="dwell")
    x = np.asarray(clip.position[:, 0])
    assert 1.5 <= np.abs(x - st.size / 2).max() <= 3.0  # the drift's amplitude
    still = np.abs(np.diff(x)) < 1e-5
    assert 0.6 < still.mean() < 0.85, still.mean()  # holds 24 of every 32 frames
    pos = jax.vmap(measure.head_position)(clip.frames)
    assert float(jnp.abs(pos - clip.position).max()) < 0.4  # the readout follows it
    # the recipe's held-out videos follow the configured drift
    from jaxlab.core.config import resolve
    from jaxlab.diffusion.video.pipeline import eval_data
    from jaxlab.recipes.loopy import LoopyConfig

    held_out, _ = eval_data(resolve(LoopyConfig, overrides=["task.drift=dwell", "eval_videos=2"]))
    still = np.abs(np.diff(np.asarray(held_out.position[..., 0]), axis=1)) < 1e-5
    assert 0.6 < still.mean() < 0.85, still.mean()
    with pytest.raises(ValueError, match="drift='zigzag'"):
        synthetic.talking_head(jax.random.PRNGKey(1), 8, st, drift="zigzag")
    with pytest.raises(ConfigError, match="task.drift"):
        resolve(LoopyConfig, overrides=["task.drift=zigzag"])

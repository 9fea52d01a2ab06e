"""Video building blocks: temporal attention, Loopy's layers and TSM, CyberHost's region
attention and conditions, guidance, rollout, the audio front-end (NumPy references, masks,
invariants, bad input)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion.samplers import SamplerSpec
from jaxlab.diffusion.schedules import make_schedule
from jaxlab.diffusion.video import audio, cyberhost, guidance, loopy, rollout, temporal
from jaxlab.diffusion.video.denoiser import VideoCond, VideoNetConfig, patchify, unpatchify
from jaxlab.nn import MultiHeadAttention


def _mha_numpy(p, q_in, kv_in, mask):
    """Multi-head attention of one sequence in NumPy with the parameters of MultiHeadAttention."""
    p = nn.unbox(p)
    wq, wk, wv, wo = (np.asarray(p[k], np.float64) for k in ("wq", "wk", "wv", "wo"))
    q = np.einsum("sd,dhk->shk", q_in, wq)
    k = np.einsum("sd,dhk->shk", kv_in, wk)
    v = np.einsum("sd,dhk->shk", kv_in, wv)
    logits = np.einsum("qhk,shk->hqs", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask[None], logits, -1e30)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("hqs,shk,hkd->qd", w, v, wo)


def test_temporal_attention_equals_a_per_pixel_loop():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 3, 2, 8))
    layer = temporal.TemporalAttention(heads=2, max_len=6)
    params = jax.jit(layer.init)(jax.random.PRNGKey(1), x)
    y = np.asarray(jax.jit(layer.apply)(params, x))
    attn = MultiHeadAttention(2, 4, causal=False, use_rope=False)
    table = params["params"]["temporal_pos"][:5]
    sub = {"params": params["params"]["attn"]}
    one = jax.jit(lambda seq: attn.apply(sub, seq[None])[0][0])
    for b in range(2):
        for i in range(3):
            for j in range(2):
                ref = one(x[b, :, i, j] + table)
                np.testing.assert_allclose(y[b, :, i, j], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(
        temporal.from_pixel_sequences(temporal.to_pixel_sequences(x), x.shape), x
    )


def test_inter_clip_layer_is_masked_attention_over_motion_and_clip():
    m, t, n, d = 3, 4, 2, 8
    k1, k2 = jax.random.split(jax.random.PRNGKey(2))
    clip = jax.random.normal(k1, (1, t, n, d))
    motion = jax.random.normal(k2, (1, m, n, d))
    layer = loopy.InterClipTemporalLayer(heads=2, n_motion=m, clip_len=t)
    params = jax.jit(layer.init)(jax.random.PRNGKey(3), clip, motion)
    apply = jax.jit(layer.apply)
    y = np.asarray(apply(params, clip, motion))
    mask = loopy.inter_clip_mask(m, t)
    assert mask[m:].all() and mask[:m, :m].all() and not mask[:m, m:].any()
    p = params["params"]
    for s in range(n):
        seq = np.concatenate([motion[0, :, s], clip[0, :, s]]) + np.asarray(p["temporal_pos"])
        full = _mha_numpy(p["attn"], seq, seq, mask)  # rows of [motion ‖ clip]
        np.testing.assert_allclose(y[0, :, s], full[m:], rtol=1e-4, atol=1e-5)
        # the motion rows under the mask do not depend on the clip
        seq2 = seq.copy()
        seq2[m:] += 1.0
        np.testing.assert_allclose(_mha_numpy(p["attn"], seq2, seq2, mask)[:m], full[:m])
    # clip tokens see the motion frames; an invalid motion frame is not seen
    y2 = np.asarray(apply(params, clip, motion.at[:, 0].add(3.0)))
    assert np.abs(y2 - y).max() > 1e-3
    valid = jnp.array([[False, True, True]])
    y3 = apply(params, clip, motion, valid)
    y4 = apply(params, clip, motion.at[:, 0].add(3.0), valid)
    np.testing.assert_allclose(y3, y4, atol=1e-6)


@pytest.mark.parametrize("stride,expand,recent", [(4, 0, 0), (4, 2, 4), (3, 1, 2)])
def test_temporal_segment_matches_numpy(stride, expand, recent):
    length = 12 + recent
    x = np.random.default_rng(0).normal(size=(2, length, 3, 2)).astype(np.float32)
    out = np.asarray(
        jax.jit(
            lambda v: loopy.temporal_segment(v, stride=stride, expand=expand, keep_recent=recent)
        )(x)
    )
    pooled_len = length - recent
    ref = []
    for k in range(pooled_len // stride):
        lo, hi = max(0, k * stride - expand), min(pooled_len, (k + 1) * stride + expand)
        ref.append(x[:, lo:hi].mean(1))
    ref = np.stack(ref, 1)
    if recent:
        ref = np.concatenate([ref, x[:, pooled_len:]], 1)
    assert out.shape == (2, loopy.tsm_output_len(length, stride, recent), 3, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_region_attention_writes_back_only_under_the_mask():
    b, t, n, d, r = 2, 3, 6, 8, 2
    x = jax.random.normal(jax.random.PRNGKey(4), (b, t, n, d))
    ident = jax.random.normal(jax.random.PRNGKey(5), (b, r, 4, d))
    masks = jnp.zeros((b, t, n, r)).at[:, :, 1, 0].set(1.0).at[:, 1, 4, 1].set(0.5)
    layer = cyberhost.RegionAttention(r, bank_size=2, clip_len=t, heads=2)
    params = jax.jit(layer.init)(jax.random.PRNGKey(6), x, ident, masks)
    y, logits = jax.jit(layer.apply)(params, x, ident, masks)
    changed = np.abs(np.asarray(y - x)).max(-1) > 0
    assert logits.shape == (b, t, n, r)
    np.testing.assert_array_equal(changed, np.asarray(masks.max(-1) > 0))
    # a ValueError from the layer, or jaxtyping's TypeError when its runtime checks are on
    with pytest.raises((ValueError, TypeError)) as err:
        layer.apply(params, x, ident, masks[:, :, :4])
    assert "masks" in str(err.value)


def test_region_crop_movement_map_pose_and_local_loss():
    img = jnp.arange(16 * 16, dtype=jnp.float32).reshape(16, 16, 1)
    mask = jnp.zeros((16, 16)).at[10:13, 3:6].set(1.0)
    crop = cyberhost.region_crop(img, mask, 4)
    np.testing.assert_array_equal(crop[..., 0], img[9:13, 2:6, 0])
    with pytest.raises((ValueError, TypeError)) as err:  # TypeError: jaxtyping checks on
        cyberhost.region_crop(img, mask[:8], 4)
    assert "mask" in str(err.value)
    mm = cyberhost.movement_map(jnp.array([[5.0, 6.0], [9.0, 7.0]]), (1.0, 1.0), 16)[..., 0]
    assert mm[6, 7] > 0.95 and mm[6, 12] < 0.01 and mm[12, 7] < 0.01
    pm = cyberhost.pose_map(jnp.array([[3.5, 8.5]]), 16)[..., 0]
    assert np.unravel_index(np.argmax(pm), pm.shape) == (8, 3)
    err = jnp.zeros((1, 2, 4, 4, 1)).at[0, :, 0, 0].set(2.0)
    masks = jnp.zeros((1, 2, 4, 4, 2)).at[0, :, :2, :2, 0].set(1.0).at[..., 1].set(1.0)
    # region 0: 2 of its 8 pixels hold error 2 -> 0.5; region 1: 2 of 32 -> 0.125
    np.testing.assert_allclose(cyberhost.local_enhancement_loss(err, masks), 0.625, rtol=1e-5)
    with pytest.raises((ValueError, TypeError)) as bad:  # TypeError: jaxtyping checks on
        cyberhost.local_enhancement_loss(err, masks[:, :, :2])
    assert "masks" in str(bad.value)


def test_log_mel_matches_numpy_and_rejects_short_audio():
    sr, hop, n_fft, n_mels = 1600, 64, 128, 8
    w = np.random.default_rng(1).normal(size=(5 * hop,)).astype(np.float32)
    got = np.asarray(
        audio.log_mel(jnp.asarray(w), hop=hop, n_fft=n_fft, n_mels=n_mels, sample_rate=sr)
    )
    pad = np.pad(w.astype(np.float64), n_fft // 2)
    fb = audio.mel_filterbank(n_fft, sr, n_mels)
    win = np.hanning(n_fft + 2)[1:-1]
    ref = np.stack(
        [
            np.log(
                1e-4
                + (
                    np.abs(np.fft.rfft(pad[i * hop + hop // 2 : i * hop + hop // 2 + n_fft] * win))
                    ** 2
                )
                @ fb
            )
            for i in range(5)
        ]
    )
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
    assert np.allclose(fb.max(0), 1.0, atol=0.2) and (fb >= 0).all()
    with pytest.raises(ValueError, match="waveform.*shorter than the requested 6"):
        audio.log_mel(
            jnp.asarray(w), hop=hop, n_fft=n_fft, n_mels=n_mels, sample_rate=sr, n_frames=6
        )
    win_feats = audio.audio_windows(jnp.arange(4.0)[:, None], 1)[..., 0]
    np.testing.assert_array_equal(win_feats, [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 3]])


def _fake_apply(x, t, c: VideoCond):
    """A cheap stand-in denoiser that depends on the audio, reference and motion flags."""
    a = jnp.mean(c.audio, (1, 2, 3)) * c.audio_keep
    r = jnp.mean(c.reference, (1, 2, 3)) * c.ref_keep
    m = jnp.mean(c.motion[:, -1], (1, 2, 3))
    return 0.3 * x + (a + 2 * r + m + 0.1 * t)[:, None, None, None, None]


def _cond(b=2, t=2, lm=3, s=4):
    k = jax.random.split(jax.random.PRNGKey(7), 3)
    return VideoCond(
        reference=jax.random.normal(k[0], (b, s, s, 1)),
        audio=jax.random.normal(k[1], (b, t, 3, 2)),
        motion=jax.random.normal(k[2], (b, lm, s, s, 1)),
    )


def test_guidance_combines_three_predictions_with_separate_scales():
    c = _cond()
    x = jnp.ones((2, 2, 4, 4, 1))
    t = jnp.full((2,), 0.5)
    e = lambda ak, rk: _fake_apply(
        x, t, c.replace(audio_keep=jnp.full((2,), ak), ref_keep=jnp.full((2,), rk))
    )
    e00, e01, e11 = e(False, False), e(False, True), e(True, True)
    got = guidance.guided_eps(_fake_apply, x, t, c, audio_scale=2.5, ref_scale=0.5)
    np.testing.assert_allclose(got, e00 + 0.5 * (e01 - e00) + 2.5 * (e11 - e01), rtol=1e-6)
    np.testing.assert_allclose(
        guidance.guided_eps(_fake_apply, x, t, c, audio_scale=1.0, ref_scale=1.0), e11, rtol=1e-6
    )


def test_rollout_scan_equals_a_loop_over_clips_with_sliding_motion_frames():
    net = VideoNetConfig(size=4, patch=2, width=4, heads=1, clip_len=2, motion_len=3)
    sch, spec = make_schedule("vp_cosine"), SamplerSpec("ddim")
    c = _cond()
    audio_all = jax.random.normal(jax.random.PRNGKey(8), (2, 6, 3, 2))
    kw = dict(net=net, schedule=sch, spec=spec, nfe=2, audio_scale=1.5, ref_scale=1.0)
    got = jax.jit(lambda k: rollout.rollout(k, _fake_apply, c, audio_all, 3, **kw))(
        jax.random.PRNGKey(9)
    )
    # the reference: a Python loop over clips, each clip one jitted call (compiled once)
    one_clip = jax.jit(lambda k, cond: rollout.generate_clip(k, _fake_apply, cond, **kw))
    buf, clips = c.motion, []
    for i, k in enumerate(jax.random.split(jax.random.PRNGKey(9), 3)):
        clip = one_clip(k, c.replace(audio=audio_all[:, 2 * i : 2 * i + 2], motion=buf))
        clips.append(clip)
        buf = jnp.concatenate([buf, clip], 1)[:, -3:]
    np.testing.assert_allclose(got, jnp.concatenate(clips, 1), rtol=2e-4, atol=1e-4)
    with pytest.raises(ValueError, match="audio.*3 clips"):
        rollout.rollout(jax.random.PRNGKey(9), _fake_apply, c, audio_all[:, :5], 3, **kw)


def test_patchify_roundtrip():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8, 8, 2))
    tok = patchify(x, 4)
    assert tok.shape == (2, 3, 4, 32)
    np.testing.assert_array_equal(unpatchify(tok, 4, 2), x)
    np.testing.assert_array_equal(tok[0, 0, 1].reshape(4, 4, 2), x[0, 0, :4, 4:])


def test_curve_strip_draws_the_envelope_and_a_cursor():
    from jaxlab import media

    panel = media.curve_strip([0.0, 1.0, 0.0], 1, height=9, width=9)
    assert panel.shape == (9, 9) and panel[:, 4].min() == 255  # the cursor column
    assert panel[8, 0] == 160 and panel[0, 3] == 160  # starts low, peaks in the middle
    with pytest.raises(ValueError, match="cursor"):
        media.curve_strip([0.0, 1.0], 2, height=4, width=4)

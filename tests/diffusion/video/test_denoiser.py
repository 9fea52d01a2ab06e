"""The video denoiser: shapes, the audio and reference paths, guidance-dropping, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion.video.denoiser import VideoDenoiser, VideoNetConfig
from jaxlab.diffusion.video.tasks import AvatarTask, make_batch

NET = VideoNetConfig(
    width=16,
    depth=1,
    heads=2,
    patch=4,
    clip_len=4,
    motion_len=12,
    tsm_stride=4,
    tsm_expand=1,
    tsm_recent=4,
    audio_latents=1,
    audio_radius=1,
    n_mels=8,
)


@pytest.fixture(scope="module")
def model():
    net = VideoDenoiser(NET)
    ex = make_batch(jax.random.PRNGKey(0), 2, NET, AvatarTask("head"))
    # explicit keep flags (None means all kept): every call below has one input structure, so
    # the jitted apply compiles once
    on = jnp.ones((2,), bool)
    ex = ex.replace(cond=ex.cond.replace(audio_keep=on, ref_keep=on))
    params = jax.jit(net.init)(jax.random.PRNGKey(1), ex.x0, jnp.ones((2,)), ex.cond)
    # make the zero-initialised output layers non-zero so every path reaches the output
    params = jax.tree.map(lambda p: p + 0.05 * jnp.sin(jnp.arange(p.size).reshape(p.shape)), params)
    return net, params, ex, jax.jit(net.apply)


def test_audio_and_reference_paths_and_their_dropping(model):
    net, params, ex, apply = model
    t = jnp.full((2,), 0.5)
    base = apply(params, ex.x0, t, ex.cond)
    assert base.shape == ex.x0.shape and bool(jnp.isfinite(base).all())
    loud = ex.cond.replace(audio=ex.cond.audio + 1.0)
    assert float(jnp.abs(apply(params, ex.x0, t, loud) - base).max()) > 1e-4
    off = jnp.zeros((2,), bool)
    a0 = apply(params, ex.x0, t, ex.cond.replace(audio_keep=off))
    a1 = apply(params, ex.x0, t, loud.replace(audio_keep=off))
    np.testing.assert_allclose(a0, a1, atol=1e-6)  # dropped audio: the null sequence only
    ref2 = ex.cond.replace(reference=-ex.cond.reference)
    kept = float(jnp.abs(apply(params, ex.x0, t, ref2) - base).max())
    r0 = apply(params, ex.x0, t, ex.cond.replace(ref_keep=off))
    r1 = apply(params, ex.x0, t, ref2.replace(ref_keep=off))
    dropped = float(jnp.abs(r0 - r1).max())
    assert kept > 1e-6 and dropped < 1e-3 * kept, (kept, dropped)
    # the long motion context reaches the output through the TSM and the inter-clip layer
    old = ex.cond.replace(motion=ex.cond.motion.at[:, 0].add(1.0))
    assert float(jnp.abs(apply(params, ex.x0, t, old) - base).max()) > 1e-5


def test_bad_input_names_the_input_and_its_shape(model):
    """A ValueError from the denoiser's check (or, with jaxtyping's runtime checks on, its
    TypeError when the conditions are built) naming the input."""
    net, params, ex, _ = model
    t = jnp.ones((2,))
    long = jnp.concatenate([ex.cond.motion, ex.cond.motion[:, :4]], 1)
    cases = [
        ("reference", lambda: ex.cond.replace(reference=ex.cond.reference[:, :8, :8])),
        ("audio", lambda: ex.cond.replace(audio=ex.cond.audio[:, :3])),
        ("motion", lambda: ex.cond.replace(motion=long)),
    ]
    for name, make in cases:
        with pytest.raises((ValueError, TypeError)) as err:
            net.apply(params, ex.x0, t, make())
        assert name in str(err.value), (name, str(err.value)[:300])
    with pytest.raises(ValueError, match="keep_recent"):
        from jaxlab.diffusion.video.loopy import temporal_segment

        temporal_segment(jnp.zeros((1, 4, 2)), stride=2, expand=0, keep_recent=4)


def test_region_attention_trains_under_its_predicted_masks():
    """The ground-truth region masks of the target clip say where the hand is; writing back under
    them in training would leak the answer. They may enter only the local and mask losses."""
    from jaxlab.diffusion.schedules import make_schedule
    from jaxlab.diffusion.video.training import LossWeights, video_loss

    net_cfg = VideoNetConfig(
        width=16, depth=1, heads=2, patch=4, clip_len=4, motion_len=2, regions=2, crop=8
    )
    net = VideoDenoiser(net_cfg)
    ex = jax.jit(lambda k: make_batch(k, 2, net_cfg, AvatarTask("body")))(jax.random.PRNGKey(0))
    params = jax.jit(net.init)(jax.random.PRNGKey(1), ex.x0, jnp.ones((2,)), ex.cond)
    params = jax.tree.map(lambda p: p + 0.05 * jnp.sin(jnp.arange(p.size).reshape(p.shape)), params)
    moved = ex.replace(cond=ex.cond.replace(region_masks=jnp.roll(ex.cond.region_masks, 3, 2)))
    sched = make_schedule("vp_cosine")
    loss = jax.jit(
        lambda e, w: video_loss(jax.random.PRNGKey(2), net, params, e, sched, w), static_argnums=1
    )
    plain = LossWeights(local=0.0, mask=0.0)
    np.testing.assert_allclose(loss(ex, plain)[0], loss(moved, plain)[0], rtol=1e-6)
    local = LossWeights(local=1.0, mask=0.1)
    assert abs(float(loss(ex, local)[0]) - float(loss(moved, local)[0])) > 1e-4

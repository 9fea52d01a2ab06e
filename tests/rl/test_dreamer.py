"""Dreamer on the open world at a small budget: the world model's reconstruction and reward
losses fall, and its open-loop imagination tracks real frames better than a constant image over
the stated horizon (3 steps after 4 observed). One compiled whole-run scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.world_models.dreamer import DreamerConfig, DreamerOptim, make_parts, preprocess

ITERATIONS, STARTS = 50, 10
OFF = OffPolicyConfig(
    env="open-world",
    num_envs=4,
    buffer_size=4 * 96,
    batch_size=8,
    learning_starts=STARTS,
    updates_per_iteration=2,
)
CFG = DreamerConfig(
    sequence_length=8,
    deter=32,
    groups=4,
    classes=8,
    hidden=32,
    embed=32,
    depth=8,
    num_bins=31,
    horizon=5,
)
OPTIM = DreamerOptim(model=OptimConfig(name="adam", lr=1e-3, clip_norm=1000.0))
ENV_OPTIONS = {"variant": "easy", "max_steps": 24}


@pytest.fixture(scope="module")
def trained():
    parts = make_parts(CFG, OFF, OPTIM, env_options=ENV_OPTIONS)

    @jax.jit
    def run(key):
        return jax.lax.scan(lambda s, _: parts.iteration(s), parts.init(key), None, ITERATIONS)

    state, metrics = run(jax.random.key(0))
    return parts, state, jax.device_get(metrics)


def test_world_model_losses_fall(trained):
    _, _, m = trained
    learning = np.asarray(m["learning"]).astype(bool)
    assert learning.sum() >= ITERATIONS - STARTS - 2
    img, rew = np.asarray(m["image_loss"])[learning], np.asarray(m["reward_loss"])[learning]
    assert img[-5:].mean() < 0.6 * img[:5].mean(), img
    assert rew[-5:].mean() < 0.5 * rew[:5].mean(), rew
    assert np.all(np.isfinite(np.asarray(m["critic_loss"])))


def test_open_loop_imagination_tracks_real_frames(trained):
    parts, state, _ = trained
    context, horizon = 4, 3
    batch = parts.replay.sample(state.buffer, jax.random.key(5)).experience
    # sequences without an episode start after the context frame
    pred = jax.jit(parts.open_loop, static_argnums=2)(state, batch, context, jax.random.key(6))
    real = preprocess(batch["obs"])
    keep = ~np.asarray(batch["is_first"][:, 1:]).any(1)
    err = jnp.mean((pred - real) ** 2, (-3, -2, -1))[:, context : context + horizon]
    const = jnp.mean((real - real.mean((0, 1, 2, 3), keepdims=True)) ** 2, (-3, -2, -1))[
        :, context : context + horizon
    ]
    err, const = np.asarray(err)[keep], np.asarray(const)[keep]
    assert keep.sum() >= 1
    assert err.mean() < 0.5 * const.mean(), (err.mean(), const.mean())

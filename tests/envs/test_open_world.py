"""The open world: the scripted expert collects the target, far targets are small in the view,
zooming towards the target enlarges it, bad options name the field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.envs.open_world import TARGET_COLOUR, oracle_action, zoom


def _target_pixels(img) -> np.ndarray:
    img = np.asarray(img, np.float32)
    return np.all(np.abs(img - TARGET_COLOUR) < 60, axis=-1) & (img[..., 0] > img[..., 2] + 40)


@pytest.fixture(scope="module")
def expert_runs():
    env, _ = envs.make("open-world", max_steps=48)

    @jax.jit
    @jax.vmap
    def episode(key, p):
        obs, s = env.reset(key, p)

        def body(c, k):
            s, done, ret = c
            obs, s2, r, te, tr, _ = env.step(k, s, oracle_action(s), p)
            return (s2, done | te | tr, ret + jnp.where(done, 0.0, r)), None

        (_, _, ret), _ = jax.lax.scan(body, (s, False, 0.0), jax.random.split(key, 48))
        return obs, ret

    keys = jax.random.split(jax.random.key(0), 6)
    out = {}
    for variant in ("easy", "hard"):
        p = envs.make("open-world", variant=variant, max_steps=48)[1]
        out[variant] = episode(keys, jax.tree.map(lambda x: jnp.full((6,), x), p))
    return out


def test_expert_collects_the_target_on_both_variants(expert_runs):
    for variant, (_, ret) in expert_runs.items():
        assert np.all(np.asarray(ret) == 1.0), variant


def test_far_targets_are_small_and_visible(expert_runs):
    far = np.array([_target_pixels(o).sum() for o in expert_runs["hard"][0]])
    near = np.array([_target_pixels(o).sum() for o in expert_runs["easy"][0]])
    assert np.all(far >= 1), far  # visible at the start
    assert far.mean() < 30 and near.mean() > 3 * far.mean(), (far, near)


def test_zoom_towards_the_target_enlarges_it(expert_runs):
    obs = expert_runs["hard"][0][0]
    mask = _target_pixels(obs)
    rows, cols = np.nonzero(mask)
    centre = jnp.array([rows.mean(), cols.mean()], jnp.float32)
    zoomed = zoom(obs, centre, 8.0)
    assert zoomed.shape == obs.shape
    assert _target_pixels(zoomed).sum() > 4 * mask.sum()
    # the whole image as the box is the identity (up to interpolation)
    same = zoom(obs, jnp.array([16.0, 16.0]), 32.0)
    np.testing.assert_allclose(np.asarray(same), np.asarray(obs, np.float32), atol=1.0)


def test_bad_options_name_the_field():
    with pytest.raises(ConfigError, match="obs_size"):
        envs.make("open-world", obs_size=48)
    with pytest.raises(ConfigError, match="variant"):
        envs.make("open-world", variant="medium")

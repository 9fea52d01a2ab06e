"""The ego state perturbation of Diffusion Planner training (``jaxlab.envs.driving.perturbation``):
a rigid re-centring of every token, a quintic re-plan of the ego future that reproduces uniform
motion exactly and joins the logged future smoothly, the drawing rate, and its switches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs.driving.perturbation import StatePerturbation, perturb_ego_state

B, N, H, S, L, P, T = 64, 3, 4, 2, 3, 8, 16
DT = 0.1


def _scene(key, speed=8.0):
    """Straight-road scenes in the ego frame: ego at ``speed`` along +x, neighbours ahead."""
    k = jax.random.split(key, 4)
    nb_xy = jax.random.uniform(k[0], (B, N, 1, 2), minval=-20.0, maxval=20.0)
    past = nb_xy + jnp.arange(H)[None, None, :, None] * jnp.array([0.5, 0.0])[None, None, None]
    one, zero = jnp.ones((B, N, H, 1)), jnp.zeros((B, N, H, 1))
    neighbours = jnp.concatenate([past, one, zero, 5 * one, zero, 4.5 * one, 2 * one], -1)
    nb_valid = jnp.array([[True, True, False]] * B)
    neighbours = jnp.where(nb_valid[:, :, None, None], neighbours, 0.0)
    xs = jnp.linspace(-10.0, 50.0, P)
    lane = lambda y: jnp.stack(  # noqa: E731
        [xs, jnp.full(P, y), jnp.ones(P), jnp.zeros(P)], -1
    )
    lanes = jnp.broadcast_to(jnp.stack([lane(0.0), lane(3.5), lane(7.0)]), (B, L, P, 4))
    lane_valid = jnp.array([[True, True, False]] * B)
    lanes = jnp.where(lane_valid[:, :, None, None], lanes, 0.0)
    st_xy = jax.random.uniform(k[1], (B, S, 2), minval=5.0, maxval=30.0)
    size = jnp.broadcast_to(jnp.array([1.0, 0.0, 4.5, 2.0]), (B, S, 4))
    static = jnp.concatenate([st_xy, size], -1)
    static_valid = jnp.array([[True, False]] * B)
    static = jnp.where(static_valid[:, :, None], static, 0.0)
    ego_cur = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0, 0.0]), (B, 1, 4))
    current = jnp.concatenate([ego_cur, neighbours[:, :, -1, :4]], 1)
    scene = {
        "ego": jnp.broadcast_to(jnp.array([speed, 0.0, 0.0]), (B, 3)),
        "current": current,
        "neighbours": neighbours,
        "neighbour_valid": nb_valid,
        "static": static,
        "static_valid": static_valid,
        "lanes": lanes,
        "lane_valid": lane_valid,
        "route": lanes[:, :1],
        "route_valid": jnp.ones((B, 1), bool),
        "lane_boundaries": jnp.where(
            lane_valid[:, :, None, None], jnp.array([0.0, 1.75, 0.0, -1.75]), 0.0
        ),
    }
    t = DT * jnp.arange(1, T + 1)
    ego_f = jnp.stack([speed * t, 0 * t, jnp.ones(T), jnp.zeros(T)], -1)
    nb_f = current[:, 1:, None, :] + jnp.stack([5 * t, 0 * t, 0 * t, 0 * t], -1)[None, None]
    future = jnp.concatenate([jnp.broadcast_to(ego_f, (B, 1, T, 4)), nb_f], 1)
    return scene, future


_perturb = jax.jit(perturb_ego_state, static_argnames=("aug", "dt"))


def _points(scene, future):
    """Every valid position of a sample (the rigid re-centring must keep their distances)."""
    pts = [
        scene["lanes"][:2].reshape(-1, 4)[:, :2],
        scene["static"][:1, :2],
        scene["neighbours"][:2].reshape(-1, 8)[:, :2],
        scene["current"][1:3, :2],  # the ego row is the origin of either frame
        future[1:3].reshape(-1, 4)[:, :2],
        future[0, 10:, :2],  # the logged part of the ego future (after the join)
    ]
    return np.concatenate([np.asarray(p) for p in pts], 0)


def test_off_is_identity_and_slow_samples_untouched():
    scene, future = _scene(jax.random.PRNGKey(0))
    s0, f0 = perturb_ego_state(
        jax.random.PRNGKey(1), scene, future, StatePerturbation(prob=0.0), dt=DT
    )
    assert f0 is future and all(s0[k] is scene[k] for k in scene)
    slow, fs = _scene(jax.random.PRNGKey(0), speed=1.5)
    s1, f1 = _perturb(jax.random.PRNGKey(1), slow, fs, aug=StatePerturbation(prob=1.0), dt=DT)
    for k in scene:
        np.testing.assert_array_equal(s1[k], slow[k])
    np.testing.assert_array_equal(f1, fs)


def test_zero_perturbation_reproduces_uniform_motion():
    """A quintic through the boundary values of uniform straight motion is that motion."""
    aug = StatePerturbation(prob=1.0, lateral=0.0, yaw=0.0, speed=0.0, accel=0.0, refine=10)
    scene, future = _scene(jax.random.PRNGKey(0))
    s1, f1 = _perturb(jax.random.PRNGKey(1), scene, future, aug=aug, dt=DT)
    np.testing.assert_allclose(f1, future, atol=2e-4)
    for k in scene:
        np.testing.assert_allclose(s1[k], scene[k], atol=1e-6)


def test_perturbation_is_rigid_and_the_replan_starts_at_the_ego_and_joins_the_log():
    aug = StatePerturbation(prob=1.0, refine=10)
    scene, future = _scene(jax.random.PRNGKey(0))
    s1, f1 = _perturb(jax.random.PRNGKey(3), scene, future, aug=aug, dt=DT)
    for b in range(8):
        p0 = _points(jax.tree.map(lambda v, b=b: v[b], scene), future[b])
        p1 = _points(jax.tree.map(lambda v, b=b: v[b], s1), f1[b])
        d0 = np.linalg.norm(p0[:, None] - p0[None], axis=-1)
        d1 = np.linalg.norm(p1[:, None] - p1[None], axis=-1)
        np.testing.assert_allclose(d1, d0, atol=2e-3)
    # absent entries stay zero, the ego stays at the origin heading +x
    np.testing.assert_array_equal(s1["neighbours"][:, 2], 0.0)
    np.testing.assert_array_equal(s1["lanes"][:, 2], 0.0)
    # lane boundary offsets turn with the lanes: still 1.75 m to the left and right of them
    ln, bd = np.asarray(s1["lanes"][:, :2]), np.asarray(s1["lane_boundaries"][:, :2])
    np.testing.assert_allclose(ln[..., 2] * bd[..., 1] - ln[..., 3] * bd[..., 0], 1.75, atol=1e-4)
    np.testing.assert_allclose(bd[..., 2:], -bd[..., :2], atol=1e-6)
    assert np.std(bd[..., 0]) > 0.01
    np.testing.assert_array_equal(s1["lane_boundaries"][:, 2], 0.0)
    np.testing.assert_array_equal(s1["current"][:, 0], scene["current"][:, 0])
    # perturbed speeds within +-1 m/s, and some samples actually moved
    dv = np.asarray(s1["ego"][:, 0] - scene["ego"][:, 0])
    assert np.all(np.abs(dv) <= 1.0 + 1e-5) and np.std(dv) > 0.2
    assert np.std(np.asarray(s1["lanes"][:, 0, 0, 1])) > 0.1  # the lateral offset varies
    # the re-planned ego leaves the origin at the perturbed speed (first step v0 dt + O(dt^2)) ...
    first = np.linalg.norm(np.asarray(f1[:, 0, 0, :2]), axis=-1)
    np.testing.assert_allclose(first, np.asarray(s1["ego"][:, 0]) * DT, atol=0.03)
    # ... and joins the logged future with a continuous step length (uniform log: 0.8 m a step)
    steps = np.linalg.norm(np.diff(np.asarray(f1[:, 0, :, :2]), axis=1), axis=-1)
    assert np.all(np.abs(steps[:, 8:11] - 0.8) < 0.05)
    # headings of the valid agents are unit vectors
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(f1[:, :3, :, 2:]), axis=-1), 1.0, atol=1e-5
    )


def test_rate_matches_prob_and_bad_settings_are_named():
    scene, future = _scene(jax.random.PRNGKey(0))
    moved = []
    for i in range(4):
        s1, _ = _perturb(jax.random.PRNGKey(10 + i), scene, future, aug=StatePerturbation(), dt=DT)
        moved.append(np.any(np.asarray(s1["lanes"] != scene["lanes"]).reshape(B, -1), 1))
    k = int(np.sum(moved))  # Binomial(256, 0.5): mean 128, sd 8
    assert abs(k - 128) < 4 * 8, k
    with pytest.raises(ConfigError, match="augment.prob"):
        StatePerturbation(prob=1.5)
    with pytest.raises(ConfigError, match="augment.refine"):
        StatePerturbation(refine=1)

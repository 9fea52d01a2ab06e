"""Diffusion Planner guidance energies on hand-built plans (no network): the collision push is
lateral and smooth along time (the original's form), the exp-mean cost, the smoothing kernel
against NumPy, and signed speeds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion import planner_energies as pe
from jaxlab.diffusion.planner import PlannerConfig

T = 12
CFG = PlannerConfig(horizon=T)


def _straight(step=0.8):
    t = np.arange(T + 1) * step
    return np.stack([t, 0 * t, 1 + 0 * t, 0 * t], -1)


def _scene():
    return {
        "neighbour_valid": jnp.array([[True]]),
        "static": jnp.zeros((1, 1, 6)),
        "static_valid": jnp.array([[False]]),
        "lanes": jnp.asarray(_straight(2.0)[None, None]),
        "lane_valid": jnp.array([[True]]),
    }


def test_smoothing_matrix_is_the_replicate_padded_convolution():
    g = np.random.default_rng(0).normal(size=T)
    ref = np.convolve(np.pad(g, 10, mode="edge"), pe.SMOOTH_TAPS[::-1], "valid")
    np.testing.assert_allclose(pe.smoothing_matrix(T) @ g, ref, rtol=1e-12)
    np.testing.assert_allclose(pe.smoothing_matrix(T, normalised=True).sum(1), 1.0)


def test_exp_mean_cost_averages_overlapping_and_near_pairs_apart():
    pen = jnp.array([[[2.0, 3.0, 0.5], [0.25, 0.0, 0.0]]])
    np.testing.assert_allclose(
        pe.exp_mean_cost(pen), np.exp(2.5 + 0.375), rtol=1e-4
    )  # the 1e-5 in each count
    np.testing.assert_allclose(pe.exp_mean_cost(jnp.zeros((1, 2, 3))), 1.0)


def test_collision_push_is_lateral_smooth_in_time_and_only_on_the_ego_plan():
    """A neighbour beside the ego's plan at one future step only (k = 4, 1.5 m to its left):
    the push has no longitudinal part (the plan heads +x), reaches every future step as one
    bump peaked at k, points away from the neighbour, and leaves the neighbour, the headings
    and the current state alone."""
    k = 4
    ego = _straight()
    nb = np.tile(np.array([0.0, 40.0, 1.0, 0.0]), (T + 1, 1))
    nb[k] = ego[k] + np.array([0.0, 1.5, 0.0, 0.0])
    x = jnp.asarray(np.stack([ego, nb])[None], jnp.float32)
    pen = jax.jit(pe.collision_penalties)(x, _scene())
    assert float(pen[0, 0, k - 1]) > 0 and float(jnp.sum(pen)) == float(pen[0, 0, k - 1])
    energy = jax.jit(jax.value_and_grad(lambda v: jnp.sum(pe.collision_energy(v, _scene(), CFG))))
    value, g = energy(x)
    g = np.asarray(g)[0]
    np.testing.assert_array_equal(g[1], 0.0)
    np.testing.assert_array_equal(g[0, :, 2:], 0.0)
    np.testing.assert_array_equal(g[0, 0], 0.0)
    np.testing.assert_array_equal(g[0, 1:, 0], 0.0)  # lateral only
    lat = g[0, 1:, 1]
    assert np.all(lat > 0)  # descent moves every point away from the neighbour (to -y)
    assert int(np.argmax(lat)) == k - 1
    assert np.all(np.diff(lat[: k - 1]) > 0) and np.all(np.diff(lat[k - 1 :]) < 0)
    assert lat.min() > 0.1 * lat.max()  # spread over the whole plan, not a spike at step k
    np.testing.assert_allclose(value, pe.exp_mean_cost(pen)[0], rtol=1e-6)


def test_other_energies_keep_their_value_and_smooth_their_gradient_in_time():
    ego = _straight()
    ego[5:, 1] += 3.0  # leaves the lane (half width 1.75 m) from step 5
    x = jnp.asarray(ego[None, None], jnp.float32)
    scene = _scene()

    def vg(fn):
        return jax.jit(jax.value_and_grad(lambda v: jnp.sum(fn(v, scene, CFG))))(x)

    raw, g_raw = vg(pe.drivable_energy)
    value, g = vg(pe.ENERGIES["drivable"])
    np.testing.assert_allclose(value, raw, rtol=1e-6)
    g_raw, g = np.asarray(g_raw), np.asarray(g)
    s = pe.smoothing_matrix(T, normalised=True)
    np.testing.assert_allclose(g[0, 0, 1:, :2], s @ g_raw[0, 0, 1:, :2], rtol=1e-4, atol=1e-5)
    assert np.all(g[0, 0, 1:5, 1] > 0)  # the steps before the lane exit are pulled along


def test_speeds_are_signed_progress_along_the_heading():
    ego = _straight()
    ego[3, 0] = ego[2, 0] - 1.0  # a point 1 m behind the previous one
    v = np.asarray(pe._speeds(jnp.asarray(ego[None, None]), 0.1))[0]
    np.testing.assert_allclose(v[[0, 1, 4]], 8.0, rtol=1e-4)
    np.testing.assert_allclose(v[2], -10.0, rtol=1e-4)

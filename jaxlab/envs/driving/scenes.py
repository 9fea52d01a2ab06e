"""The scene generators of the driving world (straight road, intersection, merge).

Each generator returns lanes (6, K, 2), lane_valid (6,), ego routes (3,), their probabilities, the
ego's start arc length, neighbour lane candidates (N, 3) with probabilities, the neighbours'
first slot (arc length), parked cars (S, 5) and their validity, and the lanes' map attributes
(a tuple: traffic-light state, speed limit in m/s, whether one is known); :func:`sample_scene`
picks one by its traced index.

Map attributes (the original's per-lane inputs): only the intersection has signals; its phase
gives the approach (the ego's three routes) and the oncoming lane green, the cross road red, and
nobody in the scenes drives on the cross road (the world has no stop lines). Lanes without a
signal read "unknown". The roads' speed limit is 10 m/s (no driver's desired speed exceeds it);
the intersection's oncoming lane and cross road have no known limit, as map data often lack one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int, PRNGKeyArray

SCENE_TYPES: tuple[str, ...] = ("straight", "intersection", "merge")
LANE_WIDTH = 3.5
#: traffic-light states, the original's one-hot order
LIGHT_STATES: tuple[str, ...] = ("green", "yellow", "red", "unknown")
GREEN, RED, UNKNOWN = 0, 2, 3
SPEED_LIMIT = 10.0


def _lane_info(light, has_limit):
    """(light (6,) int, speed limit (6,) m/s, has limit (6,) bool) of a scene's six lanes."""
    has = jnp.asarray(has_limit, bool)
    return (jnp.asarray(light, jnp.int32), jnp.where(has, SPEED_LIMIT, 0.0), has)


def _straight(p0, heading, length, n):
    u = jnp.linspace(0.0, 1.0, n)[:, None]
    return p0[None] + u * length * jnp.stack([jnp.cos(heading), jnp.sin(heading)])[None]


def _arc(center, radius, th0, th1, n):
    th = jnp.linspace(th0, th1, n)
    return center[None] + radius * jnp.stack([jnp.cos(th), jnp.sin(th)], -1)


def _smooth_shift(x0, x1, y0, y1, n, x_from, x_to):
    """Points along x in [x_from, x_to], y moving smoothly (smoothstep) from y0 to y1 over [x0, x1]."""
    x = jnp.linspace(x_from, x_to, n)
    u = jnp.clip((x - x0) / (x1 - x0), 0.0, 1.0)
    return jnp.stack([x, y0 + (y1 - y0) * u * u * (3 - 2 * u)], -1)


_K = 48  # points per scene segment before resampling


def _scene_straight(key, n_nb, n_static):
    k1, k2 = jax.random.split(key)
    x_lc = jax.random.uniform(k1, (), minval=15.0, maxval=25.0)
    n = 3 * _K
    lane0 = _smooth_shift(0.0, 1.0, 0.0, 0.0, n, -20.0, 110.0)
    lane1 = _smooth_shift(0.0, 1.0, LANE_WIDTH, LANE_WIDTH, n, -20.0, 110.0)
    lc01 = _smooth_shift(x_lc, x_lc + 25.0, 0.0, LANE_WIDTH, n, -20.0, 110.0)
    lc10 = _smooth_shift(x_lc, x_lc + 25.0, LANE_WIDTH, 0.0, n, -20.0, 110.0)
    lanes = jnp.stack([lane0, lane1, lc01, lc10, lane0, lane1])
    valid = jnp.array([True, True, True, True, False, False])
    parked = jax.random.bernoulli(k2, 0.5)
    static = jnp.zeros((n_static, 5)).at[0].set(jnp.array([x_lc + 30.0, 0.0, 0.0, 4.5, 2.0]))
    static_valid = jnp.zeros(n_static, bool).at[0].set(parked)
    probs = jnp.where(parked, jnp.array([0.0, 1.0, 0.0]), jnp.array([0.5, 0.5, 0.0]))
    nb_lanes = jnp.tile(jnp.array([0, 1, 1]), (n_nb, 1))
    nb_probs = jnp.tile(jnp.array([0.5, 0.5, 0.0]), (n_nb, 1))
    routes = jnp.array([0, 2, 2])
    info = _lane_info([UNKNOWN] * 6, valid)
    return lanes, valid, routes, probs, 20.0, nb_lanes, nb_probs, 30.0, static, static_valid, info


def _scene_intersection(key, n_nb, n_static):
    k1, k2 = jax.random.split(key)
    r_left = 10.0 + jax.random.uniform(k1, (), minval=-1.0, maxval=1.0)
    r_right = 6.0
    app = _straight(jnp.array([0.0, -40.0]), jnp.pi / 2, 40.0, _K)
    straight = jnp.concatenate([app, _straight(jnp.array([0.0, 0.0]), jnp.pi / 2, 70.0, 2 * _K)])
    left = jnp.concatenate(
        [
            app,
            _arc(jnp.array([-r_left, 0.0]), r_left, 0.0, jnp.pi / 2, _K),
            _straight(jnp.array([-r_left, r_left]), jnp.pi, 60.0, _K),
        ]
    )
    right = jnp.concatenate(
        [
            app,
            _arc(jnp.array([r_right, 0.0]), r_right, jnp.pi, jnp.pi / 2, _K),
            _straight(jnp.array([r_right, r_right]), 0.0, 60.0, _K),
        ]
    )
    oncoming = _straight(jnp.array([-LANE_WIDTH, 70.0]), -jnp.pi / 2, 110.0, 3 * _K)
    cross = _straight(jnp.array([-70.0, r_right]), 0.0, 140.0, 3 * _K)
    lanes = jnp.stack([left, straight, right, oncoming, cross, cross])
    valid = jnp.array([True, True, True, True, True, False])
    parked = jax.random.bernoulli(k2, 0.5)
    static = jnp.zeros((n_static, 5)).at[0].set(jnp.array([3.3, -1.0, jnp.pi / 2, 4.5, 2.0]))
    static_valid = jnp.zeros(n_static, bool).at[0].set(parked)
    third = jnp.full(3, 1.0 / 3.0)
    nb_lanes = jnp.tile(jnp.array([0, 1, 2]), (n_nb, 1))
    nb_probs = jnp.tile(third, (n_nb, 1))
    return (
        lanes,
        valid,
        jnp.array([0, 1, 2]),
        third,
        24.0,
        nb_lanes,
        nb_probs,
        36.0,
        static,
        static_valid,
        _lane_info(
            [GREEN, GREEN, GREEN, GREEN, RED, UNKNOWN], [True, True, True, False, False, False]
        ),
    )


def _scene_merge(key, n_nb, n_static):
    del key
    n = 3 * _K
    main = _smooth_shift(0.0, 1.0, 0.0, 0.0, n, -60.0, 90.0)
    left = _smooth_shift(0.0, 1.0, LANE_WIDTH, LANE_WIDTH, n, -60.0, 90.0)
    ramp = _smooth_shift(-45.0, 0.0, -12.0, 0.0, n, -50.0, 90.0)
    lanes = jnp.stack([main, left, ramp, main, main, main])
    valid = jnp.array([True, True, True, False, False, False])
    static = jnp.zeros((n_static, 5))
    static_valid = jnp.zeros(n_static, bool)
    nb_lanes = jnp.tile(jnp.array([0, 1, 0]), (n_nb, 1))
    nb_probs = jnp.tile(jnp.array([0.5, 0.5, 0.0]), (n_nb, 1))
    return (
        lanes,
        valid,
        jnp.array([2, 2, 2]),
        jnp.array([1.0, 0.0, 0.0]),
        10.0,
        nb_lanes,
        nb_probs,
        62.0,
        static,
        static_valid,
        _lane_info([UNKNOWN] * 6, valid),
    )


def sample_scene(key: PRNGKeyArray, scene: Int[Array, ""], n_nb: int, n_static: int) -> tuple:
    """The generator of scene type ``scene`` (0 straight, 1 intersection, 2 merge) run with
    ``key`` under ``lax.switch`` (``scene`` may be traced); its outputs as listed above."""
    return jax.lax.switch(
        scene,
        [
            lambda k: _scene_straight(k, n_nb, n_static),
            lambda k: _scene_intersection(k, n_nb, n_static),
            lambda k: _scene_merge(k, n_nb, n_static),
        ],
        key,
    )

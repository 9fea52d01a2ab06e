"""A small driving world in JAX: Diffusion Planner's closed-loop simulator (papers/diffusion.md §3).

nuPlan is not available here, so the planner is trained and evaluated in this procedurally
generated world. Everything is a fixed-capacity struct of arrays (``DrivingStatic``), so ``reset``
and ``step`` jit and vmap over scenes. Registered as ``"driving"``.

Scenes (``scene_type``; -1 draws one uniformly):

- 0 ``straight``: a two-lane road along x; lanes 0 and 1, and the lane-change routes 0 -> 1 and
  1 -> 0 as their own polylines. The ego starts on lane 0 and either keeps its lane or changes
  (probability 1/2 each; a parked car on lane 0 (probability 1/2) forces the change).
- 1 ``intersection``: an approach from the south with three routes (left, straight, right, one
  third each), the cross road and the oncoming lane; a parked car may stand beside the approach.
  The ego starts 16 m before the junction, the first neighbour 4 m before it (its turn is not
  yet visible: the neighbours' behaviour modes).
- 2 ``merge``: an on-ramp joining a two-lane main road; the ego starts on the ramp.

Lanes are centre-line polylines of ``lane_dense`` points (world frame, equal arc-length spacing).
Neighbours follow a lane (chosen at random among the scene's routes for their slot: the behaviour
modes) with the intelligent driver model (IDM, Treiber et al. 2000)

    a = a_max [1 - (v / v0)^4 - (s*(v, dv) / gap)^2],  s* = s0 + v T + v dv / (2 sqrt(a_max b)),

whose leader is the nearest agent or parked car ahead within a lateral band. The ego is a
kinematic bicycle (wheelbase 2.7 m) tracking the action: a planned trajectory of ``horizon``
future states (x, y, cos h, sin h) at ``dt`` in the ego frame, with pure pursuit for steering
(look-ahead max(3, 0.8 v) m along the plan) and a proportional speed controller towards the plan's
speed. One step is ``dt`` = 0.1 s (planning at 10 Hz).

Observation (ego frame: ego at the origin heading +x), the planner's token format:

- ``ego`` (3,): speed, acceleration, yaw rate;
- ``current`` (1 + N, 4): current (x, y, cos, sin) of the ego (always (0, 0, 1, 0)) and neighbours;
- ``neighbours`` (N, history, 8): past states (x, y, cos, sin, vx, vy, length, width), oldest
  first, zero for absent neighbours; ``neighbour_valid`` (N,);
- ``static`` (S, 6): parked cars (x, y, cos, sin, length, width); ``static_valid`` (S,);
- ``lanes`` (L, P, 4): P points (x, y, dx, dy) of every lane from 10 m behind to 50 m ahead of
  the ego's projection; ``lane_valid`` (L,);
- ``route`` (1, P, 4): the ego's route lane likewise; ``route_valid`` (1,) False when
  ``params.route_visible`` is False (the planner must then infer the route: multimodal plans).

Reward: progress along the route (m) / 10 per step, -1 on collision. Terminated on a collision
(separating-axis overlap of the oriented boxes) or when the ego is more than ``offroad_limit`` m
from every lane centre; truncated after ``max_steps``.
"""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box, Dict

SCENE_TYPES: tuple[str, ...] = ("straight", "intersection", "merge")
LANE_WIDTH = 3.5
CAR_LENGTH, CAR_WIDTH = 4.5, 2.0
WHEELBASE = 2.7
_IDM = dict(a_max=1.5, b=2.0, s0=2.0, T=1.0)


@dataclasses.dataclass(frozen=True)
class DrivingStatic:
    """Static (shape-fixing) sizes of the world.

    Attributes:
        n_neighbours: neighbour capacity N.
        n_static: parked-car capacity S.
        n_lanes: lane capacity L (6 are used by the scenes; at least 6).
        lane_points: points P per lane token.
        lane_dense: points of the internal lane polylines.
        history: past steps of the neighbour tokens (including the current one).
        horizon: future steps of a plan (the action) and of the planner's trajectories.
    """

    n_neighbours: int = 4
    n_static: int = 2
    n_lanes: int = 6
    lane_points: int = 16
    lane_dense: int = 96
    history: int = 5
    horizon: int = 16

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f.name, v, "a positive int")
        if self.n_lanes < 6:
            raise ConfigError("n_lanes", self.n_lanes, "an int >= 6 (the scenes use 6 lanes)")
        if self.n_static < 1 or self.n_neighbours < 1:
            raise ConfigError("n_neighbours", self.n_neighbours, "an int >= 1")


@struct.dataclass
class DrivingParams:
    """Traced parameters.

    Attributes:
        scene_type: 0 straight, 1 intersection, 2 merge, -1 uniform over the three.
        max_steps: episode length in steps of ``dt``.
        route_visible: whether the route token is given to the planner.
        dt: step (s).
        offroad_limit: distance (m) from every lane centre that ends the episode.
    """

    scene_type: int | Array = -1
    max_steps: int | Array = 60
    route_visible: bool | Array = True
    dt: float | Array = 0.1
    offroad_limit: float | Array = 6.0


@struct.dataclass
class DrivingState:
    """World state (one scene).

    Attributes:
        lanes: (L, M, 2) lane polylines; ``lane_len`` (L,) their lengths; ``lane_valid`` (L,).
        scene: scene type; ``route`` the ego's route lane; ``route_mode`` its index among the
            scene's ego routes (0 left / keep, 1 straight / change, 2 right).
        ego: (4,) x, y, heading, speed; ``ego_acc``, ``ego_yaw_rate`` the last controls' effect.
        ego_v0, ego_headway: the expert driver's style in this scene (IDM desired speed in
            [6, 10] m/s and time headway in [0.6, 1.8] s; hidden from the observation, so the
            expert's future is uncertain given what a planner sees, as a human driver's is).
        nb_lane (N,), nb_s (N,), nb_v (N,), nb_v0 (N,) desired speed, nb_valid (N,).
        static: (S, 5) x, y, heading, length, width; ``static_valid`` (S,).
        past: (history, 1 + N, 4) x, y, heading, speed of ego and neighbours, oldest first.
        t: steps taken; ``start_s`` the ego's arc length on its route at reset.
        (Annotations allow leading batch axes: states are vmapped over scenes.)
    """

    lanes: Float[Array, "*b L M 2"]
    lane_len: Float[Array, "*b L"]
    lane_valid: Bool[Array, "*b L"]
    scene: Int[Array, "*b"]
    route: Int[Array, "*b"]
    route_mode: Int[Array, "*b"]
    ego: Float[Array, "*b 4"]
    ego_acc: Float[Array, "*b"]
    ego_yaw_rate: Float[Array, "*b"]
    ego_v0: Float[Array, "*b"]
    ego_headway: Float[Array, "*b"]
    nb_lane: Int[Array, "*b N"]
    nb_s: Float[Array, "*b N"]
    nb_v: Float[Array, "*b N"]
    nb_v0: Float[Array, "*b N"]
    nb_valid: Bool[Array, "*b N"]
    static: Float[Array, "*b S 5"]
    static_valid: Bool[Array, "*b S"]
    past: Float[Array, "*b H A 4"]
    t: Int[Array, "*b"]
    start_s: Float[Array, "*b"]


# ---------------------------------------------------------------------------------------------
# polylines
# ---------------------------------------------------------------------------------------------


def resample(points: Float[Array, "K 2"], m: int) -> tuple[Float[Array, "m 2"], Float[Array, ""]]:
    """``m`` points at equal arc length along the polyline ``points``, and its length."""
    seg = jnp.linalg.norm(points[1:] - points[:-1], axis=-1)
    cum = jnp.concatenate([jnp.zeros(1, points.dtype), jnp.cumsum(seg)])
    s = jnp.linspace(0.0, cum[-1], m)
    return jnp.stack([jnp.interp(s, cum, points[:, 0]), jnp.interp(s, cum, points[:, 1])], -1), cum[
        -1
    ]


def point_at(
    poly: Float[Array, "M 2"], length: Float[Array, ""], s: Float[Array, "..."]
) -> tuple[Float[Array, "... 2"], Float[Array, "..."]]:
    """Position and heading at arc length ``s`` (clipped to the polyline) of an equal-spaced line."""
    m = poly.shape[0]
    u = jnp.clip(s / jnp.maximum(length, 1e-6), 0.0, 1.0) * (m - 1)
    i = jnp.clip(jnp.floor(u).astype(jnp.int32), 0, m - 2)
    f = (u - i)[..., None]
    p = poly[i] * (1 - f) + poly[i + 1] * f
    d = poly[i + 1] - poly[i]
    return p, jnp.arctan2(d[..., 1], d[..., 0])


def project(
    poly: Float[Array, "M 2"], length: Float[Array, ""], xy: Float[Array, " 2"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(arc length of the nearest point, distance to it) of ``xy`` on an equal-spaced polyline."""
    a, b = poly[:-1], poly[1:]
    ab = b - a
    q = xy[None]
    w = jnp.clip(jnp.sum((q - a) * ab, -1) / jnp.maximum(jnp.sum(ab * ab, -1), 1e-9), 0.0, 1.0)
    d = jnp.linalg.norm(a + w[:, None] * ab - q, axis=-1)
    k = jnp.argmin(d)
    step = length / (poly.shape[0] - 1)
    return (k + w[k]) * step, d[k]


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


# ---------------------------------------------------------------------------------------------
# scenes: each returns lanes (6, K, 2), lane_valid (6,), ego routes (3,), their probabilities,
# the ego's start lane and arc length, neighbour lane candidates (N, 3) with probabilities, the
# neighbours' first slot (arc length), parked cars (S, 5) and their validity.
# ---------------------------------------------------------------------------------------------

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
    return lanes, valid, routes, probs, 20.0, nb_lanes, nb_probs, 30.0, static, static_valid


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
    )


def _box_axes(heading):
    c, s = jnp.cos(heading), jnp.sin(heading)
    return jnp.stack([c, s], -1), jnp.stack([-s, c], -1)


def sat_separation(
    xy_a: Float[Array, "... 2"],
    h_a: Float[Array, "..."],
    size_a: Float[Array, "... 2"],
    xy_b: Float[Array, "... 2"],
    h_b: Float[Array, "..."],
    size_b: Float[Array, "... 2"],
) -> Float[Array, "..."]:
    """Separating-axis separation of two oriented boxes (size = length, width).

    max over the four box axes u of |d.u| - (r_a(u) + r_b(u)), r(u) the half-extent of a box
    projected on u: positive when separated (a lower bound of their distance), negative when they
    overlap (minus the smallest penetration depth).
    """
    fa, la = _box_axes(h_a)
    fb, lb = _box_axes(h_b)
    d = xy_b - xy_a
    seps = []
    for u in (fa, la, fb, lb):
        ra = 0.5 * size_a[..., 0] * jnp.abs(jnp.sum(fa * u, -1)) + 0.5 * size_a[..., 1] * jnp.abs(
            jnp.sum(la * u, -1)
        )
        rb = 0.5 * size_b[..., 0] * jnp.abs(jnp.sum(fb * u, -1)) + 0.5 * size_b[..., 1] * jnp.abs(
            jnp.sum(lb * u, -1)
        )
        seps.append(jnp.abs(jnp.sum(d * u, -1)) - ra - rb)
    return jnp.max(jnp.stack(seps, -1), -1)


def to_frame(
    xy: Float[Array, "... 2"], origin: Float[Array, " 2"], heading: Float[Array, ""]
) -> Float[Array, "... 2"]:
    """World points into the frame at ``origin`` rotated by ``heading``."""
    c, s = jnp.cos(heading), jnp.sin(heading)
    d = xy - origin.reshape((1,) * (xy.ndim - 1) + (2,))
    return jnp.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], -1)


def from_frame(
    xy: Float[Array, "... 2"], origin: Float[Array, " 2"], heading: Float[Array, ""]
) -> Float[Array, "... 2"]:
    """Inverse of :func:`to_frame`."""
    c, s = jnp.cos(heading), jnp.sin(heading)
    rot = jnp.stack([c * xy[..., 0] - s * xy[..., 1], s * xy[..., 0] + c * xy[..., 1]], -1)
    return origin.reshape((1,) * (xy.ndim - 1) + (2,)) + rot


class DrivingWorld(Environment):
    """The driving world of the module docstring (static sizes in ``static``)."""

    obs_is_function_of_state = True

    def __init__(self, static: DrivingStatic | None = None, auto_reset: bool = True):
        self.static = DrivingStatic() if static is None else static
        if not isinstance(self.static, DrivingStatic):
            raise ConfigError("static", static, "a DrivingStatic")
        self.auto_reset = bool(auto_reset)

    def __eq__(self, other):
        return (
            type(other) is type(self)
            and other.static == self.static
            and other.auto_reset == self.auto_reset
        )

    def __hash__(self):
        return hash((type(self).__name__, self.static, self.auto_reset))

    @property
    def default_params(self) -> DrivingParams:
        return DrivingParams()

    # ------------------------------------------------------------------ geometry of agents
    def neighbour_poses(
        self, state: DrivingState
    ) -> tuple[Float[Array, "N 2"], Float[Array, " N"]]:
        """World positions and headings of the neighbours."""
        poly = state.lanes[state.nb_lane]
        length = state.lane_len[state.nb_lane]
        return jax.vmap(point_at)(poly, length, state.nb_s)

    def agents(self, state: DrivingState) -> Float[Array, "A 4"]:
        """(x, y, heading, speed) of ego and neighbours (absent neighbours as they are)."""
        xy, h = self.neighbour_poses(state)
        nb = jnp.concatenate([xy, h[:, None], state.nb_v[:, None]], -1)
        return jnp.concatenate([state.ego[None], nb], 0)

    # ------------------------------------------------------------------ reset
    def reset_env(self, key: PRNGKeyArray, params: DrivingParams):
        sp = self.static
        n_nb, n_st = sp.n_neighbours, sp.n_static
        ks = jax.random.split(key, 10)
        scene = jnp.where(
            jnp.asarray(params.scene_type) < 0,
            jax.random.randint(ks[0], (), 0, 3),
            jnp.asarray(params.scene_type),
        ).astype(jnp.int32)
        out = jax.lax.switch(
            scene,
            [
                lambda k: _scene_straight(k, n_nb, n_st),
                lambda k: _scene_intersection(k, n_nb, n_st),
                lambda k: _scene_merge(k, n_nb, n_st),
            ],
            ks[1],
        )
        lanes_k, lvalid, routes, rprobs, ego_s, nb_lanes, nb_probs, nb_first, st, st_valid = out
        lanes, lens = jax.vmap(lambda p: resample(p, sp.lane_dense))(lanes_k)
        pad = sp.n_lanes - 6
        lanes = jnp.concatenate([lanes, jnp.zeros((pad,) + lanes.shape[1:])], 0)
        lens = jnp.concatenate([lens, jnp.ones(pad)])
        lvalid = jnp.concatenate([lvalid, jnp.zeros(pad, bool)])
        mode = jax.random.categorical(ks[2], jnp.log(rprobs + 1e-12)).astype(jnp.int32)
        route = routes[mode].astype(jnp.int32)
        ego_xy, ego_h = point_at(lanes[route], lens[route], jnp.asarray(ego_s))
        v_ego = jax.random.uniform(ks[3], (), minval=5.0, maxval=8.0)
        ego = jnp.concatenate([ego_xy, jnp.stack([ego_h, v_ego])])
        # neighbours: a random number, each on its own slot (10 m apart) ahead of the ego
        count = jax.random.randint(ks[4], (), 1, n_nb + 1)
        nb_valid = jnp.arange(n_nb) < count
        choice = jax.vmap(lambda k, p: jax.random.categorical(k, jnp.log(p + 1e-12)))(
            jax.random.split(ks[5], n_nb), nb_probs
        )
        nb_lane = jnp.take_along_axis(nb_lanes, choice[:, None], 1)[:, 0].astype(jnp.int32)
        jitter = jax.random.uniform(ks[6], (n_nb,), minval=-1.5, maxval=1.5)
        nb_s = nb_first + 11.0 * jnp.arange(n_nb) + jitter
        nb_v0 = jax.random.uniform(ks[7], (n_nb,), minval=4.0, maxval=9.0)
        start_s, _ = project(lanes[route], lens[route], ego_xy)
        state = DrivingState(
            lanes=lanes.astype(jnp.float32),
            lane_len=lens.astype(jnp.float32),
            lane_valid=lvalid,
            scene=scene,
            route=route,
            route_mode=mode,
            ego=ego.astype(jnp.float32),
            ego_acc=jnp.float32(0.0),
            ego_yaw_rate=jnp.float32(0.0),
            ego_v0=jax.random.uniform(ks[8], (), jnp.float32, 6.0, 10.0),
            ego_headway=jax.random.uniform(ks[9], (), jnp.float32, 0.6, 1.8),
            nb_lane=nb_lane,
            nb_s=nb_s.astype(jnp.float32),
            nb_v=nb_v0.astype(jnp.float32),
            nb_v0=nb_v0.astype(jnp.float32),
            nb_valid=nb_valid,
            static=st.astype(jnp.float32),
            static_valid=st_valid,
            past=jnp.zeros((sp.history, 1 + n_nb, 4), jnp.float32),
            t=jnp.int32(0),
            start_s=start_s.astype(jnp.float32),
        )
        # history: constant-velocity back-extrapolation of the initial poses
        ag = self.agents(state)
        back = (jnp.arange(sp.history)[::-1] * params.dt)[:, None]
        past_xy = ag[None, :, :2] - back[..., None] * (
            ag[None, :, 3:4] * jnp.stack([jnp.cos(ag[:, 2]), jnp.sin(ag[:, 2])], -1)[None]
        )
        past = jnp.concatenate(
            [past_xy, jnp.broadcast_to(ag[None, :, 2:], (sp.history,) + ag[:, 2:].shape)], -1
        )
        state = state.replace(past=past.astype(jnp.float32))
        return self.get_obs(state, params), state

    # ------------------------------------------------------------------ dynamics
    def _leader_gaps(
        self, xy: Float[Array, "A 2"], h: Float[Array, " A"], v: Float[Array, " A"], state
    ) -> tuple[Float[Array, " A"], Float[Array, " A"]]:
        """Bumper gap to, and speed of, the nearest agent or parked car ahead of each agent
        (within +-2 m laterally); a free road gives (100 m, own speed)."""
        n_a = xy.shape[0]
        valid_a = jnp.concatenate([jnp.ones(1, bool), state.nb_valid])
        oxy = jnp.concatenate([xy, state.static[:, :2]], 0)
        ov = jnp.concatenate([v, jnp.zeros(self.static.n_static)])
        ovalid = jnp.concatenate([valid_a, state.static_valid])
        olen = jnp.concatenate([jnp.full(n_a, CAR_LENGTH), state.static[:, 3]])
        fwd, lat = _box_axes(h)
        d = oxy[None] - xy[:, None]
        lon = jnp.sum(d * fwd[:, None], -1)
        la = jnp.abs(jnp.sum(d * lat[:, None], -1))
        gap = lon - 0.5 * (CAR_LENGTH + olen[None])
        self_mask = jnp.eye(n_a, oxy.shape[0], dtype=bool)
        ok = (lon > 0) & (la < 2.0) & ovalid[None] & ~self_mask
        gap = jnp.where(ok, gap, 100.0)
        j = jnp.argmin(gap, -1)
        return jnp.take_along_axis(gap, j[:, None], 1)[:, 0], jnp.where(
            jnp.take_along_axis(ok, j[:, None], 1)[:, 0], ov[j], v
        )

    @staticmethod
    def idm(v, v0, gap, v_lead, headway=_IDM["T"]):
        """IDM acceleration (module docstring); ``headway`` is T."""
        dv = v - v_lead
        s_star = _IDM["s0"] + v * headway + v * dv / (2 * jnp.sqrt(_IDM["a_max"] * _IDM["b"]))
        s_star = jnp.maximum(s_star, _IDM["s0"])
        acc = _IDM["a_max"] * (
            1 - (v / jnp.maximum(v0, 0.1)) ** 4 - (s_star / jnp.maximum(gap, 0.1)) ** 2
        )
        return jnp.clip(acc, -8.0, _IDM["a_max"])

    def track(
        self, ego: Float[Array, " 4"], plan: Float[Array, "T 4"], dt: float | Array
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """Pure pursuit + speed control of the ego towards an ego-frame plan: (accel, steer)."""
        plan_xy = jnp.nan_to_num(plan[:, :2])
        v = ego[3]
        pts = jnp.concatenate([jnp.zeros((1, 2)), plan_xy], 0)
        seg = jnp.linalg.norm(pts[1:] - pts[:-1], axis=-1)
        v_des = jnp.mean(seg[:3]) / dt
        acc = jnp.clip(2.0 * (v_des - v), -6.0, 3.0)
        dist = jnp.linalg.norm(plan_xy, axis=-1)
        look = jnp.maximum(3.0, 0.8 * v)
        idx = jnp.argmax(jnp.where(dist >= look, 1.0, 0.0) - 1e-3 * jnp.arange(dist.shape[0]))
        idx = jnp.where(jnp.any(dist >= look), idx, dist.shape[0] - 1)
        target = plan_xy[idx]
        ld = jnp.maximum(jnp.linalg.norm(target), 1e-3)
        alpha = jnp.arctan2(target[1], jnp.maximum(target[0], 1e-3))
        steer = jnp.arctan(2 * WHEELBASE * jnp.sin(alpha) / ld)
        steer = jnp.where(target[0] > 0.1, steer, 0.0)
        return acc, jnp.clip(steer, -0.6, 0.6)

    def step_env(self, key, state: DrivingState, action, params: DrivingParams):
        del key
        dt = jnp.asarray(params.dt, jnp.float32)
        plan = jnp.asarray(action, jnp.float32)
        acc, steer = self.track(state.ego, plan, dt)
        x, y, h, v = state.ego
        v_new = jnp.clip(v + acc * dt, 0.0, 15.0)
        yaw_rate = v * jnp.tan(steer) / WHEELBASE
        ego = jnp.stack(
            [x + v * jnp.cos(h) * dt, y + v * jnp.sin(h) * dt, h + yaw_rate * dt, v_new]
        )
        ag = self.agents(state)
        gap, v_lead = self._leader_gaps(ag[:, :2], ag[:, 2], ag[:, 3], state)
        a_nb = self.idm(state.nb_v, state.nb_v0, gap[1:], v_lead[1:])
        nb_v = jnp.clip(state.nb_v + a_nb * dt, 0.0, 20.0)
        nb_s = jnp.minimum(state.nb_s + nb_v * dt, state.lane_len[state.nb_lane])
        new = state.replace(
            ego=ego.astype(jnp.float32),
            ego_acc=((v_new - v) / dt).astype(jnp.float32),
            ego_yaw_rate=yaw_rate.astype(jnp.float32),
            nb_s=nb_s.astype(jnp.float32),
            nb_v=nb_v.astype(jnp.float32),
            t=state.t + 1,
        )
        ag2 = self.agents(new)
        new = new.replace(past=jnp.concatenate([state.past[1:], ag2[None]], 0))
        ev = self.events(new, params)
        s_prev, _ = project(state.lanes[state.route], state.lane_len[state.route], state.ego[:2])
        progress = ev["route_s"] - s_prev
        reward = (progress / 10.0 - ev["collision"].astype(jnp.float32)).astype(jnp.float32)
        terminated = ev["collision"] | (ev["offroad_dist"] > params.offroad_limit)
        truncated = (new.t >= params.max_steps) & ~terminated
        info = {k: ev[k] for k in ("collision", "offroad_dist", "route_s", "min_separation")}
        info["scene"] = new.scene
        return self.get_obs(new, params), new, reward, terminated, truncated, info

    def events(self, state: DrivingState, params: DrivingParams) -> dict:
        """Collision (box overlap with a neighbour or parked car), distance outside the lanes
        (m beyond half a lane width from the nearest lane centre), route arc length, and the
        smallest box separation."""
        xy, h = self.neighbour_poses(state)
        car = jnp.array([CAR_LENGTH, CAR_WIDTH])
        sep_nb = sat_separation(state.ego[None, :2], state.ego[2:3], car[None], xy, h, car[None])
        sep_st = sat_separation(
            state.ego[None, :2],
            state.ego[2:3],
            car[None],
            state.static[:, :2],
            state.static[:, 2],
            state.static[:, 3:5],
        )
        sep = jnp.concatenate(
            [jnp.where(state.nb_valid, sep_nb, 1e3), jnp.where(state.static_valid, sep_st, 1e3)]
        )
        d = jax.vmap(lambda p, n: project(p, n, state.ego[:2])[1])(state.lanes, state.lane_len)
        d = jnp.min(jnp.where(state.lane_valid, d, 1e3))
        route_s, _ = project(state.lanes[state.route], state.lane_len[state.route], state.ego[:2])
        return {
            "collision": jnp.min(sep) < 0.0,
            "min_separation": jnp.min(sep),
            "offroad_dist": jnp.maximum(d - 0.5 * LANE_WIDTH, 0.0),
            "route_s": route_s,
        }

    # ------------------------------------------------------------------ observation
    def _lane_tokens(self, poly, length, ego):
        s0, _ = project(poly, length, ego[:2])
        s = s0 + jnp.linspace(-10.0, 50.0, self.static.lane_points)
        p, hd = point_at(poly, length, s)
        p = to_frame(p, ego[:2], ego[2])
        return jnp.concatenate([p, jnp.stack([jnp.cos(hd - ego[2]), jnp.sin(hd - ego[2])], -1)], -1)

    def get_obs(self, state: DrivingState, params: DrivingParams) -> dict:
        ego = state.ego
        past = state.past[:, 1:]  # (H, N, 4)
        pxy = to_frame(past[..., :2], ego[:2], ego[2])
        ph = past[..., 2] - ego[2]
        vel = past[..., 3:4] * jnp.stack([jnp.cos(ph), jnp.sin(ph)], -1)
        size = jnp.broadcast_to(jnp.array([CAR_LENGTH, CAR_WIDTH]), pxy.shape)
        nb = jnp.concatenate([pxy, jnp.cos(ph)[..., None], jnp.sin(ph)[..., None], vel, size], -1)
        nb = jnp.where(state.nb_valid[None, :, None], nb, 0.0).transpose(1, 0, 2)
        cur_nb = nb[:, -1, :4]
        current = jnp.concatenate([jnp.array([[0.0, 0.0, 1.0, 0.0]]), cur_nb], 0)
        sxy = to_frame(state.static[:, :2], ego[:2], ego[2])
        sh = state.static[:, 2] - ego[2]
        static = jnp.concatenate(
            [sxy, jnp.cos(sh)[:, None], jnp.sin(sh)[:, None], state.static[:, 3:5]], -1
        )
        static = jnp.where(state.static_valid[:, None], static, 0.0)
        lanes = jax.vmap(lambda p, n: self._lane_tokens(p, n, ego))(state.lanes, state.lane_len)
        lanes = jnp.where(state.lane_valid[:, None, None], lanes, 0.0)
        route = lanes[state.route][None]
        vis = jnp.asarray(params.route_visible, bool)
        return {
            "ego": jnp.stack([ego[3], state.ego_acc, state.ego_yaw_rate]).astype(jnp.float32),
            "current": current.astype(jnp.float32),
            "neighbours": nb.astype(jnp.float32),
            "neighbour_valid": state.nb_valid,
            "static": static.astype(jnp.float32),
            "static_valid": state.static_valid,
            "lanes": lanes.astype(jnp.float32),
            "lane_valid": state.lane_valid,
            "route": jnp.where(vis, route, 0.0).astype(jnp.float32),
            "route_valid": jnp.reshape(vis, (1,)),
        }

    def action_space(self, params=None) -> Box:
        return Box(-100.0, 100.0, (self.static.horizon, 4), jnp.float32)

    def observation_space(self, params=None) -> Dict:
        sp = self.static
        big = 1e4
        return Dict(
            {
                "ego": Box(-big, big, (3,), jnp.float32),
                "current": Box(-big, big, (1 + sp.n_neighbours, 4), jnp.float32),
                "neighbours": Box(-big, big, (sp.n_neighbours, sp.history, 8), jnp.float32),
                "neighbour_valid": Box(False, True, (sp.n_neighbours,), jnp.bool_),
                "static": Box(-big, big, (sp.n_static, 6), jnp.float32),
                "static_valid": Box(False, True, (sp.n_static,), jnp.bool_),
                "lanes": Box(-big, big, (sp.n_lanes, sp.lane_points, 4), jnp.float32),
                "lane_valid": Box(False, True, (sp.n_lanes,), jnp.bool_),
                "route": Box(-big, big, (1, sp.lane_points, 4), jnp.float32),
                "route_valid": Box(False, True, (1,), jnp.bool_),
            }
        )

    # ------------------------------------------------------------------ the rule-based expert
    def expert_plan(self, state: DrivingState, params: DrivingParams) -> Float[Array, "T 4"]:
        """The rule-based expert: follow the route lane with IDM speed control (the scene's
        ``ego_v0`` and ``ego_headway``) behind the nearest neighbour or parked car ahead along the
        route (assumed to keep its speed); an ego-frame plan (horizon, 4)."""
        dt = params.dt
        poly, length = state.lanes[state.route], state.lane_len[state.route]
        s0, _ = project(poly, length, state.ego[:2])
        # leader: the nearest neighbour or parked car ahead along the route (within 3 m of it)
        ag = self.agents(state)
        oxy = jnp.concatenate([ag[1:, :2], state.static[:, :2]], 0)
        ov = jnp.concatenate([ag[1:, 3], jnp.zeros(self.static.n_static)])
        olen = jnp.concatenate([jnp.full(self.static.n_neighbours, CAR_LENGTH), state.static[:, 3]])
        ovalid = jnp.concatenate([state.nb_valid, state.static_valid])
        so, do = jax.vmap(lambda q: project(poly, length, q))(oxy)
        ahead = ovalid & (so > s0 - 2.0) & (do < 3.0)
        gaps = jnp.where(ahead, so - s0 - 0.5 * (CAR_LENGTH + olen), 100.0)
        j = jnp.argmin(gaps)
        gap0 = gaps[j]
        v_lead0 = jnp.where(ahead[j], ov[j], state.ego[3])
        v0, headway = state.ego_v0, state.ego_headway

        def body(carry, _):
            s, v, g = carry
            a = self.idm(v, v0, g, v_lead0, headway)
            v2 = jnp.clip(v + a * dt, 0.0, 15.0)
            g2 = g + (v_lead0 - v2) * dt
            return (s + v2 * dt, v2, g2), s + v2 * dt

        _, ss = jax.lax.scan(body, (s0, state.ego[3], gap0), None, length=self.static.horizon)
        p, hd = point_at(poly, length, ss)
        p = to_frame(p, state.ego[:2], state.ego[2])
        rel = hd - state.ego[2]
        return jnp.concatenate([p, jnp.cos(rel)[:, None], jnp.sin(rel)[:, None]], -1)

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        state: DrivingState,
        plan: np.ndarray | None = None,
        predictions: np.ndarray | None = None,
        *,
        size: int = 160,
        extent: float = 40.0,
    ) -> np.ndarray:
        """An RGB uint8 top view (ego-centred, ``extent`` m half-width; +x of the ego points right):
        lanes grey, ego blue, neighbours orange, parked cars dark red, the ego plan green and
        neighbour predictions yellow (both (.., T, >=2) in the ego frame)."""
        # numpy copies of the fields (not a DrivingState: its annotations are for jax arrays)
        st = types.SimpleNamespace(
            **{f.name: np.asarray(getattr(state, f.name)) for f in dataclasses.fields(state)}
        )
        img = np.full((size, size, 3), 30, np.uint8)
        ego = np.asarray(st.ego)
        scale = size / (2 * extent)

        def pix(xy_ego):
            u = (xy_ego[..., 0] + extent) * scale
            w = (extent - xy_ego[..., 1]) * scale
            return u, w

        def world_to_ego(xy):
            return np.asarray(to_frame(jnp.asarray(xy), jnp.asarray(ego[:2]), jnp.asarray(ego[2])))

        yy, xx = np.mgrid[0:size, 0:size]
        gx = xx / scale - extent + 0.5 / scale
        gy = extent - yy / scale - 0.5 / scale
        grid = np.stack([gx, gy], -1)
        for li in range(st.lanes.shape[0]):
            if not st.lane_valid[li]:
                continue
            pts = world_to_ego(st.lanes[li])
            d = np.min(np.linalg.norm(grid[:, :, None] - pts[None, None], axis=-1), -1)
            img[d < 0.5 * LANE_WIDTH] = (70, 70, 70)

        def box(xy, h, length, width, color):
            c, s = np.cos(h), np.sin(h)
            d = grid - xy
            lon = d[..., 0] * c + d[..., 1] * s
            lat = -d[..., 0] * s + d[..., 1] * c
            img[(np.abs(lon) < length / 2) & (np.abs(lat) < width / 2)] = color

        nb_xy, nb_h = jax.device_get(self.neighbour_poses(state))
        for i in range(len(nb_xy)):
            if st.nb_valid[i]:
                box(world_to_ego(nb_xy[i]), nb_h[i] - ego[2], CAR_LENGTH, CAR_WIDTH, (230, 140, 30))
        for i in range(st.static.shape[0]):
            if st.static_valid[i]:
                s = st.static[i]
                box(world_to_ego(s[:2]), s[2] - ego[2], s[3], s[4], (140, 20, 20))
        box(np.zeros(2), 0.0, CAR_LENGTH, CAR_WIDTH, (40, 110, 240))

        def dots(traj, color):
            u, w = pix(np.asarray(traj)[..., :2])
            ok = (u >= 0) & (u < size) & (w >= 0) & (w < size)
            img[w[ok].astype(int), u[ok].astype(int)] = color

        if predictions is not None:
            dots(predictions, (240, 220, 40))
        if plan is not None:
            dots(plan, (60, 220, 90))
        return img


def make_driving(
    auto_reset=True,
    scene_type=-1,
    max_steps=60,
    route_visible=True,
    n_neighbours=4,
    horizon=16,
    history=5,
):
    """Registry factory of ``"driving"``: ``(DrivingWorld, DrivingParams)``."""
    if scene_type not in (-1, 0, 1, 2):
        raise ConfigError("scene_type", scene_type, "-1 (random), 0, 1 or 2")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError("max_steps", max_steps, "an int >= 1")
    static = DrivingStatic(n_neighbours=n_neighbours, horizon=horizon, history=history)
    env = DrivingWorld(static, auto_reset=auto_reset)
    params = env.default_params.replace(
        scene_type=scene_type, max_steps=max_steps, route_visible=bool(route_visible)
    )
    return env, params

"""Ego state perturbation for Diffusion Planner training (the original's ``StatePerturbation``).

An imitation planner replanning in closed loop drifts off the expert's state distribution (a
slightly fast plan makes the ego faster, which makes the next plan faster, ...). The original
(``utils/data_augmentation.py``, after PlanTF) trains on samples whose current ego state is
perturbed and whose expert future is re-planned from the perturbed state, so the model learns to
recover. With probability ``prob`` per sample (and only when the ego moves at ``min_speed`` or
more):

1. perturb the current state by uniform noise: lateral offset dy in +-``lateral`` m, heading
   dh in +-``yaw`` rad, speed dv in +-``speed`` m/s (floored at 0), acceleration da in
   +-``accel`` m/s^2 (the original's ranges; it also perturbs lateral speed and acceleration,
   which our bicycle-model ego token does not carry);
2. refine the first ``refine`` future steps by a quintic polynomial per axis (x(t), y(t)) that
   starts at the perturbed position with velocity v0 (cos th0, sin th0) and acceleration
   (a0 cos th0 - v0 w0 sin th0, a0 sin th0 + v0 w0 cos th0) and ends at the logged future step
   ``refine`` with its finite-difference velocity and acceleration (position, velocity and
   acceleration continuous at the join; the original joins at 2.1 s of an 8 s future, we join at
   ``min(refine, T - 1)`` steps of the T-step future). th0 points from the perturbed position to the
   logged future at half the refined span (the original's choice); headings of the refined steps
   are those of the finite differences of the polynomial's points;
3. re-centre every token on the perturbed ego (it is at the origin heading +x again): positions
   p <- R(-dh)(p - (0, dy)), direction vectors d <- R(-dh) d; absent entries stay zero.

Differences from the original, by intent: the acceleration a0 keeps its sign (the original takes
the norm of (ax, ay), so braking enters the polynomial as speeding up); the future's speed and
acceleration at the join are signed along its heading likewise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.envs.driving.geometry import to_frame


@dataclasses.dataclass(frozen=True)
class StatePerturbation:
    """Attributes (the original's defaults):
    prob: probability of perturbing a sample (0 turns the augmentation off).
    lateral, yaw, speed, accel: half-widths of the uniform perturbations (m, rad, m/s, m/s^2).
    min_speed: samples whose ego is slower are left alone (m/s).
    refine: future steps re-planned by the quintic (the original: 20 steps of 0.1 s).
    """

    prob: float = 0.5
    lateral: float = 0.75
    yaw: float = 0.35
    speed: float = 1.0
    accel: float = 0.2
    min_speed: float = 2.0
    refine: int = 20

    def __post_init__(self):
        if not 0.0 <= self.prob <= 1.0:
            raise ConfigError("augment.prob", self.prob, "a probability in [0, 1]")
        for name in ("lateral", "yaw", "speed", "accel", "min_speed"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"augment.{name}", getattr(self, name), "a float >= 0")
        if isinstance(self.refine, bool) or not isinstance(self.refine, int) or self.refine < 2:
            raise ConfigError("augment.refine", self.refine, "an int >= 2")


def _quintic_rows(t_end: float, ts: np.ndarray) -> np.ndarray:
    """(len(ts), 6) matrix mapping boundary values (p0, v0, a0, pT, vT, aT) to p(ts)."""
    t = t_end
    m = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [0, 1, 0, 0, 0, 0],
            [0, 0, 2, 0, 0, 0],
            [1, t, t**2, t**3, t**4, t**5],
            [0, 1, 2 * t, 3 * t**2, 4 * t**3, 5 * t**4],
            [0, 0, 2, 6 * t, 12 * t**2, 20 * t**3],
        ],
        np.float64,
    )
    powers = ts[:, None] ** np.arange(6)[None]
    return (powers @ np.linalg.inv(m)).astype(np.float32)


def _refine_ego(
    future: Float[Array, "T 4"],
    y0: Float[Array, ""],
    v0: Float[Array, ""],
    a0: Float[Array, ""],
    w0: Float[Array, ""],
    *,
    refine: int,
    dt: float,
) -> Float[Array, "T 4"]:
    """The ego future (old frame) with its first ``refine`` steps re-planned from (0, y0)."""
    j = refine  # the join: future index j (time (j + 1) dt) is kept, 0 .. j - 1 are re-planned
    p = future[:, :2]
    th0 = jnp.arctan2(p[j // 2, 1] - y0, p[j // 2, 0])
    vel = (p[j] - p[j - 1]) / dt
    acc = (p[j] - 2 * p[j - 1] + p[j - 2]) / dt**2
    rows = jnp.asarray(_quintic_rows((j + 1) * dt, dt * np.arange(1, j + 1)))  # (j, 6)
    c0, s0 = jnp.cos(th0), jnp.sin(th0)
    bx = jnp.stack([0.0, v0 * c0, a0 * c0 - v0 * w0 * s0, p[j, 0], vel[0], acc[0]])
    by = jnp.stack([y0, v0 * s0, a0 * s0 + v0 * w0 * c0, p[j, 1], vel[1], acc[1]])
    xy = jnp.stack([rows @ bx, rows @ by], -1)  # (j, 2)
    prev = jnp.concatenate([jnp.stack([0.0, y0])[None], xy[:-1]], 0)
    step = xy - prev
    h = jnp.arctan2(step[:, 1], step[:, 0])
    refined = jnp.concatenate([xy, jnp.cos(h)[:, None], jnp.sin(h)[:, None]], -1)
    return jnp.concatenate([refined, future[j:]], 0)


def _perturb_one(
    key: PRNGKeyArray,
    scene: Mapping[str, Array],
    future: Float[Array, "A T 4"],
    aug: StatePerturbation,
    dt: float,
):
    k_on, k_u = jax.random.split(key)
    speed, acc, yaw_rate = scene["ego"][0], scene["ego"][1], scene["ego"][2]
    on = jax.random.bernoulli(k_on, aug.prob) & (speed >= aug.min_speed)
    u = jax.random.uniform(k_u, (4,), minval=-1.0, maxval=1.0)
    dy, dh = aug.lateral * u[0], aug.yaw * u[1]
    v0 = jnp.maximum(speed + aug.speed * u[2], 0.0)
    a0 = acc + aug.accel * u[3]
    j = min(aug.refine, future.shape[1] - 1)
    refined = future.at[0].set(_refine_ego(future[0], dy, v0, a0, yaw_rate, refine=j, dt=dt))

    origin = jnp.stack([0.0, dy])

    def point(v):
        return to_frame(v, origin, dh)

    def direction(v):
        return to_frame(v, jnp.zeros(2), dh)

    def pose(v):  # (..., 4): x, y, cos, sin
        return jnp.concatenate([point(v[..., :2]), direction(v[..., 2:4])], -1)

    nb_valid = scene["neighbour_valid"]
    nb = scene["neighbours"]
    nb_new = jnp.concatenate([pose(nb[..., :4]), direction(nb[..., 4:6]), nb[..., 6:]], -1)
    st = scene["static"]
    lanes, route = scene["lanes"], scene["route"]
    new = dict(scene)
    new["neighbours"] = jnp.where(nb_valid[:, None, None], nb_new, 0.0)
    new["static"] = jnp.where(
        scene["static_valid"][:, None], jnp.concatenate([pose(st[:, :4]), st[:, 4:]], -1), 0.0
    )
    new["lanes"] = jnp.where(scene["lane_valid"][:, None, None], pose(lanes), 0.0)
    new["route"] = jnp.where(scene["route_valid"][:, None, None], pose(route), 0.0)
    if "lane_boundaries" in scene:  # offsets: rotated, not moved
        bd = scene["lane_boundaries"]
        bd = jnp.concatenate([direction(bd[..., :2]), direction(bd[..., 2:])], -1)
        new["lane_boundaries"] = jnp.where(scene["lane_valid"][:, None, None], bd, 0.0)
    cur = scene["current"]
    valid = jnp.concatenate([jnp.ones((1,), bool), nb_valid])
    cur_nb = jnp.where(valid[1:, None], pose(cur[1:]), 0.0)
    new["current"] = jnp.concatenate([cur[:1], cur_nb], 0)
    new["ego"] = jnp.stack([v0, a0, yaw_rate]).astype(scene["ego"].dtype)
    fut = jnp.where(valid[:, None, None], pose(refined), refined)

    def pick(a, b):
        return jnp.where(on, a, b)

    out_scene = {k: pick(new[k], scene[k]) for k in scene}
    return out_scene, pick(fut, future)


def perturb_ego_state(
    key: PRNGKeyArray,
    scene: Mapping[str, Array],
    future: Float[Array, "B A T 4"],
    aug: StatePerturbation,
    *,
    dt: float,
) -> tuple[dict[str, Array], Float[Array, "B A T 4"]]:
    """Apply the module docstring's perturbation to a batch of samples (scene tokens in the ego
    frame with a leading batch axis, ``future`` (B, A, T, 4) with the ego first). Returns the new
    scene tokens and futures; samples not drawn (or too slow) are returned unchanged."""
    if aug.prob == 0.0:
        return dict(scene), future
    if future.ndim != 4 or future.shape[2] < 3:
        raise ConfigError("future", tuple(future.shape), "(B, A, T, 4) with T >= 3 steps")
    keys = jax.random.split(key, future.shape[0])
    return jax.vmap(lambda k, s, f: _perturb_one(k, s, f, aug, dt))(keys, dict(scene), future)

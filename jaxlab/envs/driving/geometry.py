"""Plane geometry of the driving world: equal-spaced polylines (resample, point at an arc length,
projection), ego frames and oriented-box separation (the collision test)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float


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


def box_axes(heading):
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
    fa, la = box_axes(h_a)
    fb, lb = box_axes(h_b)
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


def plan_steps(
    plan: Float[Array, "... T 4"],
) -> tuple[Float[Array, "... T"], Float[Array, "... T"]]:
    """(length, signed progress) of each 0.1 s step of ego-frame plans (x, y, cos, sin), the
    first step from the ego (origin, heading +x). Progress is the step projected on the heading
    it starts from (the plan's own (cos, sin), +x where that is zero or missing): a point placed
    behind the previous one has negative progress, whatever the step's length."""
    xy = jnp.nan_to_num(plan[..., :2])
    cs = jnp.nan_to_num(plan[..., :-1, 2:4])
    norm = jnp.linalg.norm(cs, axis=-1, keepdims=True)
    cs = jnp.where(norm > 1e-3, cs / jnp.maximum(norm, 1e-3), jnp.array([1.0, 0.0], xy.dtype))
    lead = jnp.zeros(xy.shape[:-2] + (1, 2), xy.dtype)
    heading = jnp.concatenate([lead.at[..., 0].set(1.0), cs], -2)
    step = xy - jnp.concatenate([lead, xy[..., :-1, :]], -2)
    return jnp.linalg.norm(step, axis=-1), jnp.sum(step * heading, -1)

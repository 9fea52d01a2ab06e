"""2D geometry helpers and mass properties (Jax2D conventions, quirks kept for parity).

Mass properties follow ``jax2d/engine.py``:

* polygon centroid = **mean of the vertices** (not the area centroid);
* polygon area = triangle fan ``(v0, v_k, v_{k+1})``, ``m = rho * area``;
* polygon inertia = Box2D triangle fan about the centroid over edges ``(v_i, v_{(i+1) mod V})`` for
  ``i < n_vertices`` where ``V = max_polygon_vertices`` (so a triangle stored in 4 slots closes its
  fan through slot 3, exactly as in Jax2D):
  ``I = rho * sum_i |D_i| / 12 * (x_i^2 + x_i x_j + x_j^2 + y_i^2 + y_i y_j + y_j^2)``,
  ``D_i = v_j x v_i``;
* circle ``m = rho pi r^2`` and ``I = rho pi r^4 / 4`` (half the textbook disc value).

Zero masses map to inverse mass 1 (Jax2D's ``zero_to_one`` guard), and callers zero the inverse
mass of fixated bodies.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab.physics.state import RigidBody, SimState, StaticSimParams


def rotate(angle: Float[Array, "..."], v: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    """``R(angle) @ v`` for broadcastable leading axes."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], -1)


def rotate_inv(angle: Float[Array, "..."], v: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    """``R(angle)^T @ v`` (world to local)."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] + s * v[..., 1], -s * v[..., 0] + c * v[..., 1]], -1)


def cross(a: Float[Array, "... 2"], b: Float[Array, "... 2"]) -> Float[Array, "..."]:
    """2D cross product ``a_x b_y - a_y b_x``."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def cross_sv(w: Float[Array, "..."], r: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    """Scalar-vector cross ``w x r = (-w r_y, w r_x)`` (velocity of a point on a spinning body)."""
    return jnp.stack([-w * r[..., 1], w * r[..., 0]], -1)


def perp(n: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    """Contact tangent ``n x 1 = (n_y, -n_x)`` (Jax2D ``vs_cross(n, 1)``)."""
    return jnp.stack([n[..., 1], -n[..., 0]], -1)


def nonzero(x: Array) -> Array:
    """Replace exact zeros by one (division guard for masked-out entries, Jax2D ``zero_to_one``)."""
    return jnp.where(x == 0, jnp.ones_like(x), x)


def polygon_mass(
    vertices: Float[Array, "v 2"], n_vertices: Int[Array, ""], density: Float[Array, ""]
) -> tuple[Float[Array, ""], Float[Array, " 2"]]:
    """Inverse mass and vertex-mean centroid of one polygon.

    Args:
        vertices: [V, 2] local vertices (slots ``>= n_vertices`` are ignored).
        n_vertices: number of used vertices.
        density: area density.

    Returns:
        ``(1 / (rho * area), centroid)`` with area from the fan ``(v0, v_k, v_{k+1})``.
    """
    max_v = vertices.shape[0]
    k = jnp.arange(max_v - 2)
    e1 = vertices[k + 1] - vertices[:1]
    e2 = vertices[k + 2] - vertices[:1]
    areas = 0.5 * jnp.abs(cross(e1, e2)) * (k < n_vertices - 2)
    used = (jnp.arange(max_v) < n_vertices)[:, None]
    centroid = jnp.sum(vertices * used, axis=0) / n_vertices
    return 1.0 / nonzero(jnp.sum(areas) * density), centroid


def polygon_inverse_inertia(
    vertices: Float[Array, "v 2"], n_vertices: Int[Array, ""], density: Float[Array, ""]
) -> Float[Array, ""]:
    """Inverse moment of inertia about the local origin (Box2D triangle fan, see module doc)."""
    max_v = vertices.shape[0]
    i = jnp.arange(max_v)
    p2 = vertices
    p1 = vertices[(i + 1) % max_v]
    d = cross(p1, p2)
    ix = p1[:, 0] * p1[:, 0] + p2[:, 0] * p1[:, 0] + p2[:, 0] * p2[:, 0]
    iy = p1[:, 1] * p1[:, 1] + p2[:, 1] * p1[:, 1] + p2[:, 1] * p2[:, 1]
    inertia = jnp.abs(0.25 * d / 3.0 * (ix + iy)) * (i < n_vertices)
    return 1.0 / nonzero(jnp.sum(inertia) * density)


def circle_inverse_mass(radius: Float[Array, "..."], density: Float[Array, "..."]) -> Array:
    """``1 / (rho pi r^2)``."""
    return 1.0 / nonzero(radius * radius * math.pi * density)


def circle_inverse_inertia(radius: Float[Array, "..."], density: Float[Array, "..."]) -> Array:
    """``1 / (rho pi r^4 / 4)`` (Jax2D's value, half the physical disc inertia)."""
    return 1.0 / nonzero(math.pi * radius**4 / 4 * density)


def recalculate_mass_and_inertia(
    state: SimState,
    static_params: StaticSimParams,
    polygon_densities: Float[Array, " p"],
    circle_densities: Float[Array, " c"],
) -> SimState:
    """Recompute inverse masses and inertias from densities, re-centring polygons on their centroid.

    Bodies whose inverse mass (polygons: inverse mass for the mass and shift, inverse inertia for
    the inertia; circles: inverse mass for both) is zero stay static and unshifted. A dynamic
    polygon is moved by its vertex-mean centroid ``c``: ``position += c``, ``vertices -= c`` (all
    vertex slots, as Jax2D does).

    Args:
        state: the scene.
        static_params: capacities (unused beyond shape checks; kept for Jax2D call parity).
        polygon_densities: [P] densities.
        circle_densities: [C] densities.

    Returns:
        The state with updated ``inverse_mass``, ``inverse_inertia``, positions and vertices.
    """
    del static_params
    poly = state.polygon
    inv_m, shift = jax.vmap(polygon_mass)(poly.vertices, poly.n_vertices, polygon_densities)
    dynamic = poly.inverse_mass != 0
    inv_m = inv_m * dynamic
    shift = jnp.where(dynamic[:, None], shift, jnp.zeros_like(shift))
    vertices = poly.vertices - shift[:, None, :]
    inv_i = jax.vmap(polygon_inverse_inertia)(vertices, poly.n_vertices, polygon_densities) * (
        poly.inverse_inertia != 0
    )
    circ = state.circle
    c_dynamic = circ.inverse_mass != 0
    return state.replace(
        polygon=poly.replace(
            position=poly.position + shift,
            vertices=vertices,
            inverse_mass=inv_m,
            inverse_inertia=inv_i,
        ),
        circle=circ.replace(
            inverse_mass=circle_inverse_mass(circ.radius, circle_densities) * c_dynamic,
            inverse_inertia=circle_inverse_inertia(circ.radius, circle_densities) * c_dynamic,
        ),
    )


def concat_bodies(state: SimState) -> RigidBody:
    """All shapes in global-index order (polygons then circles) as one [P+C] ``RigidBody``."""
    return jax.tree.map(lambda p, c: jnp.concatenate([p, c], axis=0), state.polygon, state.circle)


def select_shape(state: SimState, index: Int[Array, ""], static_params: StaticSimParams):
    """The shape with global ``index`` as a scalar ``RigidBody`` (Jax2D ``select_shape``)."""
    del static_params
    return jax.tree.map(lambda x: x[index], concat_bodies(state))


def validate_polygon_vertices(vertices, field: str = "vertices") -> np.ndarray:
    """Check that ``vertices`` [n, 2] form a strictly convex, clockwise polygon.

    Args:
        vertices: array-like of shape [n, 2] with ``n >= 3``.
        field: name used in error messages.

    Returns:
        The vertices as a float32 NumPy array.

    Raises:
        ValueError: on a wrong shape, non-finite values, a counter-clockwise winding, collinear
            consecutive edges or a non-convex outline.
    """
    v = np.asarray(vertices, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] < 3:
        raise ValueError(f"{field} has shape {v.shape}; expected [n, 2] with n >= 3")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{field}={v.tolist()} contains non-finite values")
    e = np.roll(v, -1, axis=0) - v
    turn = e[:, 0] * np.roll(e, -1, axis=0)[:, 1] - e[:, 1] * np.roll(e, -1, axis=0)[:, 0]
    area2 = np.sum(v[:, 0] * np.roll(v, -1, axis=0)[:, 1] - np.roll(v, -1, axis=0)[:, 0] * v[:, 1])
    scale = max(float(np.max(np.abs(e))), 1e-12) ** 2
    if area2 > 0:
        raise ValueError(
            f"{field}={v.tolist()} are counter-clockwise; expected clockwise order (Jax2D convention)"
        )
    if np.any(turn >= -1e-9 * scale):
        raise ValueError(
            f"{field}={v.tolist()} do not form a strictly convex clockwise polygon "
            "(every consecutive edge pair must turn clockwise)"
        )
    # A star-shaped outline can turn clockwise at every vertex yet wind more than once.
    if abs(area2) <= 1e-12 or not np.isclose(_winding_angle(e), -2 * np.pi, atol=1e-6):
        raise ValueError(f"{field}={v.tolist()} self-intersect; expected a simple convex polygon")
    return v.astype(np.float32)


def _winding_angle(edges: np.ndarray) -> float:
    nxt = np.roll(edges, -1, axis=0)
    turns = np.arctan2(
        edges[:, 0] * nxt[:, 1] - edges[:, 1] * nxt[:, 0], np.sum(edges * nxt, axis=1)
    )
    return float(np.sum(turns))

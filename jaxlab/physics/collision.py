"""Collision pairs, the joint collision matrix and contact-manifold generation.

Pair lists are static and ordered as in Jax2D (``engine.get_pairwise_interaction_indices``):

* circle-circle: ``(c1, c2)`` with ``c1 < c2``, lexicographic;
* circle-polygon: ``(c, r)`` for every circle ``c`` and every polygon ``r``;
* polygon-polygon: ``(r1, r2)`` with ``r1 < r2``, skipping pairs of two static fixated polygons
  (``r1, r2 < num_static_fixated_polys``).

Manifolds are computed from positions *before* integration. A manifold keeps last step's
accumulated impulses only when it was active last step and is active now (warm-start rule), and
stores the restitution target ``v_n * min(e_a, e_b)``. Inactive manifolds are all zeros.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from jaxlab.physics.geometry import cross, cross_sv, nonzero, rotate, rotate_inv
from jaxlab.physics.state import CollisionManifold, Joint, RigidBody, StaticSimParams

# Jax2D builds its edge normals with rmat(pi / 2) in float32, whose cosine is not exactly zero.
_ROT_LEFT_C = float(np.cos(np.float32(math.pi / 2.0)))
_ROT_LEFT_S = float(np.sin(np.float32(math.pi / 2.0)))
# Hysteresis keeping the reference face from flip-flopping (Jax2D).
_REFERENCE_FACE_EPSILON = 0.01


def pair_counts(static_params: StaticSimParams) -> tuple[int, int, int]:
    """Numbers of circle-circle, circle-polygon and polygon-polygon pairs."""
    C, P, S = (
        static_params.num_circles,
        static_params.num_polygons,
        static_params.num_static_fixated_polys,
    )
    return C * (C - 1) // 2, C * P, P * (P - 1) // 2 - S * (S - 1) // 2


def pair_indices(static_params: StaticSimParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Static index pairs ``(cc [ncc, 2], cr [ncr, 2], rr [nrr, 2])`` in Jax2D order (int32).

    ``cc`` holds circle indices, ``cr`` (circle, polygon) indices and ``rr`` polygon indices.
    """
    C, P, S = (
        static_params.num_circles,
        static_params.num_polygons,
        static_params.num_static_fixated_polys,
    )
    cc = [(i, j) for i in range(C) for j in range(C) if i < j]
    cr = [(c, r) for c in range(C) for r in range(P)]
    rr = [(i, j) for i in range(P) for j in range(P) if i < j and not (i < S and j < S)]

    def arr(x):
        return np.asarray(x, np.int32).reshape(len(x), 2)

    return arr(cc), arr(cr), arr(rr)


def calculate_collision_matrix(static_params: StaticSimParams, joints: Joint) -> Bool[Array, "n n"]:
    """Which pairs of shapes may collide: not a shape with itself, nor any two shapes linked by a
    chain of active joints (the transitive closure Jax2D builds by repeated row intersection).

    Args:
        static_params: capacities (N = P + C).
        joints: the joints (global shape indices).

    Returns:
        [N, N] bool, symmetric, False on the diagonal.
    """
    n = static_params.num_shapes
    eye = jnp.eye(n, dtype=bool)
    a = jax.nn.one_hot(joints.a_index, n, dtype=jnp.float32) * joints.active[:, None]
    b = jax.nn.one_hot(joints.b_index, n, dtype=jnp.float32) * joints.active[:, None]
    adjacency = (a.T @ b + b.T @ a) > 0
    reach = adjacency | eye
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        reach = (reach.astype(jnp.float32) @ reach.astype(jnp.float32)) > 0
    return jnp.logical_not(reach)


def should_collide(mode_a: Int[Array, "..."], mode_b: Int[Array, "..."]) -> Bool[Array, "..."]:
    """Collision-mode filter: mode 2 hits everything, mode 0 skips modes 0 and 1 otherwise."""
    return (mode_a == 2) | (mode_b == 2) | (mode_a * mode_b > 0)


def _relative_normal_velocity(a: RigidBody, b: RigidBody, point, normal):
    """``(v_b(p) - v_a(p)) . n`` for points [..., 2] (bodies are scalar views)."""
    lead = (1,) * (point.ndim - 1)
    xa, xb = a.position.reshape(lead + (2,)), b.position.reshape(lead + (2,))
    va = a.velocity.reshape(lead + (2,)) + cross_sv(a.angular_velocity, point - xa)
    vb = b.velocity.reshape(lead + (2,)) + cross_sv(b.angular_velocity, point - xb)
    return jnp.sum((vb - va) * normal, axis=-1)


def _finish(normal, penetration, point, active, ws: CollisionManifold, v_rest) -> CollisionManifold:
    keep = ws.active & active
    m = CollisionManifold(
        normal=normal,
        penetration=penetration,
        collision_point=point,
        active=active,
        acc_impulse_normal=jnp.where(keep, ws.acc_impulse_normal, 0.0),
        acc_impulse_tangent=jnp.where(keep, ws.acc_impulse_tangent, 0.0),
        restitution_velocity_target=v_rest,
    )
    return jax.tree.map(lambda x: jnp.where(active, x, jnp.zeros_like(x)), m)


def manifold_circle_circle(a: RigidBody, b: RigidBody, ws: CollisionManifold) -> CollisionManifold:
    """Circle-circle contact (one pair; vmap for many).

    ``n = (p_b - p_a) / |p_b - p_a|``, penetration ``r_a + r_b - d``, contact point
    ``p_a + r_a n``; active when ``d < r_a + r_b``.
    """
    delta = b.position - a.position
    dist = jnp.linalg.norm(delta)
    radii = a.radius + b.radius
    active = (
        (dist < radii) & a.active & b.active & should_collide(a.collision_mode, b.collision_mode)
    )
    normal = delta / nonzero(dist)
    point = a.position + normal * a.radius
    vn = _relative_normal_velocity(a, b, point, normal)
    v_rest = vn * jnp.minimum(a.restitution, b.restitution)
    return _finish(normal, radii - dist, point, active, ws, v_rest)


def _clip_to_edge(p, va, vb):
    """Signed side of ``p`` w.r.t. edge ``va -> vb`` (inside if < 0), closest point, distance."""
    side = cross(va - p, vb - p)
    edge = vb - va
    length = jnp.linalg.norm(edge, axis=-1)
    direction = edge / nonzero(length)[..., None]
    t = jnp.clip(jnp.sum(direction * (p - va), axis=-1), 0.0, length)
    closest = va + t[..., None] * direction
    return side < 0, closest, jnp.linalg.norm(closest - p, axis=-1)


def _next_vertices(vertices, n_vertices):
    """Vertex ``i+1`` for each edge, closing the polygon at slot ``n_vertices - 1``."""
    nxt = jnp.roll(vertices, -1, axis=0)
    return nxt.at[n_vertices - 1].set(vertices[0])


def manifold_circle_polygon(
    circle: RigidBody, polygon: RigidBody, ws: CollisionManifold
) -> CollisionManifold:
    """Circle-polygon contact (one pair; vmap for many). Shape a is the circle.

    The circle centre, in the polygon frame, is clipped to each edge; the closest clipped point
    ``q`` gives the normal ``(q - c)/|q - c|`` (world frame, from circle to polygon) and
    penetration ``r - |q - c|``. If the centre is inside the polygon the normal flips and the
    penetration is ``r`` (Jax2D).
    """
    centre = rotate_inv(polygon.rotation, circle.position - polygon.position)
    verts = polygon.vertices
    nxt = _next_vertices(verts, polygon.n_vertices)
    inside_e, clips, dists = _clip_to_edge(centre[None, :], verts, nxt)
    is_tri = polygon.n_vertices == 3
    dists = dists.at[3].set(jnp.where(is_tri, jnp.max(dists[:3]) + 1, dists[3]))
    closest = clips[jnp.argmin(dists)]
    inside = inside_e[0] & inside_e[1] & inside_e[2] & (inside_e[3] | is_tri)
    local_normal = centre - closest
    d = jnp.linalg.norm(local_normal)
    r = circle.radius
    active = (
        ((d <= r) | inside)
        & circle.active
        & polygon.active
        & should_collide(polygon.collision_mode, circle.collision_mode)
    )
    normal = rotate(polygon.rotation, local_normal) * jnp.where(inside, -1.0, 1.0)
    normal = -normal / nonzero(jnp.linalg.norm(normal))
    point = rotate(polygon.rotation, closest) + polygon.position
    vn = _relative_normal_velocity(circle, polygon, point, normal)
    v_rest = vn * jnp.minimum(circle.restitution, polygon.restitution)
    return _finish(normal, jnp.where(inside, r, r - d), point, active, ws, v_rest)


def _edge_normals(vertices, n_vertices):
    """Outward unit normals of a clockwise polygon (edge direction rotated by +90 degrees)."""
    delta = _next_vertices(vertices, n_vertices) - vertices
    length = nonzero(jnp.linalg.norm(delta, axis=-1))[:, None]
    c, s = _ROT_LEFT_C, _ROT_LEFT_S
    rotated = jnp.stack(
        [c * delta[:, 0] - s * delta[:, 1], s * delta[:, 0] + c * delta[:, 1]], axis=-1
    )
    return rotated / length


def _least_penetration_axis(a: RigidBody, b: RigidBody, b_world):
    """Separating-axis test of b against a's faces.

    Returns the largest separation over a's faces, that face's index and the two vertices of b
    (world space) projecting deepest on it (the incident face).
    """
    b_in_a = rotate_inv(a.rotation, b_world - a.position[None, :])
    normals = _edge_normals(a.vertices, a.n_vertices)  # [4, 2]
    # Projections [axis, vertex], written out so XLA fuses them (no batched dot).
    a_proj = (
        normals[:, None, 0] * a.vertices[None, :, 0] + normals[:, None, 1] * a.vertices[None, :, 1]
    )
    b_proj = normals[:, None, 0] * b_in_a[None, :, 0] + normals[:, None, 1] * b_in_a[None, :, 1]
    a_proj = a_proj.at[:, 3].set(
        jnp.where(a.n_vertices == 3, jnp.min(a_proj[:, :3], axis=1) - 1, a_proj[:, 3])
    )
    b_proj = b_proj.at[:, 3].set(
        jnp.where(b.n_vertices == 3, jnp.max(b_proj[:, :3], axis=1) + 1, b_proj[:, 3])
    )
    separation = jnp.min(b_proj, axis=1) - jnp.max(a_proj, axis=1)
    valid = jnp.arange(4) < a.n_vertices
    separation = jnp.where(valid, separation, -jnp.inf)
    face = jnp.argmax(separation)
    best = jnp.maximum(separation[face], -99999.0)
    # The two deepest vertices of b, lowest index first on ties (a stable argsort's first two).
    proj = b_proj[face]
    first = jnp.argmin(proj)
    second = jnp.argmin(jnp.where(jnp.arange(4) == first, jnp.inf, proj))
    return best, face, b_world[jnp.stack([first, second])]


def manifold_polygon_polygon(
    a: RigidBody, b: RigidBody, ws: CollisionManifold
) -> CollisionManifold:
    """Polygon-polygon contact by SAT and clipping (one pair; vmap for many).

    Leaves have a leading axis of 2 (two contact points sharing one normal).

    The reference face is a's best face unless b's separation exceeds a's by more than 0.01.
    The incident face (the two vertices of the other polygon deepest along the reference normal)
    is expressed in a frame whose y axis runs along the reference face, clipped to the face's
    extent, and each clipped point becomes a contact; the second is active only when both points
    penetrate. Penetration is ``-max(sep_a, sep_b)`` for both points.
    """
    a_world = rotate(a.rotation, a.vertices) + a.position[None, :]
    b_world = rotate(b.rotation, b.vertices) + b.position[None, :]
    a_sep, a_face, a_incident = _least_penetration_axis(a, b, b_world)
    b_sep, b_face, b_incident = _least_penetration_axis(b, a, a_world)

    b_is_ref = a_sep + _REFERENCE_FACE_EPSILON < b_sep
    most_sep = jnp.maximum(a_sep, b_sep)
    colliding = (
        (most_sep < 0) & a.active & b.active & should_collide(a.collision_mode, b.collision_mode)
    )

    a_ref = jnp.stack([a_world[a_face], a_world[(a_face + 1) % a.n_vertices]])
    b_ref = jnp.stack([b_world[b_face], b_world[(b_face + 1) % b.n_vertices]])
    ref = jnp.where(b_is_ref, b_ref, a_ref)
    incident = jnp.where(b_is_ref, b_incident, a_incident)

    along = ref[0] - ref[1]
    frame_angle = math.pi + jnp.arctan2(along[0], along[1])
    face_len = jnp.linalg.norm(along)
    inc_local = rotate(frame_angle, incident - ref[:1])
    inc_local = jnp.stack(
        [jnp.clip(inc_local[:, 0], -99999.0, 999999.0), jnp.clip(inc_local[:, 1], 0.0, face_len)],
        axis=-1,
    )
    first = jnp.argmax(inc_local[:, 0])
    both_penetrate = jnp.min(inc_local[:, 0]) > 0
    local_points = jnp.stack([inc_local[first], inc_local[1 - first]])
    points = rotate_inv(frame_angle, local_points) + ref[:1]

    a_normal = rotate(a.rotation, _edge_normals(a.vertices, a.n_vertices)[a_face])
    b_normal = rotate(b.rotation, _edge_normals(b.vertices, b.n_vertices)[b_face])
    normal = jnp.where(b_is_ref, -b_normal, a_normal)

    e = jnp.minimum(a.restitution, b.restitution)
    normals = jnp.stack([normal, normal])
    v_rest = _relative_normal_velocity(a, b, points, normals) * e
    active = jnp.stack([colliding, colliding & both_penetrate])
    keep = ws.active & active
    m = CollisionManifold(
        normal=normals,
        penetration=jnp.stack([-most_sep, -most_sep]),
        collision_point=points,
        active=active,
        acc_impulse_normal=jnp.where(keep, ws.acc_impulse_normal, 0.0),
        acc_impulse_tangent=jnp.where(keep, ws.acc_impulse_tangent, 0.0),
        restitution_velocity_target=v_rest,
    )
    return jax.tree.map(
        lambda x: jnp.where(active.reshape((2,) + (1,) * (x.ndim - 1)), x, jnp.zeros_like(x)), m
    )


def _take(bodies: RigidBody, idx) -> RigidBody:
    return jax.tree.map(lambda x: x[idx], bodies)


def compute_manifolds(
    polygon: RigidBody,
    circle: RigidBody,
    warm: tuple[CollisionManifold, CollisionManifold, CollisionManifold],
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[CollisionManifold, CollisionManifold, CollisionManifold]:
    """All manifolds ``(rr [nrr, 2], cr [ncr], cc [ncc])`` for the static pair lists.

    Args:
        polygon, circle: the bodies.
        warm: last step's ``(rr, cr, cc)`` manifolds (warm-start source).
        pairs: ``pair_indices`` output ``(cc, cr, rr)``.

    Returns:
        ``(rr, cr, cc)`` manifolds.
    """
    cc, cr, rr = pairs
    ws_rr, ws_cr, ws_cc = warm
    m_rr = jax.vmap(manifold_polygon_polygon)(
        _take(polygon, rr[:, 0]), _take(polygon, rr[:, 1]), ws_rr
    )
    m_cr = jax.vmap(manifold_circle_polygon)(
        _take(circle, cr[:, 0]), _take(polygon, cr[:, 1]), ws_cr
    )
    m_cc = jax.vmap(manifold_circle_circle)(_take(circle, cc[:, 0]), _take(circle, cc[:, 1]), ws_cc)
    return m_rr, m_cr, m_cc

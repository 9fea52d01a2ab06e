"""Contact manifolds of single pairs against hand-computed geometry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.physics.collision import (
    manifold_circle_circle,
    manifold_circle_polygon,
    manifold_polygon_polygon,
    should_collide,
)
from jaxlab.physics.state import CollisionManifold, RigidBody, empty_manifolds

BOX = [[-0.5, 0.5], [0.5, 0.5], [0.5, -0.5], [-0.5, -0.5]]


def body(position, *, radius=0.0, vertices=None, rotation=0.0, velocity=(0.0, 0.0), mode=1):
    verts = np.zeros((4, 2)) if vertices is None else np.asarray(vertices, float)
    return RigidBody(
        position=jnp.asarray(position, jnp.float32),
        rotation=jnp.float32(rotation),
        velocity=jnp.asarray(velocity, jnp.float32),
        angular_velocity=jnp.float32(0.0),
        inverse_mass=jnp.float32(1.0),
        inverse_inertia=jnp.float32(1.0),
        friction=jnp.float32(1.0),
        restitution=jnp.float32(0.5),
        collision_mode=jnp.int32(mode),
        active=jnp.bool_(True),
        n_vertices=jnp.int32(4 if vertices is not None else 0),
        vertices=jnp.asarray(verts, jnp.float32),
        radius=jnp.float32(radius),
    )


def no_warm(points=None) -> CollisionManifold:
    m = empty_manifolds(1, points)
    return jax.tree.map(lambda x: x[0], m)


def test_circle_circle_manifold():
    a = body([0.0, 0.0], radius=0.5, velocity=(1.0, 0.0))
    b = body([0.8, 0.0], radius=0.4)
    m = manifold_circle_circle(a, b, no_warm())
    assert bool(m.active)
    np.testing.assert_allclose(np.asarray(m.normal), [1.0, 0.0], atol=1e-6)
    assert float(m.penetration) == pytest.approx(0.1, abs=1e-6)
    np.testing.assert_allclose(np.asarray(m.collision_point), [0.5, 0.0], atol=1e-6)
    # v_n = (v_b - v_a) . n = -1, restitution target v_n * min(e_a, e_b).
    assert float(m.restitution_velocity_target) == pytest.approx(-0.5)
    apart = manifold_circle_circle(a, body([1.0, 0.0], radius=0.4), no_warm())
    assert not bool(apart.active)
    assert float(jnp.abs(apart.penetration)) == 0.0


def test_circle_polygon_manifold_outside_and_inside():
    box = body([0.0, 0.0], vertices=BOX)
    circle = body([0.2, 0.8], radius=0.4)
    m = manifold_circle_polygon(circle, box, no_warm())
    assert bool(m.active)
    # Normal points from the circle (shape a) into the polygon.
    np.testing.assert_allclose(np.asarray(m.normal), [0.0, -1.0], atol=1e-6)
    assert float(m.penetration) == pytest.approx(0.1, abs=1e-6)
    np.testing.assert_allclose(np.asarray(m.collision_point), [0.2, 0.5], atol=1e-6)
    inside = manifold_circle_polygon(body([0.1, 0.3], radius=0.1), box, no_warm())
    assert bool(inside.active)
    np.testing.assert_allclose(np.asarray(inside.normal), [0.0, -1.0], atol=1e-6)
    # Jax2D: a centre inside the polygon gets penetration r.
    assert float(inside.penetration) == pytest.approx(0.1)
    corner = manifold_circle_polygon(body([0.8, 0.8], radius=0.4), box, no_warm())
    assert not bool(corner.active)  # distance to the corner sqrt(0.18) > 0.4


def test_rotated_polygon_maps_contact_to_world():
    box = body([1.0, 1.0], vertices=BOX, rotation=np.pi / 2)
    m = manifold_circle_polygon(body([1.0, 1.8], radius=0.4), box, no_warm())
    np.testing.assert_allclose(np.asarray(m.collision_point), [1.0, 1.5], atol=1e-5)
    np.testing.assert_allclose(np.asarray(m.normal), [0.0, -1.0], atol=1e-5)


def test_polygon_polygon_face_contact_has_two_points():
    ground = body([0.0, 0.0], vertices=np.asarray(BOX) * [4.0, 1.0])
    box = body([0.3, 0.70], vertices=np.asarray(BOX) * 0.5, velocity=(0.0, -1.0))
    m = manifold_polygon_polygon(ground, box, no_warm(2))
    assert np.asarray(m.active).tolist() == [True, True]
    np.testing.assert_allclose(np.asarray(m.normal), [[0.0, 1.0], [0.0, 1.0]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(m.penetration), [0.05, 0.05], atol=1e-5)
    pts = np.sort(np.asarray(m.collision_point)[:, 0])
    np.testing.assert_allclose(pts, [0.05, 0.55], atol=1e-5)
    # Contact points sit at the incident vertices (clipped to the reference face's extent).
    np.testing.assert_allclose(np.asarray(m.collision_point)[:, 1], 0.45, atol=1e-5)
    np.testing.assert_allclose(np.asarray(m.restitution_velocity_target), -0.5, atol=1e-5)


def test_polygon_polygon_corner_contact_has_one_point():
    ground = body([0.0, 0.0], vertices=np.asarray(BOX) * [4.0, 1.0])
    tilted = body([0.0, 0.5 + 0.5 * np.sqrt(0.5) - 0.02], vertices=np.asarray(BOX) * 0.5)
    tilted = tilted.replace(rotation=jnp.float32(np.pi / 4))
    m = manifold_polygon_polygon(ground, tilted, no_warm(2))
    assert np.asarray(m.active).tolist() == [True, False]
    assert float(m.penetration[0]) == pytest.approx(0.02, abs=1e-4)
    np.testing.assert_allclose(np.asarray(m.collision_point[0]), [0.0, 0.48], atol=1e-4)
    apart = manifold_polygon_polygon(
        ground, tilted.replace(position=jnp.array([0.0, 2.0])), no_warm(2)
    )
    assert not np.asarray(apart.active).any()


def test_warm_start_keeps_impulse_only_while_in_contact():
    a = body([0.0, 0.0], radius=0.5)
    warm = no_warm().replace(
        active=jnp.bool_(True),
        acc_impulse_normal=jnp.float32(2.0),
        acc_impulse_tangent=jnp.float32(-1.0),
    )
    m = manifold_circle_circle(a, body([0.8, 0.0], radius=0.4), warm)
    assert float(m.acc_impulse_normal) == 2.0 and float(m.acc_impulse_tangent) == -1.0
    cold = manifold_circle_circle(
        a, body([0.8, 0.0], radius=0.4), warm.replace(active=jnp.bool_(False))
    )
    assert float(cold.acc_impulse_normal) == 0.0
    gone = manifold_circle_circle(a, body([2.0, 0.0], radius=0.4), warm)
    assert float(gone.acc_impulse_normal) == 0.0


@pytest.mark.parametrize(
    "mode_a,mode_b,hit", [(1, 1, True), (0, 1, False), (0, 0, False), (0, 2, True), (2, 1, True)]
)
def test_collision_modes(mode_a, mode_b, hit):
    assert bool(should_collide(jnp.int32(mode_a), jnp.int32(mode_b))) == hit
    m = manifold_circle_circle(
        body([0.0, 0.0], radius=0.5, mode=mode_a),
        body([0.8, 0.0], radius=0.4, mode=mode_b),
        no_warm(),
    )
    assert bool(m.active) == hit


def test_inactive_shapes_never_collide():
    a = body([0.0, 0.0], radius=0.5).replace(active=jnp.bool_(False))
    m = manifold_circle_circle(a, body([0.8, 0.0], radius=0.4), no_warm())
    assert not bool(m.active)
    assert all(float(jnp.abs(x).sum()) == 0.0 for x in jax.tree.leaves(m))

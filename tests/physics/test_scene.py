"""Scene building: the empty arena layout, mass properties, the collision matrix and input
validation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from jaxlab import physics as px
from jaxlab.physics.geometry import rotate
from tests.physics.physics_probes import SP, empty

DEFAULT = px.StaticSimParams()


def _world_vertices(bodies, i):
    v = np.asarray(bodies.vertices[i, : int(bodies.n_vertices[i])])
    return np.asarray(rotate(bodies.rotation[i], jnp.asarray(v))) + np.asarray(bodies.position[i])


def test_empty_sim_layout_matches_jax2d():
    state = px.create_empty_sim(DEFAULT)
    poly = state.polygon
    assert np.asarray(poly.active).tolist() == [True] * 4 + [False] * 8
    assert not np.asarray(state.circle.active).any()
    floor, left, right, ceiling = (_world_vertices(poly, i) for i in range(4))
    assert floor[:, 1].max() == pytest.approx(0.4)
    assert left[:, 0].max() == pytest.approx(0.0)
    assert right[:, 0].min() == pytest.approx(5.0)
    assert ceiling[:, 1].min() == pytest.approx(5.0)
    # Jax2D's ceiling quirk: vertex 0 at (scene_size, scene_size + floor_offset) locally.
    np.testing.assert_allclose(np.asarray(poly.vertices[3, 0]), [5.0, 5.2])
    np.testing.assert_array_equal(np.asarray(poly.collision_mode[:4]), 2)
    np.testing.assert_array_equal(np.asarray(poly.collision_mode[4:]), 1)
    np.testing.assert_array_equal(np.asarray(poly.inverse_mass), 0.0)
    np.testing.assert_array_equal(np.asarray(poly.n_vertices), 4)
    np.testing.assert_allclose(np.asarray(state.gravity), [0.0, -9.81])
    np.testing.assert_allclose(np.asarray(state.joint.global_position), 256.0)
    assert state.acc_rr_manifolds.active.shape == (66 - 6, 2)
    assert state.acc_cr_manifolds.active.shape == (144,)
    assert state.acc_cc_manifolds.active.shape == (66,)


def test_pair_counts_for_kinetix_sizes():
    sp_l = px.StaticSimParams(num_polygons=12, num_circles=4, num_joints=6, num_thrusters=2)
    assert px.pair_counts(sp_l) == (6, 48, 60)
    cc, cr, rr = px.pair_indices(sp_l)
    assert rr.tolist()[:3] == [[0, 4], [0, 5], [0, 6]]
    assert not any(i < 4 and j < 4 for i, j in rr.tolist())
    assert cr.tolist()[:2] == [[0, 0], [0, 1]]
    assert cc.tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]


def test_rectangle_and_circle_mass_properties():
    state = empty()
    state, (i, g) = px.add_rectangle(state, SP, [2.0, 2.0], [0.6, 0.4], density=3.0)
    state, (c, gc) = px.add_circle(state, SP, [3.0, 2.0], 0.25, density=2.0)
    assert (i, g, c, gc) == (1, 1, 0, SP.num_polygons)
    m = 3.0 * 0.6 * 0.4
    assert float(state.polygon.inverse_mass[i]) == pytest.approx(1 / m, rel=1e-6)
    inertia = m * (0.6**2 + 0.4**2) / 12
    assert float(state.polygon.inverse_inertia[i]) == pytest.approx(1 / inertia, rel=1e-5)
    mc = 2.0 * math.pi * 0.25**2
    assert float(state.circle.inverse_mass[c]) == pytest.approx(1 / mc, rel=1e-6)
    # Jax2D's circle inertia: rho pi r^4 / 4 (half the physical disc value).
    assert float(state.circle.inverse_inertia[c]) == pytest.approx(
        1 / (2.0 * math.pi * 0.25**4 / 4), rel=1e-5
    )
    fixed_state, (k, _) = px.add_circle(state, SP, [1.0, 3.0], 0.2, fixated=True)
    assert float(fixed_state.circle.inverse_mass[k]) == 0.0
    assert float(fixed_state.circle.inverse_inertia[k]) == 0.0


def _numpy_fan_inertia(v, n, max_v=4):
    total = 0.0
    for i in range(n):
        p2, p1 = v[i], v[(i + 1) % max_v]
        d = p1[0] * p2[1] - p1[1] * p2[0]
        ix = p1[0] ** 2 + p2[0] * p1[0] + p2[0] ** 2
        iy = p1[1] ** 2 + p2[1] * p1[1] + p2[1] ** 2
        total += abs(0.25 * d / 3.0 * (ix + iy))
    return total


def test_triangle_is_recentred_on_vertex_mean_with_jax2d_fan_inertia():
    state = empty()
    tri = np.array([[0.0, 0.6], [0.5, -0.3], [-0.4, -0.3]])
    state, (i, _) = px.add_polygon(state, SP, [2.0, 2.0], tri, density=2.0)
    mean = tri.mean(axis=0)
    np.testing.assert_allclose(np.asarray(state.polygon.position[i]), [2.0, 2.0] + mean, atol=1e-6)
    stored = np.asarray(state.polygon.vertices[i])
    np.testing.assert_allclose(stored[:3], tri - mean, atol=1e-6)
    # The unused slot is shifted too (Jax2D), and closes the inertia fan.
    np.testing.assert_allclose(stored[3], -mean, atol=1e-6)
    area = 0.5 * abs(np.cross(tri[1] - tri[0], tri[2] - tri[0]))
    assert float(state.polygon.inverse_mass[i]) == pytest.approx(1 / (2.0 * area), rel=1e-5)
    expected_i = 2.0 * _numpy_fan_inertia(stored.astype(np.float64), 3)
    assert float(state.polygon.inverse_inertia[i]) == pytest.approx(1 / expected_i, rel=1e-5)
    assert int(state.polygon.n_vertices[i]) == 3


def test_recalculate_mass_scales_with_density_and_keeps_static():
    state = empty()
    state, (i, _) = px.add_rectangle(state, SP, [2.0, 2.0], [0.5, 0.5])
    state, (c, _) = px.add_circle(state, SP, [3.0, 2.0], 0.3)
    dens_p = jnp.ones(SP.num_polygons).at[i].set(4.0)
    dens_c = jnp.ones(SP.num_circles).at[c].set(0.5)
    new = px.recalculate_mass_and_inertia(state, SP, dens_p, dens_c)
    assert float(new.polygon.inverse_mass[i]) == pytest.approx(
        float(state.polygon.inverse_mass[i]) / 4
    )
    assert float(new.polygon.inverse_inertia[i]) == pytest.approx(
        float(state.polygon.inverse_inertia[i]) / 4, rel=1e-5
    )
    assert float(new.circle.inverse_mass[c]) == pytest.approx(
        float(state.circle.inverse_mass[c]) * 2
    )
    assert float(new.polygon.inverse_mass[0]) == 0.0  # the floor stays static
    np.testing.assert_allclose(np.asarray(new.polygon.position), np.asarray(state.polygon.position))


def _components_matrix(n, edges):
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    comp = {v: k for k, c in enumerate(nx.connected_components(g)) for v in c}
    return np.array([[comp[i] != comp[j] for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collision_matrix_is_joint_connectivity(seed):
    rng = np.random.default_rng(seed)
    sp = px.StaticSimParams(num_polygons=6, num_circles=4, num_joints=5, num_thrusters=1)
    n = sp.num_shapes
    a = rng.integers(0, n, 5)
    b = rng.integers(0, n, 5)
    active = rng.random(5) < 0.8
    joints = px.create_empty_sim(sp).joint.replace(
        a_index=jnp.asarray(a, jnp.int32),
        b_index=jnp.asarray(b, jnp.int32),
        active=jnp.asarray(active),
    )
    got = np.asarray(px.calculate_collision_matrix(sp, joints))
    expected = _components_matrix(n, [(i, j) for i, j, on in zip(a, b, active, strict=True) if on])
    np.testing.assert_array_equal(got, expected)


def test_joined_chain_stops_colliding():
    state = empty()
    state, (_, p1) = px.add_rectangle(state, SP, [1.0, 2.0], [0.4, 0.4])
    state, (_, p2) = px.add_rectangle(state, SP, [2.0, 2.0], [0.4, 0.4])
    state, (_, c1) = px.add_circle(state, SP, [3.0, 2.0], 0.2)
    state, (_, c2) = px.add_circle(state, SP, [4.0, 2.0], 0.2)
    state, _ = px.add_revolute_joint(state, SP, p1, c1, [0.2, 0], [0, 0])
    state, _ = px.add_fixed_joint(state, SP, c1, p2, [0.2, 0], [0, 0])
    cm = np.asarray(state.collision_matrix)
    assert not cm[p1, p2] and not cm[p2, p1] and not cm[p1, c1] and not cm[c1, p2]
    assert cm[p1, c2] and cm[c2, p2] and cm[0, p1]
    assert not np.diag(cm).any()


def test_scene_functions_work_inside_jit_and_no_op_when_full():
    sp = px.StaticSimParams(num_polygons=4, num_circles=2, num_joints=1, num_thrusters=1)
    state = px.create_empty_sim(sp)

    @jax.jit
    def build(state, x):
        state, (c0, g0) = px.add_circle(state, sp, jnp.stack([x, 1.0]), 0.2)
        state, (c1, _) = px.add_circle(state, sp, jnp.stack([x + 1.0, 1.0]), 0.2)
        state, (c2, _) = px.add_circle(state, sp, jnp.stack([x + 2.0, 1.0]), 0.2)
        state, j = px.add_revolute_joint(state, sp, g0, g0 + 1, jnp.zeros(2), jnp.zeros(2))
        return state, (c0, c1, c2, j)

    new, (c0, c1, c2, j) = build(state, jnp.float32(1.5))
    assert np.asarray(new.circle.active).tolist() == [True, True]
    np.testing.assert_allclose(np.asarray(new.circle.position[:, 0]), [1.5, 2.5])
    assert (int(c0), int(c1), int(j)) == (0, 1, 0)
    assert not bool(new.collision_matrix[4, 5])
    eager, _ = px.add_circle(state, sp, [1.5, 1.0], 0.2)
    np.testing.assert_allclose(
        np.asarray(new.circle.inverse_mass[0]), np.asarray(eager.circle.inverse_mass[0])
    )


# ---------------------------------------------------------------------------------------------
# Bad input


def _full_of_circles():
    state = empty()
    for k in range(SP.num_circles):
        state, _ = px.add_circle(state, SP, [1.0 + k, 2.0], 0.1)
    return state


BAD_CALLS = {
    "circle_capacity": (
        lambda: px.add_circle(_full_of_circles(), SP, [1.0, 1.0], 0.1),
        "num_circles",
    ),
    "negative_radius": (lambda: px.add_circle(empty(), SP, [1.0, 1.0], -0.1), "radius=-0.1"),
    "zero_density": (
        lambda: px.add_circle(empty(), SP, [1.0, 1.0], 0.1, density=0.0),
        "density=0.0",
    ),
    "negative_density": (
        lambda: px.add_rectangle(empty(), SP, [1.0, 1.0], [0.2, 0.2], density=-1.0),
        "density=-1.0",
    ),
    "bad_dimensions": (
        lambda: px.add_rectangle(empty(), SP, [1.0, 1.0], [0.2, 0.0]),
        "dimensions",
    ),
    "bad_position_shape": (lambda: px.add_circle(empty(), SP, [1.0, 1.0, 1.0], 0.1), "position"),
    "nan_position": (lambda: px.add_circle(empty(), SP, [float("nan"), 1.0], 0.1), "position"),
    "too_many_vertices": (
        lambda: px.add_polygon(
            empty(), SP, [2, 2], [[0, 1], [1, 0.5], [1, -0.5], [0, -1], [-1, 0]]
        ),
        "max_polygon_vertices=4",
    ),
    "two_vertices": (lambda: px.add_polygon(empty(), SP, [2, 2], [[0, 1], [1, 0]]), "vertices"),
    "counter_clockwise": (
        lambda: px.add_polygon(empty(), SP, [2, 2], [[0, 0.5], [-0.5, -0.5], [0.5, -0.5]]),
        "counter-clockwise",
    ),
    "non_convex": (
        lambda: px.add_polygon(
            empty(), SP, [2, 2], [[-0.5, 0.5], [0.0, -0.2], [0.5, 0.5], [0.0, -0.5]]
        ),
        "convex",
    ),
    "dynamic_in_static_slot": (
        lambda: px.add_rectangle(empty(floor=False), SP, [2, 2], [0.2, 0.2]),
        "num_static_fixated_polys",
    ),
    "joint_out_of_range": (
        lambda: px.add_revolute_joint(empty(), SP, 0, 99, [0, 0], [0, 0]),
        "b_index=99",
    ),
    "joint_inactive_body": (
        lambda: px.add_revolute_joint(empty(), SP, 0, 3, [0, 0], [0, 0]),
        "b_index=3 refers to inactive polygon 3",
    ),
    "joint_self": (
        lambda: px.add_fixed_joint(empty(), SP, 0, 0, [0, 0], [0, 0]),
        "a_index=b_index",
    ),
    "joint_limits_order": (
        lambda: px.add_revolute_joint(
            px.add_circle(empty(), SP, [1, 1], 0.1)[0],
            SP,
            0,
            SP.num_polygons,
            [0, 0],
            [0, 0],
            has_joint_limits=True,
            min_rotation=1.0,
            max_rotation=-1.0,
        ),
        "min_rotation=1.0 > max_rotation=-1.0",
    ),
    "thruster_inactive_body": (
        lambda: px.add_thruster(empty(), SP, SP.num_polygons, [0, 0], 0.0),
        "object_index=7 refers to inactive circle 0",
    ),
    "thruster_negative_power": (
        lambda: px.add_thruster(empty(), SP, 0, [0, 0], 0.0, power=-1.0),
        "power=-1.0",
    ),
    "bad_collision_mode": (
        lambda: px.add_circle(empty(), SP, [1, 1], 0.1, collision_mode=3),
        "collision_mode=3",
    ),
    "wrong_static_params": (
        lambda: px.add_circle(empty(), DEFAULT, [1, 1], 0.1),
        "do not match static_params",
    ),
    "static_params_vertices": (
        lambda: px.StaticSimParams(max_polygon_vertices=6),
        "max_polygon_vertices=6",
    ),
    "static_params_type": (lambda: px.StaticSimParams(num_circles=2.5), "num_circles=2.5"),
    "walls_need_four_polygons": (
        lambda: px.create_empty_sim(px.StaticSimParams(num_polygons=3, num_static_fixated_polys=1)),
        "num_polygons=3",
    ),
    "solver_name": (lambda: px.make_step(SP, solver="gauss"), "solver='gauss'"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_input_raises_value_error_naming_field(name):
    call, fragment = BAD_CALLS[name]
    with pytest.raises(ValueError) as info:
        call()
    assert fragment in str(info.value)


def test_wrong_action_shape_is_rejected():
    with pytest.raises(ValueError, match="actions has shape"):
        px.step(empty(), px.SimParams(), SP, jnp.zeros(3))

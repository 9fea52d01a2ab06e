"""Level mutators: each keeps a level valid (one green, one blue, a control, capacities, static
arena, masses and collision matrix recomputed) and changes what it says it changes.

All nine mutators run in one compiled, vmapped program over 64 generated M levels (module-scoped
fixture); ``mutate`` gets a second program.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from jaxlab.envs.kinetix import StaticEnvParams
from jaxlab.envs.kinetix import generator as gen
from jaxlab.envs.kinetix import mutators as mut

SP = StaticEnvParams.from_size("m")
B = 64
NAMES = mut.MUTATIONS


def _apply(keys, levels, kinds):
    """[B] levels x [K] kinds -> [B, K] singly mutated levels (one compiled program)."""

    def per_level(key, level, ks):
        keys = jax.random.split(key, ks.shape[0])
        return jax.vmap(
            lambda k, kind: mut.apply_mutations(k, level, kind[None], SP), in_axes=(0, 0)
        )(keys, ks)

    return jax.vmap(per_level)(keys, levels, kinds)


_apply_jit = jax.jit(_apply)


@pytest.fixture(scope="module")
def levels():
    # The same program as the generator tests (512 M levels), so the compile is shared.
    lv = gen.sample_levels(jax.random.key(1), 512, SP)
    return jax.device_get(jax.tree.map(lambda x: x[:B], lv))


@pytest.fixture(scope="module")
def mutated(levels):
    kinds = np.broadcast_to(np.arange(len(NAMES), dtype=np.int32), (B, len(NAMES)))
    with jax.numpy_rank_promotion("allow"):
        out, applied = _apply_jit(jax.random.split(jax.random.key(5), B), levels, kinds)
    out, applied = jax.device_get((out, applied))
    np.testing.assert_array_equal(applied[..., 0], kinds)
    return {name: jax.tree.map(lambda x, i=i: x[:, i], out) for i, name in enumerate(NAMES)}


def _cat(level, field):
    return np.concatenate(
        [getattr(level.sim.polygon, field), getattr(level.sim.circle, field)], axis=1
    )


def _roles(level):
    roles = np.concatenate([level.polygon_shape_roles, level.circle_shape_roles], axis=1)
    return np.where(_cat(level, "active"), roles, -1)


def _check_valid(level, before):
    roles = _roles(level)
    np.testing.assert_array_equal((roles == 1).sum(1), 1)
    np.testing.assert_array_equal((roles == 2).sum(1), 1)
    assert np.all(np.asarray(jax.vmap(gen.has_control)(level)))
    # Static arena untouched.
    for f in ("position", "vertices", "inverse_mass", "active", "rotation"):
        np.testing.assert_array_equal(
            getattr(level.sim.polygon, f)[:, :4], getattr(before.sim.polygon, f)[:, :4]
        )
    np.testing.assert_array_equal(level.polygon_shape_roles[:, 0], before.polygon_shape_roles[:, 0])
    # Joints and thrusters refer to active shapes.
    active = _cat(level, "active")
    rows = np.arange(B)[:, None]
    j = level.sim.joint
    assert np.all(~j.active | (active[rows, j.a_index] & active[rows, j.b_index]))
    t = level.sim.thruster
    assert np.all(~t.active | active[rows, t.object_index])
    # Masses and the collision matrix are what finalize_level computes from the densities.
    again = jax.device_get(
        jax.jit(jax.vmap(gen.finalize_level, in_axes=(0, None)), static_argnums=1)(level, SP)
    )
    np.testing.assert_allclose(_cat(again, "inverse_mass"), _cat(level, "inverse_mass"), rtol=1e-5)
    np.testing.assert_allclose(
        _cat(again, "inverse_inertia"), _cat(level, "inverse_inertia"), rtol=1e-5
    )
    np.testing.assert_array_equal(again.sim.collision_matrix, level.sim.collision_matrix)
    for x in jax.tree.leaves(level):
        if np.issubdtype(np.asarray(x).dtype, np.floating):
            assert np.all(np.isfinite(x))


@pytest.mark.parametrize("name", list(NAMES))
def test_mutator_keeps_the_level_valid(name, levels, mutated):
    _check_valid(mutated[name], levels)


def _count(level, what):
    if what == "shapes":
        return _cat(level, "active").sum(1)
    return getattr(level.sim, what).active.sum(1)


def test_add_mutators_add_entities(levels, mutated):
    shape_room = _count(levels, "shapes") < SP.num_polygons + SP.num_circles
    joint_room = _count(levels, "joint") < SP.num_joints
    thr_room = _count(levels, "thruster") < SP.num_thrusters
    assert shape_room.any() and (shape_room & joint_room).any() and thr_room.any()

    add = mutated["add_shape"]
    np.testing.assert_array_equal(_count(add, "shapes") - _count(levels, "shapes"), shape_room)
    np.testing.assert_array_equal(_count(add, "joint"), _count(levels, "joint"))

    con = mutated["add_connected_shape"]
    both = shape_room & joint_room
    np.testing.assert_array_equal(_count(con, "shapes") - _count(levels, "shapes"), both)
    np.testing.assert_array_equal(_count(con, "joint") - _count(levels, "joint"), both)
    assert (con.sim.collision_matrix != levels.sim.collision_matrix).any(axis=(1, 2))[both].all()

    thr = mutated["add_thruster"]
    np.testing.assert_array_equal(_count(thr, "thruster") - _count(levels, "thruster"), thr_room)


def test_remove_thruster_never_removes_the_last_control(levels, mutated):
    rem = mutated["remove_thruster"]
    n0, n1 = _count(levels, "thruster"), _count(rem, "thruster")
    j = levels.sim.joint
    motor = (j.active & ~j.is_fixed_joint & (j.motor_on | levels.motor_auto)).any(1)
    removable = (n0 > 1) | ((n0 > 0) & motor)
    np.testing.assert_array_equal(n0 - n1, removable)
    assert removable.any() and ((n0 == 1) & ~motor).any()


def test_swap_role_exchanges_two_roles(levels, mutated):
    before, after = _roles(levels), _roles(mutated["swap_role"])
    changed = (before != after).sum(1)
    assert set(np.unique(changed)) <= {0, 2}
    assert (changed == 2).mean() > 0.9
    np.testing.assert_array_equal(np.sort(before, 1), np.sort(after, 1))


def test_toggle_fixation_flips_one_shape(levels, mutated):
    fixed0 = _cat(levels, "inverse_mass") == 0
    fixed1 = _cat(mutated["toggle_fixation"], "inverse_mass") == 0
    flipped = fixed0 != fixed1
    np.testing.assert_array_equal(flipped.sum(1), 1)
    assert not flipped[:, :4].any()
    # A shape made dynamic gets its unit-density mass back.
    made_dynamic = flipped & fixed0
    assert made_dynamic.any() and (flipped & ~fixed0).any()


def test_change_size_resizes_one_shape(levels, mutated):
    out = mutated["change_size"]
    dv = np.abs(out.sim.polygon.vertices - levels.sim.polygon.vertices).max(axis=(2, 3))
    dr = np.abs(out.sim.circle.radius - levels.sim.circle.radius)
    resized = np.concatenate([dv, dr], 1) > 1e-6
    np.testing.assert_array_equal(resized.sum(1), 1)
    assert not resized[:, :4].any()
    # Sizes stay within the sampler's range: circle radii in [0.1, 0.4].
    r = out.sim.circle.radius[out.sim.circle.active]
    assert r.min() >= 0.1 - 1e-6 and r.max() <= 0.4 + 1e-6


def test_change_position_moves_one_joint_group(levels, mutated):
    out = mutated["change_position"]
    moved = np.abs(_cat(out, "position") - _cat(levels, "position")).max(-1) > 1e-6
    assert moved.any(1).mean() > 0.9 and not moved[:, :4].any()
    # Everything that moved is joined (collision matrix False) to every other moved shape.
    for n in range(B):
        idx = np.nonzero(moved[n])[0]
        cm = levels.sim.collision_matrix[n]
        for a in idx:
            for b in idx:
                assert a == b or not cm[a, b]


def test_change_rotation_turns_a_shape_by_at_most_a_quarter(levels, mutated):
    out = mutated["change_rotation"]
    d = _cat(out, "rotation") - _cat(levels, "rotation")
    biggest = np.abs(d).max(1)
    assert (biggest > 1e-4).mean() > 0.9
    assert biggest.max() <= math.pi / 2 + 0.2  # settling may add a little to jointed shapes
    assert not (np.abs(d[:, :4]) > 0).any()


def test_random_mutations_follow_the_weights_and_stay_valid(levels):
    """Kind -1 draws the mutator from ``mutation_weights`` (the same compiled program)."""
    kinds = np.full((B, len(NAMES)), -1, np.int32)
    with jax.numpy_rank_promotion("allow"):
        out, applied = jax.device_get(
            _apply_jit(jax.random.split(jax.random.key(9), B), levels, kinds)
        )
    applied = applied[..., 0]
    freq = np.bincount(applied.ravel(), minlength=len(NAMES)) / applied.size
    weights = np.asarray(jax.vmap(mut.mutation_weights)(levels))
    expected = (weights / weights.sum(1, keepdims=True)).mean(0)
    np.testing.assert_allclose(freq, expected, atol=0.04)
    for i in range(len(NAMES)):
        _check_valid(jax.tree.map(lambda x, i=i: x[:, i], out), levels)
    with pytest.raises(ValueError, match="n="):
        mut.mutate(jax.random.key(0), jax.tree.map(lambda x: x[0], levels), SP, -1)

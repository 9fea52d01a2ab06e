"""The random level distribution (``generator``) and the no-op filter (``noop_filter``).

Statistics run on 512 vmapped levels per size (S and M, one compile each, shared through
module-scoped fixtures); the expected frequencies come from the original's probabilities:

* S has no fill steps and one thruster slot, so a revolute joint exists iff the forced control
  includes a motor (2/3) and a thruster iff it includes a thruster (2/3); both 1/3.
* A red non-static shape in S needs the no-motor branch (1/3), a free shape drawing red (1/4) and
  a non-red floor (0.92): 0.0767.
* Floor roles: 0.9 default, 0.02 blue, 0.08 red.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.kinetix import StaticEnvParams, create_empty_env
from jaxlab.envs.kinetix import generator as gen
from jaxlab.envs.kinetix import noop_filter as nf
from jaxlab.physics import add_circle, add_rectangle, calculate_collision_matrix, pair_indices
from jaxlab.physics.collision import compute_manifolds
from tests.envs.env_probes import B, kinetix_probe
from tests.typecheck import unchecked

N = 512
S_SIZE = StaticEnvParams.from_size("s")
M_SIZE = StaticEnvParams.from_size("m")


@pytest.fixture(scope="module")
def levels_s():
    return jax.device_get(gen.sample_levels(jax.random.key(0), N, S_SIZE))


@pytest.fixture(scope="module")
def levels_m():
    return jax.device_get(gen.sample_levels(jax.random.key(1), N, M_SIZE))


def _roles(levels, static=True):
    """[n, P + C] roles of active shapes (-1 for inactive; static polygons optional)."""
    S = 0 if static else 4
    pa = np.asarray(levels.sim.polygon.active).copy()
    pa[:, :S] = False
    roles = np.concatenate([levels.polygon_shape_roles, levels.circle_shape_roles], axis=1)
    active = np.concatenate([pa, np.asarray(levels.sim.circle.active)], axis=1)
    return np.where(active, roles, -1)


def _fixed(levels):
    """[n, P + C] fixated (inverse mass 0) active non-static shapes."""
    inv = np.concatenate([levels.sim.polygon.inverse_mass, levels.sim.circle.inverse_mass], 1)
    active = np.concatenate([levels.sim.polygon.active, levels.sim.circle.active], 1).copy()
    active[:, :4] = False
    return active & (inv == 0)


def _overlap_rate(levels, sp):
    """Fraction of levels in which two non-static shapes that may collide (not joined) touch."""
    cc, cr, rr = pair_indices(sp.sim)
    P = sp.num_polygons

    def one(level):
        sim = level.sim
        warm = (sim.acc_rr_manifolds, sim.acc_cr_manifolds, sim.acc_cc_manifolds)
        m_rr, m_cr, m_cc = compute_manifolds(sim.polygon, sim.circle, warm, (cc, cr, rr))
        a = np.concatenate([rr[:, 0], cr[:, 0] + P, cc[:, 0] + P])
        b = np.concatenate([rr[:, 1], cr[:, 1], cc[:, 1] + P])
        active = jnp.concatenate([jnp.any(m_rr.active, axis=1), m_cr.active, m_cc.active])
        free = sim.collision_matrix[a, b] & (a >= 4) & (b >= 4)
        return jnp.any(active & free)

    with jax.numpy_rank_promotion("allow"):
        return float(np.mean(np.asarray(jax.jit(jax.vmap(one))(levels))))


@pytest.mark.parametrize("size", ["s", "m"])
def test_every_level_has_one_green_one_blue_and_a_control(size, levels_s, levels_m):
    levels = levels_s if size == "s" else levels_m
    roles = _roles(levels)
    np.testing.assert_array_equal((roles == 1).sum(1), 1)
    np.testing.assert_array_equal((roles == 2).sum(1), 1)
    assert (roles == 3).sum(1).max() <= 1  # at most one red shape (floor included)
    assert np.all(np.asarray(jax.vmap(gen.has_control)(levels)))
    # Green and blue are never both fixated.
    both_fixed = (_fixed(levels) & (roles == 1)).any(1) & (_fixed(levels) & (roles == 2)).any(1)
    assert not both_fixed.any()


@pytest.mark.parametrize("size", ["s", "m"])
def test_entities_within_capacity_and_consistent(size, levels_s, levels_m):
    levels = levels_s if size == "s" else levels_m
    sp = S_SIZE if size == "s" else M_SIZE
    P = sp.num_polygons
    sim = levels.sim
    empty = create_empty_env(sp)
    # The static arena is untouched.
    np.testing.assert_array_equal(sim.polygon.active[:, :4], True)
    np.testing.assert_allclose(
        sim.polygon.position[:, :4], np.broadcast_to(empty.sim.polygon.position[:4], (N, 4, 2))
    )
    np.testing.assert_array_equal(sim.polygon.inverse_mass[:, :4], 0.0)
    # Something was added beyond green and blue (the forced control's shape).
    n_shapes = sim.polygon.active[:, 4:].sum(1) + sim.circle.active.sum(1)
    assert n_shapes.min() >= 3 and n_shapes.max() <= P - 4 + sp.num_circles
    # Joints join two different active shapes, never two circles.
    shape_active = np.concatenate([sim.polygon.active, sim.circle.active], 1)
    for n, j in zip(*np.nonzero(sim.joint.active), strict=True):
        a, b = sim.joint.a_index[n, j], sim.joint.b_index[n, j]
        assert a != b and shape_active[n, a] and shape_active[n, b]
        assert min(a, b) < P
    # Thrusters sit on active dynamic shapes.
    inv = np.concatenate([sim.polygon.inverse_mass, sim.circle.inverse_mass], 1)
    for n, t in zip(*np.nonzero(sim.thruster.active), strict=True):
        i = sim.thruster.object_index[n, t]
        assert shape_active[n, i] and inv[n, i] > 0
    # Bindings in range.
    assert levels.motor_bindings.max() < sp.num_motor_bindings
    assert levels.thruster_bindings.max() < sp.num_thruster_bindings
    # Masses, inertias and the collision matrix are already what finalize_level computes.
    again = jax.device_get(
        jax.jit(jax.vmap(gen.finalize_level, in_axes=(0, None)), static_argnums=1)(levels, sp)
    )
    np.testing.assert_allclose(again.sim.polygon.inverse_mass, sim.polygon.inverse_mass, rtol=1e-5)
    np.testing.assert_allclose(
        again.sim.circle.inverse_inertia, sim.circle.inverse_inertia, rtol=1e-5
    )
    np.testing.assert_array_equal(again.sim.collision_matrix, sim.collision_matrix)
    # Rectangles have unit-density masses 1 / (4 hx hy) when dynamic.
    v = sim.polygon.vertices
    hx, hy = v[..., 0].max(-1), v[..., 1].max(-1)
    dyn = sim.polygon.active & (sim.polygon.inverse_mass > 0)
    np.testing.assert_allclose(sim.polygon.inverse_mass[dyn], 1 / (4 * hx * hy)[dyn], rtol=1e-4)


def test_forced_control_frequencies_in_s(levels_s):
    """S: no fill steps, one joint and one thruster slot, so the forced control is visible."""
    j = levels_s.sim.joint
    motor = (j.active & ~j.is_fixed_joint & j.motor_on).any(1)
    thruster = levels_s.sim.thruster.active.any(1)
    tol = 4 * np.sqrt(2 / 9 / N)
    assert abs(motor.mean() - 2 / 3) < tol
    assert abs(thruster.mean() - 2 / 3) < tol
    assert abs((motor & thruster).mean() - 1 / 3) < tol
    assert (motor | thruster).all()
    # S forces every free shape dynamic (the original's small-level rule).
    assert not _fixed(levels_s).any()
    red = (_roles(levels_s, static=False) == 3).any(1).mean()
    assert abs(red - 1 / 3 * 0.25 * 0.92) < 4 * np.sqrt(0.077 * 0.923 / N)


def test_floor_roles_and_shape_statistics(levels_s, levels_m):
    floor = np.concatenate([levels_s.polygon_shape_roles[:, 0], levels_m.polygon_shape_roles[:, 0]])
    n = floor.shape[0]
    for role, p in [(0, 0.9), (1, 0.0), (2, 0.02), (3, 0.08)]:
        assert abs((floor == role).mean() - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9, role
    sim = levels_m.sim
    # M: 2 fill steps after green, blue and the control shape; each adds a shape with 0.7.
    n_shapes = sim.polygon.active[:, 4:].sum(1) + sim.circle.active.sum(1)
    assert 3.0 + 2 * 0.7 - 0.35 < n_shapes.mean() <= 3.0 + 2 * 0.7 + 0.05
    # Fixation is common for free shapes (0.02 + 4 * mass) and impossible for connected ones.
    fixed = _fixed(levels_m)
    jointed = np.zeros_like(fixed)
    for n, j in zip(*np.nonzero(sim.joint.active), strict=True):
        jointed[n, sim.joint.a_index[n, j]] = jointed[n, sim.joint.b_index[n, j]] = True
    roles = _roles(levels_m, static=False)
    free_default = (roles == 0) & ~jointed
    assert 0.3 < fixed[free_default].mean() < 0.95
    # Joints: revolute until 2 exist, motors on with 0.8 (the forced one always), limits only
    # between polygons.
    j = sim.joint
    rev = j.active & ~j.is_fixed_joint
    assert 0.8 <= j.motor_on[rev].mean() < 0.97
    speed = j.motor_speed[rev]
    assert speed.min() >= 0.4 and speed.max() <= 3.0
    lim = j.motor_has_joint_limits & rev
    assert np.all(j.a_index[lim] < M_SIZE.num_polygons) and np.all(j.b_index[lim] < 6)
    assert np.all(j.min_rotation[lim] <= 0) and np.all(j.max_rotation[lim] >= 0)
    # Entity shuffling: the first non-static polygon slot is not always the one filled first.
    assert 0.2 < sim.polygon.active[:, 5].mean() and not sim.polygon.active[:, 4].all()


def test_proposal_rejection_lowers_overlaps(levels_s, levels_m):
    """Best-of-8 proposals (M) overlap far less than single proposals (S, the original's rule);
    forcing 8 proposals at S brings S down too."""
    single = _overlap_rate(levels_s, S_SIZE)
    best8_m = _overlap_rate(levels_m, M_SIZE)
    params = gen.GeneratorParams(small_level_n_proposals=8)
    s8 = jax.device_get(gen.sample_levels(jax.random.key(0), N, S_SIZE, params))
    best8_s = _overlap_rate(s8, S_SIZE)
    assert best8_s < 0.5 * single
    assert best8_m < 0.1


def test_vmap_equals_loop_and_determinism(levels_s):
    keys = jax.random.split(jax.random.key(0), N)
    for i in (0, 7):
        one = jax.device_get(gen.sample_level_jit(keys[i], S_SIZE))
        ref = jax.tree.map(lambda x, i=i: x[i], levels_s)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(ref), strict=True):
            if np.issubdtype(np.asarray(a).dtype, np.floating):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(a, b)
    first = jax.device_get(gen.sample_level_jit(keys[0], S_SIZE))
    again = jax.device_get(gen.sample_level_jit(keys[0], S_SIZE))
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    other = jax.device_get(gen.sample_level_jit(keys[1], S_SIZE))
    assert not np.allclose(other.sim.circle.position, again.sim.circle.position)


def test_generated_levels_step_without_nan(levels_s):
    """16 generated S levels, 3 random-action steps each through the env tests' shared compiled
    rollout (``env_probes``: batch 2, 8 steps, episodes truncated after 4)."""
    probe = kinetix_probe("s")
    moved = 0.0
    with jax.numpy_rank_promotion("allow"):
        for i in range(0, 16, B):
            states = jax.tree.map(lambda x, i=i: jnp.asarray(x[i : i + B]), levels_s)
            out = jax.device_get(probe.rollout(states, probe.actions(seed=i)))
            _, st, reward, term, trunc, _ = out
            first = jax.tree.map(lambda x: x[:, :3], st)  # before the time-limit reset
            for x in jax.tree.leaves(first):
                if np.issubdtype(np.asarray(x).dtype, np.floating):
                    assert np.all(np.isfinite(x))
            assert np.all(np.isfinite(reward))
            moved = max(
                moved,
                float(np.abs(first.sim.circle.position[:, 2] - states.sim.circle.position).max()),
            )
    assert moved > 1e-3  # dynamic shapes fall


def _hand_level(solvable: bool):
    """S level: blue box fixated on the floor, green ball 5 cm above it (solvable by doing
    nothing) or far to the left on the floor and fixated (never touches)."""
    sp = S_SIZE
    s = create_empty_env(sp)
    sim, _ = add_rectangle(s.sim, sp.sim, [3.5, 0.6], [0.6, 0.4], fixated=True)
    green = [3.5, 1.0] if solvable else [0.6, 0.6]
    sim, _ = add_circle(sim, sp.sim, green, 0.15, fixated=not solvable)
    sim = sim.replace(collision_matrix=calculate_collision_matrix(sp.sim, sim.joint))
    return s.replace(
        sim=sim,
        polygon_shape_roles=s.polygon_shape_roles.at[4].set(2),
        circle_shape_roles=s.circle_shape_roles.at[0].set(1),
    )


def test_noop_filter_down_weights_levels_the_noop_solves():
    good, bad = _hand_level(True), _hand_level(False)
    cands = jax.tree.map(lambda a, b: jnp.stack([a, b, a, b, b, a, a, b]), good, bad)
    filt = jax.jit(nf.filter_levels, static_argnames=("n", "static_params", "n_steps"))
    w_default = jnp.float32(inspect.signature(nf.filter_levels).parameters["solved_weight"].default)
    picked_solved, weight1_solved = [], []
    with jax.numpy_rank_promotion("allow"):
        for seed in range(4):
            # the weight passed as an array in both calls: one compilation, not two
            levels, picked, solved = filt(
                jax.random.key(seed), cands, 4, S_SIZE, n_steps=16, solved_weight=w_default
            )
            np.testing.assert_array_equal(solved, [1, 0, 1, 0, 0, 1, 1, 0])
            np.testing.assert_array_equal(np.sort(np.asarray(picked)), [1, 3, 4, 7])
            np.testing.assert_allclose(levels.sim.circle.position[:, 0], [[0.6, 0.6]] * 4)
            picked_solved.append(int(np.asarray(solved)[np.asarray(picked)].sum()))
            # With weight 1 the draw is uniform: solved candidates are picked too.
            _, picked1, _ = filt(
                jax.random.key(seed), cands, 4, S_SIZE, n_steps=16, solved_weight=jnp.float32(1.0)
            )
            weight1_solved.append(int(np.asarray(solved)[np.asarray(picked1)].sum()))
    assert sum(picked_solved) == 0 and sum(weight1_solved) > 0
    with pytest.raises(ValueError, match="n=9"):
        nf.filter_levels(jax.random.key(0), cands, 9, S_SIZE)


def test_env_random_levels_through_the_noop_filter_have_the_generators_shape():
    """``env.train_levels=random`` with ``env.noop_filter`` (the pretraining presets): the env's
    sampler draws two generator levels and keeps one through ``filter_levels``; traced only (the
    filter itself is tested above, the unfiltered sampler trains in the flat-policy PPO test)."""
    from jaxlab.envs.kinetix import EnvParams
    from jaxlab.envs.kinetix.level_sets import random_level_sampler

    key = jax.random.key(0)
    with jax.numpy_rank_promotion("allow"):
        plain = jax.eval_shape(random_level_sampler(S_SIZE, EnvParams(), False), key)
        filtered = jax.eval_shape(random_level_sampler(S_SIZE, EnvParams(), True), key)
    assert jax.tree.structure(filtered) == jax.tree.structure(plain)
    same = jax.tree.map(lambda a, b: (a.shape, a.dtype) == (b.shape, b.dtype), filtered, plain)
    assert all(jax.tree.leaves(same))


@pytest.mark.slow
def test_sample_filtered_levels_removes_levels_the_noop_solves():
    """32 filtered S levels (64 candidates) against 32 unfiltered ones, each rolled out with the
    no-op action for 32 steps: about a quarter of random levels solve themselves, the filtered
    ones never do (a solved candidate is kept with weight 0.001 against ~45 unsolved ones), and
    they are still valid levels that differ from one another and step in the S env."""
    n, steps = 32, 32
    rollout = jax.jit(nf.noop_solved, static_argnames=("static_params", "n_steps"))
    with jax.numpy_rank_promotion("allow"):
        unfiltered = gen.sample_levels(jax.random.key(5), n, S_SIZE)
        filtered = nf.sample_filtered_levels(jax.random.key(6), n, S_SIZE, n_steps=steps)
        solved_unfiltered = np.asarray(rollout(unfiltered, S_SIZE, n_steps=steps))
        solved_filtered = np.asarray(rollout(filtered, S_SIZE, n_steps=steps))
    assert solved_unfiltered.sum() >= 3, solved_unfiltered.mean()
    assert solved_filtered.sum() == 0
    filtered = jax.device_get(filtered)
    roles = _roles(filtered)
    assert np.all((roles == 1).sum(1) == 1) and np.all((roles == 2).sum(1) == 1)
    positions = np.concatenate(
        [
            np.asarray(filtered.sim.polygon.position).reshape(n, -1),
            np.asarray(filtered.sim.circle.position).reshape(n, -1),
        ],
        axis=1,
    )
    assert len({row.tobytes() for row in positions}) == n  # drawn without replacement
    # the filtered levels load into the S env and step (the env tests' shared compiled rollout)
    probe = kinetix_probe("s")
    states = jax.tree.map(lambda x: jnp.asarray(x[:B]), filtered)
    with jax.numpy_rank_promotion("allow"):
        _, st, reward, _, _, _ = jax.device_get(probe.rollout(states, probe.actions(seed=7)))
    first = jax.tree.map(lambda x: x[:, :3], st)  # before the time-limit reset
    for x in jax.tree.leaves(first):
        if np.issubdtype(np.asarray(x).dtype, np.floating):
            assert np.all(np.isfinite(x))
    assert np.all(np.isfinite(reward))
    moved = np.abs(first.sim.polygon.position[:, 2] - np.asarray(states.sim.polygon.position))
    assert moved.max() > 1e-3


def test_sampler_arguments_are_validated():
    with pytest.raises(ValueError, match="n="):
        gen.sample_levels(jax.random.key(0), 0, S_SIZE)
    with pytest.raises(ValueError, match="ratio="):
        nf.sample_filtered_levels(jax.random.key(0), 4, S_SIZE, ratio=0)
    with pytest.raises(ValueError, match="add_shape_n_proposals"):
        gen.GeneratorParams(add_shape_n_proposals=0)
    with pytest.raises(ValueError, match="static_params"):
        unchecked(gen.make_sample_level)("s")

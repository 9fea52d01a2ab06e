"""Dynamics of the physics step against closed forms and physical invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxlab import physics as px
from tests.physics.physics_probes import CHUNK, NUM_ACTIONS, SP, empty, runner

G = 9.81
DT = 1 / 60
FLOOR = 0.4


def test_free_fall_matches_semi_implicit_euler():
    state = empty(floor=False)
    state, _ = px.add_circle(state, SP, [2.0, 10.0], 0.2, velocity=[0.5, 1.0])
    _, traj = runner()(state, CHUNK)
    n = np.arange(1, CHUNK + 1)
    # v_n = v_0 - n g dt;  y_n = y_0 + dt sum_{k=1..n} v_k = y_0 + v_0 n dt - g dt^2 n(n+1)/2.
    vy = 1.0 - n * G * DT
    y = 10.0 + 1.0 * n * DT - G * DT**2 * n * (n + 1) / 2
    np.testing.assert_allclose(np.asarray(traj.circle.velocity[:, 0, 1]), vy, atol=1e-4)
    np.testing.assert_allclose(np.asarray(traj.circle.position[:, 0, 1]), y, atol=1e-4)
    np.testing.assert_allclose(
        np.asarray(traj.circle.position[:, 0, 0]), 2.0 + 0.5 * n * DT, atol=1e-4
    )


def test_circle_and_box_rest_on_floor_without_sinking():
    state = empty()
    state, _ = px.add_circle(state, SP, [1.5, 1.0], 0.3)
    state, _ = px.add_rectangle(state, SP, [3.5, 1.0], [0.6, 0.4])
    _, traj = runner()(state, 600)
    circle_y = np.asarray(traj.circle.position[:, 0, 1])
    box_y = np.asarray(traj.polygon.position[:, 1, 1])
    late = slice(120, None)  # after 2 s
    # Contacts are resolved without position correction below the 0.01 slop.
    assert np.all(np.abs(circle_y[late] - (FLOOR + 0.3)) < 0.012), circle_y[late].min()
    assert np.all(np.abs(box_y[late] - (FLOOR + 0.2)) < 0.012), box_y[late].min()
    # No slow sinking: the last second sits where the third second did.
    assert abs(circle_y[-60:].mean() - circle_y[120:180].mean()) < 1e-3
    assert abs(box_y[-60:].mean() - box_y[120:180].mean()) < 1e-3
    assert np.abs(np.asarray(traj.polygon.velocity[-1])).max() < 1e-2
    assert abs(float(traj.polygon.rotation[-1, 1])) < 1e-3


def test_stack_of_five_boxes_stands_ten_seconds():
    state = empty()
    h = 0.3
    for i in range(5):
        state, _ = px.add_rectangle(state, SP, [2.5, FLOOR + h / 2 + i * h + 0.001], [0.4, h])
    _, traj = runner()(state, 600)
    pos = np.asarray(traj.polygon.position[:, 1:6])
    expected_y = FLOOR + h / 2 + np.arange(5) * h
    # Standing: every box within a few cm of its place (a collapse moves them by > 0.2 m).
    assert np.abs(pos[-1, :, 1] - expected_y).max() < 0.05
    assert np.abs(pos[:, :, 0] - 2.5).max() < 0.08
    assert np.abs(np.asarray(traj.polygon.rotation[:, 1:6])).max() < 0.1


@pytest.mark.parametrize("restitution", [0.0, 1.0], ids=["inelastic", "elastic"])
def test_head_on_collision_conserves_momentum(restitution):
    state = empty(gravity=(0.0, 0.0), floor=False)
    # Unequal masses, slow enough that penetration stays below the slop (no Baumgarte energy).
    state, _ = px.add_circle(
        state, SP, [1.0, 2.0], 0.2, velocity=[0.4, 0.0], restitution=restitution
    )
    state, _ = px.add_circle(
        state, SP, [2.0, 2.0], 0.3, velocity=[-0.2, 0.0], restitution=restitution
    )
    m = 1 / np.asarray(state.circle.inverse_mass[:2])
    _, traj = runner()(state, 2 * CHUNK)
    v = np.asarray(traj.circle.velocity[:, :2, 0])
    p = (v * m).sum(axis=1)
    p0 = 0.4 * m[0] - 0.2 * m[1]
    np.testing.assert_allclose(p, p0, rtol=1e-5, atol=1e-6)
    e0 = 0.5 * (m[0] * 0.4**2 + m[1] * 0.2**2)
    e = 0.5 * (m * v**2).sum(axis=1)
    # They do collide: velocities change sign relative to each other.
    assert v[-1, 1] - v[-1, 0] >= -1e-6
    if restitution == 1.0:
        np.testing.assert_allclose(e[-1], e0, rtol=1e-3)
        # 1D elastic collision: v1' = ((m1 - m2) v1 + 2 m2 v2) / (m1 + m2).
        v1 = ((m[0] - m[1]) * 0.4 + 2 * m[1] * -0.2) / m.sum()
        np.testing.assert_allclose(v[-1, 0], v1, atol=2e-3)
    else:
        # Perfectly inelastic along the line of centres: common velocity p0 / M.
        np.testing.assert_allclose(v[-1], p0 / m.sum(), atol=2e-3)
        assert e[-1] < e0


def _ramp_scene(slope_deg):
    state = empty(floor=False)
    theta = math.radians(slope_deg)
    # A static ramp rotated clockwise by theta (descending to +x), a box resting on it.
    state, _ = px.add_rectangle(state, SP, [2.5, 2.0], [6.0, 0.2], rotation=-theta, fixated=True)
    normal = np.array([math.sin(theta), math.cos(theta)])
    centre = np.array([2.5, 2.0]) + normal * (0.1 + 0.15 + 0.005)
    state, (_, box) = px.add_rectangle(state, SP, centre, [0.3, 0.3], rotation=-theta)
    return state, theta, box


@pytest.mark.parametrize(
    "slope_deg,slides", [(15.0, False), (45.0, True)], ids=["sticks", "slides"]
)
def test_box_on_ramp_sticks_or_slides_by_friction(slope_deg, slides):
    state, theta, box = _ramp_scene(slope_deg)
    mu = math.hypot(0.4, 0.4)  # both frictions 1: sqrt((1*0.4)^2 + (1*0.4)^2) > tan(15 deg)
    assert (math.tan(theta) > mu) == slides
    _, traj = runner()(state, CHUNK)
    start = np.asarray(state.polygon.position[box])
    disp = np.asarray(traj.polygon.position[:, box]) - start
    down = np.array([math.cos(theta), -math.sin(theta)])
    along = disp @ down
    if slides:
        # Kinetic friction: s(t) = a t^2 / 2 with a = g (sin - mu cos).
        a = G * (math.sin(theta) - mu * math.cos(theta))
        t = 1.0
        assert along[-1] == pytest.approx(a * t**2 / 2, rel=0.15)
    else:
        assert np.abs(along).max() < 0.01


def test_pendulum_small_angle_period():
    state = empty(floor=False)
    length, radius, amp = 1.0, 0.05, 0.1
    pivot = np.array([2.5, 3.0])
    state, (_, anchor) = px.add_circle(state, SP, pivot, 0.05, fixated=True)
    bob0 = pivot + length * np.array([math.sin(amp), -math.cos(amp)])
    state, (_, bob) = px.add_circle(state, SP, bob0, radius)
    state, _ = px.add_revolute_joint(state, SP, anchor, bob, [0.0, 0.0], list(pivot - bob0))
    _, traj = runner()(state, 4 * CHUNK)
    x = np.asarray(traj.circle.position[:, 1, 0]) - pivot[0]
    t = np.arange(1, len(x) + 1) * DT
    # Upward zero crossings, linearly interpolated.
    idx = np.where((x[:-1] < 0) & (x[1:] >= 0))[0]
    crossings = t[idx] + (t[idx + 1] - t[idx]) * (-x[idx]) / (x[idx + 1] - x[idx])
    period = np.diff(crossings).mean()
    # Physical pendulum with Jax2D's circle inertia I_cm = m r^2 / 4.
    expected = 2 * math.pi * math.sqrt((length**2 + radius**2 / 4) / (G * length))
    assert len(crossings) >= 2
    assert period == pytest.approx(expected, rel=0.02)


def _car(state):
    state, (_, body) = px.add_rectangle(state, SP, [2.5, 0.85], [1.0, 0.2])
    state, (_, w1) = px.add_circle(state, SP, [2.1, 0.65], 0.2)
    state, (_, w2) = px.add_circle(state, SP, [2.9, 0.65], 0.2)
    state, _ = px.add_revolute_joint(state, SP, body, w1, [-0.4, -0.2], [0, 0], motor_on=True)
    state, _ = px.add_revolute_joint(state, SP, body, w2, [0.4, -0.2], [0, 0], motor_on=True)
    return state


@pytest.mark.parametrize("action,direction", [(1.0, -1.0), (-1.0, 1.0)], ids=["plus", "minus"])
def test_motor_wheels_drive_car(action, direction):
    state = _car(empty())
    actions = np.zeros(NUM_ACTIONS)
    actions[:2] = action
    _, traj = runner()(state, 2 * CHUNK, actions=actions)
    dx = float(traj.polygon.position[-1, 1, 0] - state.polygon.position[1, 0])
    # Motor action +1 spins wheel b counter-clockwise relative to the body (rolls towards -x).
    assert direction * dx > 1.0
    # Wheels stay attached to the body.
    gap = np.asarray(traj.circle.position[-1, 0] - traj.polygon.position[-1, 1])
    assert np.linalg.norm(gap) == pytest.approx(math.hypot(0.4, 0.2), abs=0.05)


def test_rotation_limits_hold_against_motor():
    state = empty(floor=False)
    state, (_, base) = px.add_rectangle(state, SP, [2.5, 3.0], [0.4, 0.4], fixated=True)
    state, (_, arm) = px.add_rectangle(state, SP, [3.2, 3.0], [1.0, 0.1])
    state, _ = px.add_revolute_joint(
        state,
        SP,
        base,
        arm,
        [0.2, 0.0],
        [-0.5, 0.0],
        motor_on=True,
        motor_power=2.0,
        has_joint_limits=True,
        min_rotation=-0.4,
        max_rotation=0.4,
    )
    actions = np.zeros(NUM_ACTIONS)
    for a in (1.0, -1.0):
        actions[0] = a
        state, traj = runner()(state, CHUNK, actions=actions)
        rel = np.asarray(traj.polygon.rotation[:, arm] - traj.polygon.rotation[:, base])
        assert rel.max() < 0.4 + 0.05 and rel.min() > -0.4 - 0.05
        # The motor (action +1 spins b counter-clockwise) pushed into the limit it drove to.
        assert (rel.max() if a > 0 else rel.min()) == pytest.approx(0.4 * a, abs=0.08)


def test_fixed_joint_keeps_relative_pose():
    state = empty()
    state, (_, a) = px.add_rectangle(state, SP, [2.0, 2.0], [0.8, 0.2], angular_velocity=2.0)
    state, (_, b) = px.add_rectangle(state, SP, [2.6, 2.2], [0.4, 0.4], angular_velocity=2.0)
    state, _ = px.add_fixed_joint(state, SP, a, b, [0.4, 0.0], [-0.2, -0.2])
    _, traj = runner()(state, 2 * CHUNK)
    rel = np.asarray(traj.polygon.rotation[:, b] - traj.polygon.rotation[:, a])
    assert np.abs(rel).max() < 0.05
    ra = np.asarray(traj.polygon.rotation[:, a])
    rb = np.asarray(traj.polygon.rotation[:, b])
    anchor_a = np.asarray(traj.polygon.position[:, a]) + np.stack(
        [0.4 * np.cos(ra), 0.4 * np.sin(ra)], -1
    )
    rot_b = np.stack(
        [-0.2 * np.cos(rb) + 0.2 * np.sin(rb), -0.2 * np.sin(rb) - 0.2 * np.cos(rb)], -1
    )
    anchor_b = np.asarray(traj.polygon.position[:, b]) + rot_b
    assert np.linalg.norm(anchor_a - anchor_b, axis=-1).max() < 0.05
    # And the pair really moved (fell and tumbled onto the floor).
    assert float(traj.polygon.position[-1, a, 1]) < 1.0


def test_thruster_accelerates_body_by_force_over_mass():
    state = empty(gravity=(0.0, 0.0))
    state, (_, box) = px.add_rectangle(state, SP, [2.0, 2.0], [0.5, 0.4], density=2.0)
    state, _ = px.add_thruster(state, SP, box, [0.0, 0.0], math.pi / 2, power=3.0)
    actions = np.zeros(NUM_ACTIONS)
    actions[SP.num_joints] = 1.0
    _, traj = runner()(state, CHUNK, actions=actions)
    mass = 2.0 * 0.5 * 0.4
    n = np.arange(1, CHUNK + 1)
    # Impulse per step F dt with F = power * base_thruster_power * action, along +y.
    vy = n * 3.0 * 10.0 * DT / mass
    np.testing.assert_allclose(np.asarray(traj.polygon.velocity[:, box, 1]), vy, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(traj.polygon.velocity[:, box, 0]), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(traj.polygon.angular_velocity[:, box]), 0.0, atol=1e-5)
    # The thruster's cached world position follows the body.
    np.testing.assert_allclose(
        np.asarray(traj.thruster.global_position[-1, 0]),
        np.asarray(traj.polygon.position[-1, box]),
        atol=1e-5,
    )


def test_off_centre_thruster_applies_torque():
    state = empty(gravity=(0.0, 0.0))
    state, (_, box) = px.add_rectangle(state, SP, [2.0, 2.0], [0.5, 0.4])
    state, _ = px.add_thruster(state, SP, box, [0.25, 0.0], math.pi / 2)
    actions = np.zeros(NUM_ACTIONS)
    actions[SP.num_joints] = 1.0
    _, traj = runner()(state, CHUNK, actions=actions)
    force_dt = 1.0 * 10.0 * DT
    # dw = I^-1 (r x d) F dt with r = (0.25, 0), d = (0, 1), after the first step.
    expected = float(state.polygon.inverse_inertia[box]) * 0.25 * force_dt
    assert float(traj.polygon.angular_velocity[0, box]) == pytest.approx(expected, rel=1e-5)

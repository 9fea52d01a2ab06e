"""The driving world: expert rollouts (safety, progress, route modes), tracking, render, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs.driving import DrivingStatic, make_driving, plan_steps, sat_separation

N_SCENES, STEPS = 12, 40


@pytest.fixture(scope="module")
def expert_run():
    env, params = make_driving(auto_reset=False)

    @jax.jit
    def run(keys):
        _, st = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

        def body(s, _):
            plan = jax.vmap(env.expert_plan, in_axes=(0, None))(s, params)
            out = jax.vmap(env.step, in_axes=(None, 0, 0, None))(keys[0], s, plan, params)
            s2, info = out[1], out[5]
            return s2, (info["collision"], info["offroad_dist"], info["route_s"], s2.ego)

        return st, jax.lax.scan(body, st, None, length=STEPS)[1]

    st, (col, off, route_s, ego) = run(jax.random.split(jax.random.PRNGKey(3), N_SCENES))
    return env, params, st, col, off, route_s, ego


def test_expert_drives_safely_and_makes_progress(expert_run):
    _, _, st, col, off, route_s, _ = expert_run
    assert float(np.mean(np.asarray(col).any(0))) <= 1 / N_SCENES
    assert float(np.max(off)) < 0.5
    progress = np.asarray(route_s[-1] - st.start_s)
    # 4 s at 5-8 m/s, slowed by leaders: at least 10 m in every scene
    assert np.all(progress > 10.0), progress


def test_expert_style_is_hidden_per_scene_and_drives_the_speed(expert_run):
    """Desired speed and headway are drawn per scene in their ranges, are not in the observation,
    and a scene replayed with a faster style gets further (never less far)."""
    env, params, st, col, off, route_s, ego = expert_run
    v0, hw = np.asarray(st.ego_v0), np.asarray(st.ego_headway)
    assert np.all((v0 >= 6) & (v0 <= 10)) and np.all((hw >= 0.6) & (hw <= 1.8))
    assert np.std(v0) > 0.5 and np.std(hw) > 0.15
    obs = env.get_obs(jax.tree.map(lambda x: x[0], st), params)
    flat = np.concatenate([np.ravel(np.asarray(v, np.float32)) for v in obs.values()])
    assert not np.any(np.isclose(flat, v0[0], atol=1e-6))

    @jax.jit
    def progress(st):
        def body(s, _):
            plan = jax.vmap(env.expert_plan, in_axes=(0, None))(s, params)
            return jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
                jax.random.PRNGKey(0), s, plan, params
            )[1], None

        return jax.lax.scan(body, st, None, length=30)[0].ego[:, 0] - st.ego[:, 0]

    calm = progress(st.replace(ego_v0=jnp.full_like(st.ego_v0, 6.0)))
    brisk = progress(st.replace(ego_v0=jnp.full_like(st.ego_v0, 10.0)))
    d = np.asarray(brisk) - np.asarray(calm)
    assert np.all(d > -0.1) and np.mean(d) > 0.5, d  # measured mean 1.0 m over 3 s


def test_intersection_routes_end_apart():
    """The three intersection routes end in three separated places (the ego's modes)."""
    env, params = make_driving(auto_reset=False, scene_type=1)
    _, st = jax.jit(env.reset)(jax.random.PRNGKey(0), params)
    ends = np.stack([np.asarray(st.lanes[r, -1]) for r in range(3)])
    d = np.linalg.norm(ends[:, None] - ends[None], axis=-1)
    assert d[np.triu_indices(3, 1)].min() > 20.0
    # left ends west, right ends east of the approach
    assert ends[0, 0] < -20 and ends[2, 0] > 20 and abs(ends[1, 0]) < 1


def test_sat_separation_is_exact_for_aligned_boxes():
    one = jnp.ones((1,))
    size = jnp.array([[4.0, 2.0]])
    for dx, want in ((6.0, 2.0), (3.0, -1.0), (4.0, 0.0)):
        got = sat_separation(
            jnp.zeros((1, 2)), 0 * one, size, jnp.array([[dx, 0.0]]), 0 * one, size
        )
        np.testing.assert_allclose(got, [want], atol=1e-6)
    rotated = sat_separation(
        jnp.zeros((1, 2)), 0 * one, size, jnp.array([[0.0, 3.5]]), jnp.pi / 2 * one, size
    )
    np.testing.assert_allclose(rotated, [3.5 - 1.0 - 2.0], atol=1e-5)


def test_render_and_bad_input(expert_run):
    env, params, st, *_ = expert_run
    one = jax.tree.map(lambda x: x[0], st)
    plan = np.asarray(jax.jit(env.expert_plan)(one, params))  # one program, not op by op
    img = env.render(one, plan=plan, size=64)
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    assert np.any(np.all(img == (40, 110, 240), -1))  # the ego
    assert np.any(np.all(img == (60, 220, 90), -1))  # the plan
    with pytest.raises(ConfigError, match="scene_type"):
        make_driving(scene_type=5)
    with pytest.raises(ConfigError, match="n_lanes"):
        DrivingStatic(n_lanes=3)


def test_expert_logs_edit_reset_rolls_the_same_scenes_out_under_a_forced_route():
    """``expert_logs(edit_reset=...)``: an edit that keeps each scene's route reproduces the log
    bit for bit; forcing the ego's route to left / right records that route and turns the logged
    future that way (the same scenes, another choice). One compiled rollout serves every route
    (``route`` traced; -1 keeps the scene's own), one more the unedited log."""
    from jaxlab.envs.driving.evaluation import expert_logs

    env, params = make_driving(auto_reset=False, scene_type=1)
    key = jax.random.PRNGKey(4)

    def force(route):
        def edit(st):
            r = jnp.where(route >= 0, route, st.route).astype(st.route.dtype)
            m = jnp.where(route >= 0, route, st.route_mode).astype(st.route_mode.dtype)
            return st.replace(route=r, route_mode=m)

        return edit

    run = jax.jit(
        lambda k, r: expert_logs(k, env, params, n_scenes=4, steps=20, edit_reset=force(r))
    )
    plain = jax.jit(lambda k: expert_logs(k, env, params, n_scenes=4, steps=20))(key)
    kept = run(key, -1)
    for k in plain:
        np.testing.assert_array_equal(np.asarray(kept[k]), np.asarray(plain[k]), err_msg=k)
    turns = []
    for route in (0, 2):
        logs = run(key, route)
        assert np.all(np.asarray(logs["route_mode"]) == route)
        last = np.asarray(logs["future"]).reshape(4, 20, *logs["future"].shape[1:])[:, -1, 0, -1]
        turns.append(np.arctan2(last[:, 3], last[:, 2]))  # the ego's heading change, 1.6 s
    left, right = turns  # measured: 0.12-0.44 rad left, the mirror image right
    assert np.all(left > 0.1) and np.all(right < -0.1), (left, right)


def test_tracker_reads_signed_progress_so_a_backward_point_is_never_speed():
    """The desired speed is the plan's progress along its own heading: a plan whose second point
    jumps 8 m behind the ego asks for the speed of the same plan without the jump (its steps
    out and back cancel; their unsigned lengths would read 63 m/s, full throttle), and a plan
    that only goes backwards asks for standstill, as a plan that stays put does."""
    env, _ = make_driving(auto_reset=False)
    t = np.arange(1, 17) * 0.6  # 6 m/s straight ahead
    fwd = np.stack([t, 0 * t, 1 + 0 * t, 0 * t], -1).astype(np.float32)
    back = fwd.copy()
    back[1, 0] = -8.0
    ego = jnp.array([0.0, 0.0, 0.0, 6.0])
    track = jax.jit(env.track)
    acc = lambda plan: float(track(ego, jnp.asarray(plan), 0.1)[0])  # noqa: E731
    assert abs(acc(fwd)) < 0.1
    assert abs(acc(back) - acc(fwd)) < 1e-4
    still = np.zeros_like(fwd)
    still[:, 2] = 1.0
    reverse = fwd * np.array([-1.0, 1.0, 1.0, 1.0], np.float32)
    assert acc(reverse) == acc(still) < -6.0 + 1e-6
    length, progress = plan_steps(jnp.asarray(back))
    np.testing.assert_allclose(np.asarray(length)[:3], [0.6, 8.6, 9.8], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(progress)[:3], [0.6, -8.6, 9.8], rtol=1e-5)


def test_world_supplies_agent_types_validity_lights_limits_boundaries_and_route_lanes():
    """The original's encoder inputs, as the world makes them: per-type sizes and speeds, per-step
    validity within the perception range, the intersection's signal phase, speed limits, lane
    boundaries half a lane width beside the centre, and route lanes padded past the route's end."""
    from jaxlab.envs.driving.vehicles import AGENT_SIZES, AGENT_SPEEDS

    env, params = make_driving(
        auto_reset=False, n_route=4, agent_type_probs=(0.4, 0.3, 0.3), perception_range=35.0
    )
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    obs, st = jax.device_get(reset(jax.random.split(jax.random.PRNGKey(5), 24), params))
    valid, types = st.nb_valid, st.nb_type
    assert set(types[valid].tolist()) == {0, 1, 2}
    seen = obs["neighbour_valid"]  # the neighbours in range now
    np.testing.assert_array_equal(obs["neighbour_types"].argmax(-1)[seen], types[seen])
    assert np.all(obs["neighbour_types"][~seen] == 0.0)
    sizes, speeds = np.asarray(AGENT_SIZES)[types], np.asarray(AGENT_SPEEDS)[types]
    assert np.all((st.nb_v0 >= speeds[..., 0]) & (st.nb_v0 <= speeds[..., 1]))
    # per-step validity: within 35 m of the ego at that step; invalid steps are zero
    dist = np.linalg.norm(st.past[:, :, 1:, :2] - st.past[:, :, :1, :2], axis=-1)  # (B, H, N)
    want = valid[:, None] & (dist <= 35.0)
    np.testing.assert_array_equal(obs["neighbour_step_valid"], want.transpose(0, 2, 1))
    step_ok = obs["neighbour_step_valid"]
    assert np.any(valid & ~step_ok[..., -1]) and np.any(step_ok[..., -1])
    np.testing.assert_array_equal(obs["neighbour_valid"], step_ok[..., -1])
    assert np.all(obs["neighbours"][~step_ok] == 0.0)
    np.testing.assert_allclose(
        obs["neighbours"][step_ok][:, 6:], sizes[..., None, :].repeat(5, 2)[step_ok]
    )
    # lights: only the intersection has signals (approach and oncoming green, cross road red)
    light = obs["lane_traffic_light"].argmax(-1)
    inter, other = st.scene == 1, st.scene != 1
    assert inter.any() and other.any()
    np.testing.assert_array_equal(light[inter][:, :5], [[0, 0, 0, 0, 2]] * int(inter.sum()))
    np.testing.assert_array_equal(light[other][obs["lane_valid"][other]], 3)
    assert np.all(obs["lane_speed_limit"][obs["lane_speed_limit_valid"]] == 10.0)
    assert not np.all(obs["lane_speed_limit_valid"][obs["lane_valid"]])
    # boundaries: +-1.75 m perpendicular to the lane direction, left then right
    bd, ln = obs["lane_boundaries"][obs["lane_valid"]], obs["lanes"][obs["lane_valid"]]
    np.testing.assert_allclose(np.linalg.norm(bd[..., :2], axis=-1), 1.75, atol=1e-5)
    np.testing.assert_allclose(bd[..., :2], -bd[..., 2:], atol=1e-6)
    cross = ln[..., 2] * bd[..., 1] - ln[..., 3] * bd[..., 0]
    np.testing.assert_allclose(cross, 1.75, atol=1e-5)
    # route lanes: window 0 is the route lane's token; windows past the route's end are padding
    idx = np.arange(24)
    np.testing.assert_allclose(obs["route"][:, 0], obs["lanes"][idx, st.route], atol=1e-5)
    rv = obs["route_valid"]
    assert np.all(rv[:, 0]) and not np.all(rv[:, -1]) and np.all(rv[:, :-1] >= rv[:, 1:])
    assert np.all(obs["route"][~rv] == 0.0)
    with pytest.raises(ConfigError, match="agent_type_probs"):
        make_driving(agent_type_probs=(1.0, 1.0))
    with pytest.raises(ConfigError, match="perception_range"):
        make_driving(perception_range=-1.0)

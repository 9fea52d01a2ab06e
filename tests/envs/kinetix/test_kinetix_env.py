"""Kinetix reward, termination, truncation and dense shaping on hand-built scenes, parity of
rewards/dones with the original env, and padding a level into a larger size.

All rollouts go through the shared compiled programs of ``env_probes`` (S and M sizes, flat
observations, multi-discrete actions; batch ``B = 2``, ``T = 8`` steps per call, auto-reset).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.physics_fidelity.physics_fixtures import load_fixture
from jaxlab.envs.kinetix import EnvParams, StaticEnvParams, demo_level, load_level
from jaxlab.envs.kinetix.levels import collision_matrix_np
from tests.envs.env_probes import B, T, kinetix_probe

GREEN, BLUE, RED = 1, 2, 3


def _noop(batch=B, steps=T):
    return jnp.zeros((batch, steps, 6), jnp.int32)


def _stack(*states):
    return jax.tree.map(lambda *x: jnp.stack(x), *states)


def _scene(
    *,
    green=(2.5, 1.2),
    green_r=0.15,
    green_v=(0.0, 0.0),
    other=(2.5, 0.7),
    other_r=0.3,
    other_role=BLUE,
    box=None,
):
    """An S scene from the demo level: joint and thruster removed, circle 0 the green ball,
    circle 1 a fixated ball of ``other_role``, polygon 4 (the cart) optionally a fixated box
    ``(x, y, role)``, else inactive."""
    s = demo_level(StaticEnvParams.from_size("s"))
    sim = s.sim
    circ = sim.circle.replace(
        position=jnp.array([green, other], jnp.float32),
        velocity=jnp.array([green_v, (0.0, 0.0)], jnp.float32),
        radius=jnp.array([green_r, other_r], jnp.float32),
        inverse_mass=sim.circle.inverse_mass.at[0].set(1.0 / (np.pi * green_r**2)),
        inverse_inertia=sim.circle.inverse_inertia.at[0].set(4.0 / (np.pi * green_r**4)),
    )
    poly = sim.polygon
    roles = s.polygon_shape_roles
    if box is None:
        poly = poly.replace(active=poly.active.at[4].set(False))
    else:
        x, y, role = box
        poly = poly.replace(
            position=poly.position.at[4].set(jnp.array([x, y])),
            inverse_mass=poly.inverse_mass.at[4].set(0.0),
            inverse_inertia=poly.inverse_inertia.at[4].set(0.0),
        )
        roles = roles.at[4].set(role)
    joint = sim.joint.replace(active=sim.joint.active.at[0].set(False))
    matrix = collision_matrix_np(7, joint.a_index, joint.b_index, joint.active)
    return s.replace(
        sim=sim.replace(
            circle=circ,
            polygon=poly,
            joint=joint,
            thruster=sim.thruster.replace(active=sim.thruster.active.at[0].set(False)),
            collision_matrix=jnp.asarray(matrix),
        ),
        circle_shape_roles=jnp.array([GREEN, other_role], jnp.int32),
        polygon_shape_roles=roles,
    )


def _first_done(out, b):
    term, trunc = np.asarray(out[3])[b], np.asarray(out[4])[b]
    idx = np.flatnonzero(term | trunc)
    return int(idx[0]) if idx.size else None


@pytest.fixture(scope="module")
def s_probe():
    return kinetix_probe("s")


def test_green_falls_onto_blue_gives_plus_one_and_terminates(s_probe):
    params = EnvParams(dense_reward_scale=0.0)
    out = s_probe.rollout(_stack(_scene(), _scene(other_role=RED)), _noop(), params=params)
    reward, term, trunc = np.asarray(out[2]), np.asarray(out[3]), np.asarray(out[4])
    k = _first_done(out, 0)
    assert k is not None and term[0, k] and not trunc[0, k]
    assert reward[0, k] == 1.0 and np.all(reward[0, :k] == 0.0)
    assert bool(out[5]["GoalR"][0, k]) and bool(out[5]["solved"][0, k])
    # The same fall onto a red ball: -1, terminated, not solved.
    k = _first_done(out, 1)
    assert k is not None and term[1, k] and reward[1, k] == -1.0
    assert not bool(out[5]["solved"][1, k])
    # Auto-reset: the step after the terminal one starts the env's own level again.
    assert int(out[1].timestep[0, k]) == 0


def test_touching_red_and_blue_in_one_substep_gives_minus_one(s_probe):
    params = EnvParams(dense_reward_scale=0.0)
    both = _scene(green=(2.5, 0.9), other=(2.5, 0.6), other_r=0.2, box=(2.5, 1.1, RED))
    blue_only = _scene(green=(2.5, 0.9), other=(2.5, 0.6), other_r=0.2, box=(2.5, 1.1, 0))
    out = s_probe.rollout(_stack(both, blue_only), _noop(), params=params)
    reward, term = np.asarray(out[2]), np.asarray(out[3])
    assert term[0, 0] and reward[0, 0] == -1.0
    assert term[1, 0] and reward[1, 0] == 1.0


def test_truncation_at_max_timesteps(s_probe):
    params = EnvParams(max_timesteps=3)
    far = _scene(green=(1.0, 0.6), other=(4.0, 2.0))  # rests on the floor, never reaches blue
    out = s_probe.rollout(_stack(far, far), _noop(), params=params)
    term, trunc = np.asarray(out[3]), np.asarray(out[4])
    assert not term.any()
    np.testing.assert_array_equal(trunc[0], [False, False, True, False, False, True, False, False])
    np.testing.assert_array_equal(np.asarray(out[1].timestep[0]), [1, 2, 0, 1, 2, 0, 1, 2])


def test_dense_shaping_rewards_approach_and_punishes_retreat(s_probe):
    kappa = 0.5
    params = EnvParams(dense_reward_scale=kappa)
    towards = _scene(green=(2.5, 2.2), other=(2.5, 0.7))
    away = _scene(green=(2.5, 2.2), other=(2.5, 0.7), green_v=(0.0, 6.0))
    out = s_probe.rollout(_stack(towards, away), _noop(), params=params)
    reward, dist = np.asarray(out[2]), np.asarray(out[5]["distance"])
    assert np.all(reward[:, 0] == 0.0)  # no dense term on the first step
    assert np.all(reward[0, 1:4] > 0) and np.all(reward[1, 1:4] < 0)
    want = -kappa * np.diff(dist[:, :4], axis=1)
    np.testing.assert_allclose(reward[:, 1:4], want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "size,names",
    [("s", ("h0_weak_thrust", "h4_thrust_aim")), ("m", ("arm_up", "h0_unicycle"))],
)
def test_rewards_and_dones_match_the_original(shared_levels, size, names):
    """Zero actions until the first termination, against the original env's rollout
    (``tests/physics/fixtures``, kinetix-env 3.0.2)."""
    p = kinetix_probe(size)
    sp = StaticEnvParams.from_size(size)
    levels = [load_level(shared_levels / size / f"{n}.json", sp) for n in names]
    refs = [load_fixture(f"{size}_{n}") for n in names]
    params = levels[0].params
    horizon = max(int(r["env_first_done"]) for r in refs) + 1
    state = _stack(*(lv.state for lv in levels))
    rewards, dones = [], []
    for c in range(-(-horizon // T)):
        keys = jax.random.split(jax.random.key(c), B * T).reshape(B, T)
        out = p.rollout(state, _noop(), keys, params)
        rewards.append(np.asarray(out[2]))
        dones.append(np.asarray(out[3]) | np.asarray(out[4]))
        state = jax.tree.map(lambda x: x[:, -1], out[1])
    rewards, dones = np.concatenate(rewards, 1), np.concatenate(dones, 1)
    for b, ref in enumerate(refs):
        k = int(ref["env_first_done"])
        np.testing.assert_array_equal(dones[b, : k + 1], ref["env_done"][: k + 1])
        np.testing.assert_allclose(rewards[b, : k + 1], ref["env_reward"][: k + 1], atol=2e-3)


def test_padding_into_a_larger_size_keeps_the_dynamics(shared_levels):
    """``s/h2_one_wheel_car`` (motor on: multi-discrete 1 on binding 0) in S and padded into M."""
    path = shared_levels / "s" / "h2_one_wheel_car.json"
    small = load_level(path)
    big = load_level(path, StaticEnvParams.from_size("m"))
    drive = jnp.zeros((B, T, 6), jnp.int32).at[:, :, 0].set(1)
    out_s = kinetix_probe("s").rollout(_stack(small.state, small.state), drive, params=small.params)
    out_m = kinetix_probe("m").rollout(_stack(big.state, big.state), drive, params=big.params)
    s_s, s_m = out_s[1].sim, out_m[1].sim
    P = small.static_params.num_polygons
    C = small.static_params.num_circles
    np.testing.assert_allclose(
        np.asarray(s_m.polygon.position[:, :, :P]), np.asarray(s_s.polygon.position), atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(s_m.circle.position[:, :, :C]), np.asarray(s_s.circle.position), atol=1e-4
    )
    np.testing.assert_allclose(np.asarray(out_m[2]), np.asarray(out_s[2]), atol=1e-5)
    # The wheel (circle 0, driven by motor binding 0) actually moved.
    moved = s_s.circle.position[0, -1, 0, 0] - small.state.sim.circle.position[0, 0]
    assert float(jnp.abs(moved)) > 1e-3


def test_env_code_has_no_implicit_rank_promotion():
    """Trace step and every observation type with rank promotion reported: no report may come
    from jaxlab code (the env or the physics under it)."""
    import traceback
    import warnings

    from jaxlab import envs

    offenders = set()

    def hook(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack() if "/jaxlab/" in f.filename]
        if frames:
            offenders.add((frames[-1].filename, frames[-1].lineno, str(message)[:80]))

    with jax.numpy_rank_promotion("warn"), warnings.catch_warnings():
        warnings.simplefilter("always")
        old, warnings.showwarning = warnings.showwarning, hook
        try:
            env, params = envs.make("kinetix-s", action_type="discrete")
            state = env.level
            jax.jit(env.step).lower(jax.random.key(1), state, jnp.int32(3), params)
            for obs_type in ("symbolic_flat", "symbolic_flat_padded", "pixels"):
                env, params = envs.make("kinetix-s", observation_type=obs_type)
                jax.jit(env.get_obs).lower(state, params)
        finally:
            warnings.showwarning = old
    assert not offenders, offenders


def test_single_observation_auto_reset_equals_select_of_both():
    """``obs_is_function_of_state`` (observe the post-reset state once) gives exactly what the
    generic path (observe both candidates, select) gives, on done and not-done steps."""
    from jaxlab import envs

    for max_timesteps in (1, 50):  # 1: every step ends the episode; 50: none does here
        env, params = envs.make(
            "kinetix-s", observation_type="symbolic_flat", max_timesteps=max_timesteps
        )
        keys = jax.random.split(jax.random.key(3), 4)
        _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        states = states.replace(timestep=states.timestep + jnp.arange(4))
        actions = jax.vmap(env.action_space(params).sample)(keys)
        once = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)
        env.obs_is_function_of_state = False
        both = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)
        for a, b in zip(jax.tree.leaves(once), jax.tree.leaves(both), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

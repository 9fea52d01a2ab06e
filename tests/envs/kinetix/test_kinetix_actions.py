"""Kinetix action semantics: unified action per type, bindings, motor_auto, clipping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.kinetix import StaticEnvParams, demo_level
from jaxlab.envs.kinetix.actions import (
    action_space,
    engine_actions,
    noop_action,
    process_action,
    random_action,
    to_unified,
)
from jaxlab.envs.spaces import Box, Discrete, MultiDiscrete

SP = StaticEnvParams.from_size("l")  # 6 joints, 2 thrusters; M = 4 motor, N = 2 thruster bindings


@pytest.fixture(scope="module")
def state():
    s = demo_level(SP)
    return s.replace(
        motor_bindings=jnp.array([0, 1, 2, 3, 1, 0], jnp.int32),
        motor_auto=jnp.array([False, False, False, False, False, True]),
        thruster_bindings=jnp.array([1, 0], jnp.int32),
    )


def test_spaces_have_the_original_sizes():
    assert action_space("continuous", SP) == Box(-1.0, 1.0, (6,))
    assert action_space("multi_discrete", SP) == MultiDiscrete([3, 3, 3, 3, 2, 2])
    assert action_space("discrete", SP) == Discrete(11)


def test_multi_discrete_mapping():
    a = jnp.array([0, 1, 2, 1, 0, 1], jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(to_unified(a, "multi_discrete", SP)), [0, 1, -1, 1, 0, 1]
    )


@pytest.mark.parametrize(
    "a,want",
    [
        (0, [-1, 0, 0, 0, 0, 0]),
        (1, [1, 0, 0, 0, 0, 0]),
        (2, [0, -1, 0, 0, 0, 0]),
        (7, [0, 0, 0, 1, 0, 0]),
        (8, [0, 0, 0, 0, 0, 0]),
        (9, [0, 0, 0, 0, 1, 0]),
        (10, [0, 0, 0, 0, 0, 1]),
    ],
)
def test_discrete_mapping(a, want):
    got = jax.jit(lambda x: to_unified(x, "discrete", SP))(jnp.int32(a))
    np.testing.assert_array_equal(np.asarray(got), want)


def test_bindings_clipping_and_motor_auto(state):
    u = jnp.array([0.5, -3.0, 2.0, -0.25, -0.7, 4.0])
    got = np.asarray(engine_actions(u, state, SP))
    # motors: u[bindings] clipped to [-1, 1], the last joint is automatic (+1);
    # thrusters: u[4 + bindings] clipped to [0, 1].
    np.testing.assert_allclose(got[:6], [0.5, -1.0, 1.0, -0.25, -1.0, 1.0])
    np.testing.assert_allclose(got[6:], [1.0, 0.0])


def test_process_action_for_each_type(state):
    md = process_action(jnp.array([2, 1, 0, 0, 1, 0], jnp.int32), "multi_discrete", state, SP)
    np.testing.assert_allclose(np.asarray(md), [-1, 1, 0, 0, 1, 1, 0, 1])
    d = process_action(jnp.int32(10), "discrete", state, SP)
    np.testing.assert_allclose(np.asarray(d), [0, 0, 0, 0, 0, 1, 1, 0])
    c = process_action(jnp.array([1, 0, 0, 0, 0.5, 0.25]), "continuous", state, SP)
    np.testing.assert_allclose(np.asarray(c), [1, 0, 0, 0, 0, 1, 0.25, 0.5])


def test_noop_and_random_actions(state):
    for t in ("continuous", "multi_discrete", "discrete"):
        e = np.asarray(process_action(noop_action(t, SP), t, state, SP))
        np.testing.assert_allclose(e, [0, 0, 0, 0, 0, 1, 0, 0])  # only the auto motor runs
        space = action_space(t, SP)
        xs = jax.vmap(lambda k, t=t: random_action(k, t, SP))(
            jax.random.split(jax.random.key(0), 32)
        )
        assert bool(jnp.all(jax.vmap(space.contains)(xs)))
    cont = jax.jit(jax.vmap(lambda k: random_action(k, "continuous", SP)))(
        jax.random.split(jax.random.key(1), 64)
    )
    assert float(cont[:, 4:].min()) >= 0.0 and float(cont[:, :4].min()) < 0.0


def test_wrong_shapes_raise():
    with pytest.raises(ValueError, match=r"multi_discrete action has shape \(5,\)"):
        to_unified(jnp.zeros(5, jnp.int32), "multi_discrete", SP)
    with pytest.raises(ValueError, match="action_type='bad'"):
        action_space("bad", SP)

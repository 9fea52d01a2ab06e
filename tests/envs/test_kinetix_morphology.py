"""``kinetix-morphology``: a Kinetix body with continuous motors for skill discovery: goal and
death roles cleared (never terminates), ``info["xy"]`` the agent's position, motors move it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.envs.kinetix.levels import load_level
from jaxlab.envs.kinetix.morphology import LEVELS, agent_masks
from jaxlab.envs.spaces import Box


def test_car_drives_both_ways_and_never_terminates():
    env, params = envs.make("kinetix-morphology", level="s/car_left", max_timesteps=100)
    space = env.action_space(params)
    assert isinstance(space, Box) and len(space.shape) == 1
    assert np.all(space.low == -1.0) and np.all(space.high == 1.0)
    roles = np.concatenate([env.level.polygon_shape_roles, env.level.circle_shape_roles])
    assert not np.isin(roles, (2, 3)).any()  # the original level has a blue goal circle

    def roll(a: float):
        obs, s = env.reset(jax.random.key(0), params)

        def body(c, k):
            o, s = c
            o, s, _, term, _, info = env.step(k, s, a * jnp.ones(space.shape), params)
            return (o, s), (info["xy"], term, s.sim.polygon.position[4])

        return jax.lax.scan(body, (obs, s), jax.random.split(jax.random.key(1), 60))[1]

    run = jax.jit(roll)  # one compiled rollout, driven forwards and backwards
    xy, term, body = (np.stack([np.asarray(r[i]) for r in map(run, (1.0, -1.0))]) for i in range(3))
    np.testing.assert_allclose(xy, body, atol=1e-6)  # the green car body is the agent
    start = 3.6
    assert xy[0, -1, 0] < start - 1.0 and xy[1, -1, 0] > start + 0.5, xy[:, -1]
    assert not term.any()  # driving through where the goal was does not end the episode


def test_agent_mask_falls_back_to_movable_shapes_and_bad_level_is_named():
    level = load_level(LEVELS / "s" / "car_left.json").state
    p, c = agent_masks(level)
    assert p.tolist() == [False] * 4 + [True] and not c.any()
    no_green = level.replace(polygon_shape_roles=jnp.zeros_like(level.polygon_shape_roles))
    p, c = agent_masks(no_green)
    assert p[4] and c[0] and not p[:4].any()  # car body and its wheel (inverse mass > 0)
    with pytest.raises(ConfigError, match="level"):
        envs.make("kinetix-morphology", level="s/no_such_level")

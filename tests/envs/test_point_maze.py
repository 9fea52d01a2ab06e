"""The 2-D point mass and the point maze: dynamics against hand-computed moves, walls, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.envs.point_mass_2d import PointMass2DState
from jaxlab.envs.point_maze import parse_layout


def _state(x, y):
    return PointMass2DState(pos=jnp.asarray([x, y], jnp.float32), t=jnp.int32(0))


def test_open_arena_moves_by_velocity_and_clips_at_the_wall():
    env, params = envs.make("point-mass-2d", goal=(0.5, 0.5))
    obs, s, r, term, trunc, info = env.step_env(
        None, _state(0.0, 0.0), jnp.array([1.0, -0.5]), params
    )
    np.testing.assert_allclose(obs, [0.2, -0.1], atol=1e-6)
    np.testing.assert_allclose(info["xy"], obs)
    np.testing.assert_allclose(r, -np.hypot(0.3, 0.6), atol=1e-6)
    assert not bool(term) and not bool(info["success"])
    obs, *_ = env.step_env(None, _state(0.95, 0.0), jnp.array([5.0, 0.0]), params)
    np.testing.assert_allclose(obs, [1.0, 0.0], atol=1e-6)  # action clipped to 1, arena to 1


def test_maze_walls_block_motion_per_axis():
    env, params = envs.make("point-maze")
    # Start cell (1, 1): x in [1, 2], y in [1, 2]; the cell below (row 2, col 1) is a wall.
    obs, *_ = env.step_env(None, _state(1.5, 1.9), jnp.array([1.0, 1.0]), params)
    np.testing.assert_allclose(obs, [1.7, 1.9], atol=1e-6)  # x moved, y blocked by the wall
    # The corridor at column 3 leads down: from (3.5, 1.9) moving down is allowed.
    obs, *_ = env.step_env(None, _state(3.5, 1.9), jnp.array([0.0, 1.0]), params)
    np.testing.assert_allclose(obs, [3.5, 2.1], atol=1e-6)


def test_random_rollouts_never_enter_walls():
    env, params = envs.make("point-maze", max_steps=30)
    free, _ = parse_layout(env.layout)

    def roll(key):
        k0, k1 = jax.random.split(key)
        _, s = env.reset(k0, params)

        def body(s, k):
            ka, ks = jax.random.split(k)
            a = jax.random.uniform(ka, (2,), minval=-1, maxval=1)
            _, s, *_, info = env.step(ks, s, a, params)
            return s, info["xy"]

        return jax.lax.scan(body, s, jax.random.split(k1, 30))[1]

    xy = np.asarray(jax.jit(jax.vmap(roll))(jax.random.split(jax.random.key(0), 16))).reshape(-1, 2)
    cells = np.floor(xy).astype(int)
    assert free[cells[:, 1], cells[:, 0]].all()
    assert len({tuple(c) for c in cells}) >= 2  # the walker does leave its start cell


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("point-maze", {"layout": ("###", "###")}, "layout"),
        ("point-maze", {"layout": ("#.", "#")}, "layout"),
        ("point-maze", {"goal": (9.0, 1.0)}, "goal"),
        ("point-maze", {"goal": (0.5, 0.5)}, "goal"),  # inside the border wall
        ("point-mass-2d", {"goal": (0.0, 2.0)}, "goal"),
        ("point-mass-2d", {"size": 0.0}, "size"),
        ("point-mass-2d", {"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_input_names_the_field(name, options, field):
    with pytest.raises(ConfigError, match=field):
        envs.make(name, **options)

"""The 2-D point mass of ``point_mass_2d`` inside a maze given as a small text layout.

Registered as ``"point-maze"``. The layout is a tuple of equal-length rows; ``#`` is a wall cell,
``.`` a free cell, ``S`` the (free) start cell (default: the first free cell in reading order).
Cell ``(row i, column j)`` is the unit square ``x in [j, j+1], y in [i, i+1]``, so positions live
in ``[0, W] x [0, H]``. A step moves along x, then along y, each part rejected when it would end
inside a wall cell or outside the grid (``max_speed < 1`` so no part can jump a wall):

    x' = x + v_x  if cell(x + v_x, y) is free else x;   y' = y + v_y  if cell(x', y + v_y) is free else y

Reward, horizon, ``info["xy"]``/``info["success"]`` as in ``point_mass_2d``; resets draw
``p_0 = centre(S) + U(-reset_noise, reset_noise)^2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.config import ConfigError
from jaxlab.envs.point_mass_2d import PointMass2D, PointMass2DParams, PointMass2DState
from jaxlab.envs.spaces import Box

#: A small U-shaped maze: start top-left, the way to the bottom-left runs around the wall.
U_MAZE = (
    "#####",
    "#S..#",
    "###.#",
    "#...#",
    "#####",
)


def parse_layout(layout) -> tuple[np.ndarray, tuple[int, int]]:
    """``(free [H, W] bool, start (row, col))`` of a layout; ``ConfigError('layout', ...)`` if bad."""
    if isinstance(layout, str):
        layout = tuple(r for r in layout.strip().splitlines() if r)
    rows = tuple(layout) if isinstance(layout, list | tuple) else ()
    if not rows or not all(isinstance(r, str) and r for r in rows):
        raise ConfigError("layout", layout, "a non-empty sequence of non-empty strings")
    if len({len(r) for r in rows}) != 1 or set("".join(rows)) - set("#.S"):
        raise ConfigError("layout", layout, "rows of equal length made of '#', '.' and 'S'")
    grid = np.array([list(r) for r in rows])
    free = grid != "#"
    if not free.any():
        raise ConfigError("layout", layout, "at least one free cell ('.' or 'S')")
    starts = np.argwhere(grid == "S")
    if len(starts) > 1:
        raise ConfigError("layout", layout, "at most one start cell 'S'")
    start = starts[0] if len(starts) else np.argwhere(free)[0]
    return free, (int(start[0]), int(start[1]))


class PointMaze(PointMass2D):
    """The point mass in the maze ``layout`` (static)."""

    def __init__(self, layout=U_MAZE, auto_reset: bool = True):
        free, start = parse_layout(layout)
        self.layout = tuple(layout) if not isinstance(layout, str) else layout
        self.free = free
        self.height, self.width = free.shape
        self.start = start
        self.size = float(max(free.shape))
        self.auto_reset = bool(auto_reset)

    @property
    def default_params(self) -> PointMass2DParams:
        goal = np.argwhere(self.free)[-1]  # the last free cell in reading order
        return PointMass2DParams(goal=(float(goal[1]) + 0.5, float(goal[0]) + 0.5), goal_radius=0.3)

    def start_xy(self) -> tuple[float, float]:
        """Centre of the start cell as ``(x, y)``."""
        return float(self.start[1]) + 0.5, float(self.start[0]) + 0.5

    def reset_env(self, key, params: PointMass2DParams):
        noise = jnp.asarray(params.reset_noise, jnp.float32)
        pos = jnp.asarray(self.start_xy(), jnp.float32)
        pos = pos + jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0) * noise
        state = PointMass2DState(pos=pos.astype(jnp.float32), t=jnp.int32(0))
        return self.get_obs(state, params), state

    def is_free(self, pos: Float[Array, " 2"]):
        """Whether ``pos = (x, y)`` lies inside the grid and in a free cell."""
        inside = (pos[0] >= 0) & (pos[0] <= self.width) & (pos[1] >= 0) & (pos[1] <= self.height)
        col = jnp.clip(jnp.floor(pos[0]).astype(jnp.int32), 0, self.width - 1)
        row = jnp.clip(jnp.floor(pos[1]).astype(jnp.int32), 0, self.height - 1)
        return inside & jnp.asarray(self.free)[row, col]

    def move(self, pos, velocity):
        px = pos.at[0].add(velocity[0])
        pos = jnp.where(self.is_free(px), px, pos)
        py = pos.at[1].add(velocity[1])
        return jnp.where(self.is_free(py), py, pos)

    def observation_space(self, params=None) -> Box:
        return Box(0.0, [float(self.width), float(self.height)], (2,), jnp.float32)
